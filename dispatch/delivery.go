package dispatch

import "github.com/hopgate/hopgate/internal/gate"

// The delivery rule (docs/tenants.md): a charge is final only once the
// answer's last byte has been handed to the socket. The engine tells its
// caller just before that last write (Request.Delivering), with what the
// answer is charged as then; the caller records it (package wallet marks
// the request's hold "delivering"), and charges after End, by which time
// the last write and its flush are done. A process killed between the two
// leaves the charge visibly undecided instead of guessed.
//
// The last write is the complete body of a buffered answer, the closing
// frame of a stream that completed, or the in-band error frame of a
// stream cut after commit (by its upstream or by shutdown): a cut stream
// is charged for what it delivered, and that is known before its error
// frame. A binary body (audio) has no last write it can tell apart from
// the others (its end is seen only after its last bytes went out), and
// its charge does not depend on how much of it was sent (the estimated
// input: no usage comes with it), so it is marked before its first byte.
// A client that left is noticed only after its last byte was handed over:
// there is no later write to mark before, and it is charged after its end
// as before (docs/tenants.md states that window).

// delivering calls the request's Delivering hook, once per request, just
// before the answer's last write: the complete body of a buffered answer,
// or the closing frame of a stream that completed; u is the serving hop's
// usage. It reports whether it did (the request is charged): a buffered
// body is then flushed at once, so that the charge made after End follows
// its hand-over to the socket; an uncharged one is left to net/http to
// send when the handler returns.
func (r *responder) delivering(hook func(Usage, Delivered), u gate.Usage) bool {
	return r.deliveringAs(hook, Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, Present: u.Present})
}

// deliveringAs is delivering with the request's usage as the call keeps
// it (the hop that served the answer, or none).
func (r *responder) deliveringAs(hook func(Usage, Delivered), u Usage) bool {
	if hook == nil || r.marked {
		return false
	}
	r.marked = true
	hook(u, r.counted)
	return true
}

// deliveringCut marks a committed stream about to end with its in-band
// error frame: charged for what it delivered (u, the call's usage when
// the serving hop reported one, else the estimate from r.counted).
func (r *responder) deliveringCut(hook func(Usage, Delivered), u Usage) {
	if r.answered {
		r.deliveringAs(hook, u)
	}
}

package dispatch

import "github.com/hopgate/hopgate/internal/gate"

// The delivery rule (docs/tenants.md): a charge is final only once the
// answer's last byte has been handed to the socket. The engine tells its
// caller just before that last write (Request.Delivering), with what the
// answer is charged as then; the caller records it (package wallet marks
// the request's hold "delivering"), and charges after End, by which time
// the last write and its flush are done. A process killed between the two
// leaves the charge visibly undecided instead of guessed.

// delivering calls the request's Delivering hook, once per request, just
// before the answer's last write: the complete body of a buffered answer,
// or the closing frame of a stream that completed; u is the serving hop's
// usage. It reports whether it did (the request is charged): a buffered
// body is then flushed at once, so that the charge made after End follows
// its hand-over to the socket; an uncharged one is left to net/http to
// send when the handler returns.
func (r *responder) delivering(hook func(Usage, Delivered), u gate.Usage) bool {
	if hook == nil || r.marked {
		return false
	}
	r.marked = true
	hook(Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, Present: u.Present}, r.counted)
	return true
}

package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/retryafter"
	"github.com/hopgate/hopgate/telemetry"
)

// Resume modes (hopgate.resume.mode).
const (
	resumePrefill = "prefill"
	resumeReplay  = "replay"
)

var errDiverged = errors.New("the replayed answer diverged from the text already delivered")

// resume continues a committed chat stream that was cut (mid_stream:
// resume, opt-in). The next entries of the chain are asked to continue: by
// assistant prefill where the entry declares prefill, else by replaying the
// request and forwarding only what follows the identical delivered prefix.
// It reports whether the client's stream was completed; when it was not,
// the caller ends the stream with the original interruption, so a rejected
// continuation never masks the original failure.
func (c *call) resume(m *config.Model, failed config.Entry) bool {
	if c.req.Events != ChatEvents {
		return false
	}
	// A ticket taken and not yet recorded (held): a panic in a
	// continuation gives it back, or a half-open channel's only trial slot
	// would stay taken until the breaker's trial timeout.
	var (
		heldBr *breaker.Breaker
		held   breaker.Ticket
	)
	defer func() {
		if heldBr != nil {
			heldBr.Done(held, breaker.Excluded)
		}
	}()
	after := false
	for _, entry := range m.Chain {
		if !after {
			after = entry.Channel == failed.Channel && entry.UpstreamModel == failed.UpstreamModel
			continue
		}
		br := c.e.breakerFor(entry.Channel)
		modes := []string{resumeReplay}
		if entry.Prefill && c.req.Operation == config.OpChat {
			// Prefill appends to "messages": /v1/completions has none.
			modes = []string{resumePrefill, resumeReplay}
		}
		for i, mode := range modes {
			// The first mode asks the breaker; a later one is a replay on
			// the same channel after it rejected a prefill, and asks again
			// (the rejection was recorded). No ticket is taken that no
			// attempt answers.
			t, ok := br.Allow()
			if !ok {
				if i == 0 {
					c.steps = append(c.steps, telemetry.Step{Channel: entry.Channel.ID, Result: "open"})
				}
				break
			}
			heldBr, held = br, t
			a := c.newAttempt(m, entry, 0, mode)
			err := a.continueStream()
			a.end(err)
			heldBr = nil
			c.recordBreaker(br, t, err)
			if err == nil {
				return true
			}
			if err.Class() == classify.Canceled {
				return false
			}
			if !a.rejected {
				break // the channel failed: not worth a replay on it
			}
		}
	}
	return false
}

// continueStream runs one continuation attempt: it sends the request (with
// the delivered text as an assistant prefix, or as it was), then runs the
// same frame loop as a committed stream (pass) with continueFrame.
func (a *attempt) continueStream() *classify.HopError {
	defer a.cancel(nil)
	c := a.c
	opts := reqbody.Options{Model: a.entry.UpstreamModel, IncludeUsage: !c.req.Fields.IncludeUsage}
	if a.mode == resumePrefill {
		prefix := string(c.rw.delivered)
		opts.AssistantPrefix = &prefix
		if a.dia.cross {
			// Anthropic refuses a prefill ending in whitespace: the
			// translation trims it, and the model then starts with it
			// again. The client already has it: it is skipped once.
			a.skipWS = len(prefix) - len(strings.TrimRight(prefix, " \t\r\n"))
		}
	}
	resp, err := a.send(opts)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if cl := classify.Status(resp.StatusCode); cl != classify.Success {
		// The status keeps its class: a 400 to a continuation request (a
		// channel that refuses prefill) is not a channel failure and must
		// not count against its breaker; a 429 or 5xx is and does.
		// Only a final status means "this request shape is refused" and is
		// worth a replay on the same channel; a 429, 401/403 or 408 is the
		// channel failing, and its Retry-After holds the channel out.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, DefaultMaxErrorBody))
		e := classify.NewStatus(resp.StatusCode)
		if classify.RetryAfterStatus(resp.StatusCode) {
			e.RetryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), c.e.clock.Now(), maxRetryAfterHeader)
		}
		a.rejected = cl == classify.Final
		return e
	}
	if mt := mediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" && !(a.up.EventStream() && mt == "application/vnd.amazon.eventstream") {
		a.rejected = true
		return &classify.HopError{Kind: classify.KindNotAStream, Status: resp.StatusCode}
	}
	// Prefill continues after the delivered text; a replay must first
	// repeat it exactly.
	a.passing = a.mode == resumePrefill
	a.codec = a.dia.newCodec()
	rd := a.frames(resp)
	defer releaseFrames(rd)
	return a.pass(rd, a.continueFrame)
}

// continueFrame handles one frame of a continuation: frames that open the
// continuation (a role-only chunk) are dropped, a replay is checked against
// the delivered text until it goes beyond it, and only new text reaches
// the client, one frame and one flush at a time.
func (a *attempt) continueFrame(it *frameItem) (*classify.HopError, bool) {
	c := a.c
	if it.err != nil {
		switch {
		case c.clientCtx.Err() != nil:
			return &classify.HopError{Kind: classify.KindCanceled, Cause: it.err}, true
		case errors.Is(it.err, io.EOF) && c.rw.finish && a.passing:
			if !c.rw.done {
				c.rw.delivering(c.req.Delivering, a.usage) // the closing frame is the last write
				_ = c.rw.frame(doneFrame)
			}
			return a.resumed(), true
		case context.Cause(a.ctx) == errIdleTimeout:
			return &classify.HopError{Kind: classify.KindStalled, Status: a.status, Cause: it.err}, true
		}
		return &classify.HopError{Kind: classify.KindCut, Status: a.status, Cause: it.err}, true
	}
	switch it.info.Kind {
	case gate.Malformed:
		a.malformed++
		return nil, false
	case gate.Error:
		return &classify.HopError{Kind: classify.KindStreamError, Status: a.status}, true
	}
	if it.info.UsageOnly {
		a.usage = it.info.Usage
		if !c.req.Fields.IncludeUsage {
			return nil, false
		}
	}
	if it.info.ToolCalls {
		// Tool-call deltas cannot be verified against delivered text.
		return &classify.HopError{Kind: classify.KindDiverged, Status: a.status}, true
	}
	if !a.passing {
		return a.verify(it)
	}
	if it.info.Kind == gate.Hold && !it.info.UsageOnly {
		return nil, false // role-only openers of the continuation
	}
	if a.skipWS > 0 && len(it.text) > 0 {
		n := 0
		for n < len(it.text) && n < a.skipWS && strings.IndexByte(" \t\r\n", it.text[n]) >= 0 {
			n++
		}
		a.skipWS = 0
		plain := it.info.Kind == gate.Content && !it.info.FinishReason && !it.info.ToolCalls && !it.info.Usage.Present
		if n > 0 && plain {
			// The whitespace the prefill lost, sent again: the client
			// has it already; the rest of the text as a chunk of its own.
			// (A frame carrying more than text goes as it came.)
			rest := it.text[n:]
			c.rw.delivered = append(c.rw.delivered, rest...)
			if len(rest) > 0 && !c.rw.frame(suffixChunk(rest, it.info.Model)) {
				return &classify.HopError{Kind: classify.KindCanceled}, true
			}
			return nil, false
		}
	}
	a.note(it)
	if it.info.Kind == gate.Done {
		c.rw.delivering(c.req.Delivering, a.usage) // the closing frame is the last write
	}
	if !c.rw.frame(it.raw) {
		return &classify.HopError{Kind: classify.KindCanceled}, true
	}
	if it.info.Kind == gate.Done {
		c.rw.done = true
		return a.resumed(), true
	}
	return nil, false
}

// verify checks a replayed frame against the delivered text: the text
// received so far must equal the delivered prefix until it extends beyond
// it; what lies beyond is sent as a chunk of its own.
func (a *attempt) verify(it *frameItem) (*classify.HopError, bool) {
	c := a.c
	if it.info.Kind == gate.Hold {
		return nil, false
	}
	a.got = append(a.got, it.text...)
	delivered := c.rw.delivered
	n := min(len(a.got), len(delivered))
	if !bytes.Equal(a.got[:n], delivered[:n]) {
		a.span.Error(errDiverged)
		return &classify.HopError{Kind: classify.KindDiverged, Status: a.status}, true
	}
	if len(a.got) < len(delivered) {
		if it.info.FinishReason || it.info.Kind == gate.Done {
			a.span.Error(errDiverged)
			return &classify.HopError{Kind: classify.KindDiverged, Status: a.status}, true
		}
		return nil, false
	}
	a.passing = true
	if suffix := a.got[len(delivered):]; len(suffix) > 0 {
		// The frame straddles the boundary: send only what the client has
		// not seen, as a chunk of its own.
		c.rw.delivered = append(c.rw.delivered, suffix...)
		c.rw.counted.TextBytes += int64(len(suffix))
		if !c.rw.frame(suffixChunk(suffix, it.info.Model)) {
			return &classify.HopError{Kind: classify.KindCanceled}, true
		}
	}
	if it.info.FinishReason {
		c.rw.finish = true
		if !c.rw.frame(finishChunk(it.info.Model)) {
			return &classify.HopError{Kind: classify.KindCanceled}, true
		}
	}
	return nil, false
}

// resumed records a completed continuation.
func (a *attempt) resumed() *classify.HopError {
	a.span.StreamEnd(telemetry.StreamResumed, "")
	return nil
}

func suffixChunk(text []byte, model string) []byte {
	content, _ := json.Marshal(string(text))
	mdl, _ := json.Marshal(model)
	b := make([]byte, 0, len(content)+160)
	b = append(b, `data: {"object":"chat.completion.chunk","model":`...)
	b = append(b, mdl...)
	b = append(b, `,"choices":[{"index":0,"delta":{"content":`...)
	b = append(b, content...)
	b = append(b, `},"finish_reason":null}]}`+"\n\n"...)
	return b
}

func finishChunk(model string) []byte {
	mdl, _ := json.Marshal(model)
	return []byte(`data: {"object":"chat.completion.chunk","model":` + string(mdl) +
		`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
}

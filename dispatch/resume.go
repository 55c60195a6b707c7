package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/retryafter"
	"github.com/hopgate/hopgate/internal/sse"
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
func (c *call) resume(ctx context.Context, m *config.Model, failed config.Entry, st *streamState, why string) bool {
	if c.req.Events != ChatEvents {
		return false
	}
	after := false
	for _, entry := range m.Chain {
		if !after {
			after = entry.Channel == failed.Channel && entry.UpstreamModel == failed.UpstreamModel
			continue
		}
		br := c.e.breakerFor(entry.Channel)
		t, ok := br.Allow()
		if !ok {
			c.steps = append(c.steps, telemetry.Step{Channel: entry.Channel.ID, Result: "open"})
			continue
		}
		modes := []string{resumeReplay}
		if entry.Prefill && c.req.Operation == config.OpChat {
			// Prefill appends to "messages": /v1/completions has none.
			modes = []string{resumePrefill, resumeReplay}
		}
		for _, mode := range modes {
			res, rejected := c.continueHop(m, entry, st, mode)
			c.recordBreaker(br, t, res)
			if res.class == classify.Success {
				return true
			}
			if res.class == classify.Canceled {
				return false
			}
			if !rejected {
				break // the channel failed: not worth a replay on it
			}
			// A prefill the channel rejected: replay on the same channel.
			if t, ok = br.Allow(); !ok {
				break
			}
		}
	}
	return false
}

// continueHop runs one continuation attempt. rejected reports an upstream
// 4xx to the continuation request (the channel refused the prefill).
func (c *call) continueHop(m *config.Model, entry config.Entry, st *streamState, mode string) (res hopResult, rejected bool) {
	hopCtx, cancelHop := context.WithCancelCause(c.clientCtx)
	defer cancelHop(nil)
	hs := c.startHop(trace.ContextWithSpan(hopCtx, c.span), m, entry,
		attribute.String(telemetry.AttrContinuationMode, mode),
		attribute.Int(telemetry.AttrResumeDelivered, len(st.delivered)))
	hctx, span := hs.ctx, hs.span
	defer func() {
		hs.end(c, res)
		c.steps = append(c.steps, telemetry.Step{Channel: entry.Channel.ID, Result: mode + "_" + res.label})
	}()

	opts := reqbody.Options{Model: entry.UpstreamModel, IncludeUsage: !c.req.Fields.IncludeUsage}
	if mode == resumePrefill {
		prefix := string(st.delivered)
		opts.AssistantPrefix = &prefix
	}
	resp, fail, ok := c.send(hopCtx, &hs, cancelHop, m, entry, opts)
	if !ok {
		return fail, false
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
		res := hopResult{class: cl, status: resp.StatusCode, label: strconv.Itoa(resp.StatusCode)}
		if classify.RetryAfterStatus(resp.StatusCode) {
			res.retryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), c.e.clock.Now(), maxRetryAfterHeader)
		}
		return res, cl == classify.Final
	}
	if mediaType(resp.Header.Get("Content-Type")) != "text/event-stream" {
		return hopResult{class: classify.Retryable, status: resp.StatusCode, label: "not_a_stream"}, true
	}

	feed := c.startFrames(sse.NewReader(resp.Body, c.e.maxFrame), c.inspector(), true, false)
	defer feed.close(cancelHop, resp.Body)
	items := feed.items

	var idle clockwork.Timer
	var idleC <-chan time.Time
	if d := m.Policy.StreamIdleTimeout; d > 0 {
		idle = c.e.clock.NewTimer(d)
		defer idle.Stop()
		idleC = idle.Chan()
	}
	// Replay: the text received so far must equal the delivered prefix
	// until it extends beyond it.
	var got []byte
	passing := mode == resumePrefill
	fail1 := func(label string) (hopResult, bool) {
		return hopResult{class: classify.Retryable, status: resp.StatusCode, label: label}, false
	}
	for {
		select {
		case it := <-items:
			if idle != nil {
				idle.Reset(m.Policy.StreamIdleTimeout)
			}
			if it.err != nil {
				if c.clientCtx.Err() != nil {
					return hopResult{class: classify.Canceled, label: "canceled"}, false
				}
				if errors.Is(it.err, io.EOF) && st.finish && passing {
					if !st.done {
						_ = c.writeFrame([]byte("data: [DONE]\n\n"))
					}
					return c.resumed(hctx, span, m, entry, st), false
				}
				return fail1("cut")
			}
			switch it.info.Kind {
			case gate.Malformed:
				st.malformed++
				continue
			case gate.Error:
				return fail1("stream_error")
			}
			if it.info.UsageOnly {
				st.usage = it.info.Usage
				if !c.req.Fields.IncludeUsage {
					continue
				}
			}
			if it.info.ToolCalls {
				// Tool-call deltas cannot be verified against delivered text.
				return fail1("diverged")
			}
			if !passing {
				if it.info.Kind == gate.Hold {
					continue
				}
				got = append(got, it.text...)
				n := min(len(got), len(st.delivered))
				if !bytes.Equal(got[:n], st.delivered[:n]) {
					span.RecordError(errDiverged)
					return fail1("diverged")
				}
				if len(got) < len(st.delivered) {
					if it.info.FinishReason || it.info.Kind == gate.Done {
						span.RecordError(errDiverged)
						return fail1("diverged")
					}
					continue
				}
				passing = true
				if suffix := got[len(st.delivered):]; len(suffix) > 0 {
					// The frame straddles the boundary: send only what the
					// client has not seen, as a chunk of its own.
					st.delivered = append(st.delivered, suffix...)
					if !c.writeFrame(suffixChunk(suffix, it.info.Model)) {
						return hopResult{class: classify.Canceled, label: "canceled"}, false
					}
				}
				if it.info.FinishReason {
					st.finish = true
					if !c.writeFrame(finishChunk(it.info.Model)) {
						return hopResult{class: classify.Canceled, label: "canceled"}, false
					}
				}
				continue
			}
			if it.info.Kind == gate.Hold && !it.info.UsageOnly {
				continue // role-only openers of the continuation
			}
			if !c.deliver(it, st) {
				return hopResult{class: classify.Canceled, label: "canceled"}, false
			}
			if it.info.Kind == gate.Done {
				st.done = true
				return c.resumed(hctx, span, m, entry, st), false
			}
		case <-idleC:
			return fail1("stalled")
		case <-c.clientCtx.Done():
			return hopResult{class: classify.Canceled, label: "canceled"}, false
		}
	}
}

// resumed records a completed continuation.
func (c *call) resumed(ctx context.Context, span trace.Span, m *config.Model, entry config.Entry, st *streamState) hopResult {
	c.recordUsage(ctx, span, m, entry, st.usage, st.model)
	c.outcome = OutcomeFailoverOK
	span.SetAttributes(attribute.String(telemetry.AttrStreamEnd, "resumed"))
	return hopResult{class: classify.Success, done: true, status: http.StatusOK, label: "ok"}
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

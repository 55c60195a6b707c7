package dispatch

import (
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/translate"
	"github.com/hopgate/hopgate/telemetry"
)

// The Responses API on Anthropic-family channels (DESIGN.md §14): the
// request, answer and stream translations are package translate's; this
// file holds the hop's codec and the walk's rule for what only the OpenAI
// family can serve.

// toResponsesCodec translates an Anthropic stream for an OpenAI Responses
// client.
type toResponsesCodec struct {
	t   *translate.MessagesToResponsesStream
	out []byte
}

func (k *toResponsesCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	if !f.HasData {
		return nil, gate.Info{Kind: gate.Hold}
	}
	var info gate.Info
	k.out, info = k.t.Event(k.out[:0], f.Event, f.Data)
	return k.out, info
}

func (k *toResponsesCodec) end() ([]byte, bool) {
	var ok bool
	k.out, ok = k.t.End(k.out[:0])
	return k.out, ok
}

// interrupt ends a committed translated stream in Responses' own terms:
// the error event and response.failed, numbered after what was sent.
func (k *toResponsesCodec) interrupt(code, msg string) []byte {
	return k.t.InterruptWith(nil, code, msg)
}

// interrupt ends a committed passed-through Responses stream with
// Responses' error event, numbered after the upstream's last event (OpenAI
// numbers a stream's events from 0, one by one): openai-go raises it as
// the stream's error, where the chat-completions error frame was a data
// event it could not type.
func (k *responsesCodec) interrupt(code, msg string) []byte {
	return translate.ResponsesErrorEvent(nil, k.events, code, msg)
}

// interrupter is a codec that writes its own in-band end of an
// interrupted stream (its events are numbered).
type interrupter interface {
	interrupt(code, msg string) []byte
}

// cutFrame is the in-band error ending a committed stream of req read by
// k: the codec's own, or the client dialect's frame.
func cutFrame(req *Request, requestID string, k codec, msg string) []byte {
	if in, ok := k.(interrupter); ok {
		return in.interrupt(translate.CodeStreamInterrupted, msg)
	}
	return interruptFrame(req, requestID, msg)
}

// translateResponses translates a Responses request for an Anthropic-family
// channel.
func (d *dialect) translateResponses(body []byte, o translate.ToMessagesOptions) ([]byte, error) {
	key := translate.ReplayKey(d.entry.Channel.ID, d.entry.UpstreamModel)
	tr, err := translate.ResponsesToMessages(body, translate.ResponsesOptions{
		ToMessagesOptions: o, Thinking: translate.ThinkingAllowed(d.entry.UpstreamModel), Replay: key,
	})
	if err != nil {
		return nil, err
	}
	if tr.EncryptedReasoning {
		d.replay = key
	}
	d.span.Dropped(tr.Dropped, nil)
	return tr.Body, nil
}

// nativeOnly decides, before the walk, what DESIGN §14 says of a Responses
// request using a feature only the OpenAI family serves (state kept by
// OpenAI, a hosted tool): when the chains to walk (fallbacks included)
// also have an OpenAI-family entry, it returns the field, and the walk
// skips every Anthropic-family entry as the step "unsupported_request",
// with no breaker effect. Otherwise it returns "": a chain of Anthropic
// entries only is refused by the first hop's translation, a final 400
// unsupported_parameter naming the field before any upstream call, and a
// chain of OpenAI entries only passes the request through unread.
func nativeOnly(req *Request, models []*config.Model) string {
	if req.Events != ResponsesEvents {
		return ""
	}
	var openai, anthropic bool
	for _, m := range models {
		for _, e := range m.Chain {
			if config.AnthropicFamily(e.Channel.Provider) {
				anthropic = true
			} else {
				openai = true
			}
		}
	}
	if !openai || !anthropic {
		return ""
	}
	return translate.ResponsesNativeOnly(req.Body)
}

// unsupportedStep is the failover path's step of an entry the walk skipped
// because its family cannot serve the request: nothing was sent, and its
// breaker is not told.
func unsupportedStep(entry config.Entry) telemetry.Step {
	return telemetry.Step{Channel: entry.Channel.ID, Result: classify.KindUnsupported.String()}
}

package dispatch

import (
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/translate"
)

// codec reads the frames of one upstream stream for the client: it
// classifies each frame for the gate and returns the bytes the client gets
// for it, in the client's dialect. The same dialect in and out passes the
// frame's bytes through untouched (the fast path); across families the
// frame is translated (package translate). Frames are given in order, by
// one goroutine at a time.
type codec interface {
	// frame classifies f and returns the client's bytes for it (possibly
	// none), valid until the next call.
	frame(f sse.Frame) ([]byte, gate.Info)
	// end is called at a clean end of the upstream stream: it returns the
	// bytes that complete the client's stream ([DONE], message_stop) and
	// whether the answer was complete (a finish was seen); an incomplete
	// one is interrupted, never presented as complete.
	end() ([]byte, bool)
}

// frameSource yields an upstream stream's frames: SSE, or Bedrock's event
// stream read as SSE frames.
type frameSource interface {
	Next() (sse.Frame, error)
	Buffered() bool
}

// chatCodec passes OpenAI chat (or completions) chunks through; a
// finished stream ends with [DONE].
type chatCodec struct {
	in           gate.ChatInspector
	finish, done bool
}

func (k *chatCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	info := k.in.Inspect(f)
	k.finish = k.finish || info.FinishReason
	k.done = k.done || info.Kind == gate.Done
	return f.Raw, info
}

func (k *chatCodec) end() ([]byte, bool) {
	if !k.finish {
		return nil, false
	}
	if k.done {
		return nil, true
	}
	k.done = true
	return doneFrame, true
}

// responsesCodec passes OpenAI Responses events through.
type responsesCodec struct {
	finish bool
	events int64 // data events passed: the next sequence_number (interrupt)
}

func (k *responsesCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	info := gate.InspectResponses(f)
	k.finish = k.finish || info.FinishReason || info.Kind == gate.Done
	if f.HasData && info.Kind != gate.Done {
		k.events++
	}
	return f.Raw, info
}

func (k *responsesCodec) end() ([]byte, bool) { return nil, k.finish }

// messagesCodec passes Anthropic events through to an Anthropic client (the
// frames of Bedrock's event stream arrive as SSE frames already). Frames
// are classified by the same rules as translated ones: the transcoder runs
// for its classification, its output written into a reused buffer.
type messagesCodec struct {
	t       *translate.MessagesToChatStream
	scratch []byte
	finish  bool
	done    bool
}

// messageStop completes an Anthropic stream that finished but lost its end.
var messageStop = []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")

func (k *messagesCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	if k.t == nil {
		k.t = translate.NewMessagesToChatStream(translate.ChatStreamOptions{})
	}
	if !f.HasData {
		return f.Raw, gate.Info{Kind: gate.Hold} // a comment or keep-alive
	}
	var info gate.Info
	k.scratch, info = k.t.Event(k.scratch[:0], f.Event, f.Data)
	k.finish = k.finish || info.FinishReason
	k.done = k.done || info.Kind == gate.Done
	return f.Raw, info
}

func (k *messagesCodec) end() ([]byte, bool) {
	if !k.finish {
		return nil, false
	}
	if k.done {
		return nil, true
	}
	k.done = true
	return messageStop, true
}

// toChatCodec translates an Anthropic stream for an OpenAI chat client.
type toChatCodec struct {
	t   *translate.MessagesToChatStream
	out []byte
}

func (k *toChatCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	if !f.HasData {
		return nil, gate.Info{Kind: gate.Hold}
	}
	var info gate.Info
	k.out, info = k.t.Event(k.out[:0], f.Event, f.Data)
	return k.out, info
}

func (k *toChatCodec) end() ([]byte, bool) {
	var ok bool
	k.out, ok = k.t.End(k.out[:0])
	return k.out, ok
}

// toMessagesCodec translates an OpenAI chat stream for an Anthropic client.
type toMessagesCodec struct {
	t   *translate.ChatToMessagesStream
	out []byte
	// prompt is the count message_start reports, taken at the first frame
	// that may write it (nil once taken).
	prompt *promptCount
}

func (k *toMessagesCodec) frame(f sse.Frame) ([]byte, gate.Info) {
	if !f.HasData {
		return nil, gate.Info{Kind: gate.Hold}
	}
	if k.prompt != nil {
		k.t.SetPromptTokens(k.prompt.wait())
		k.prompt = nil
	}
	var info gate.Info
	k.out, info = k.t.Event(k.out[:0], f.Event, f.Data)
	return k.out, info
}

func (k *toMessagesCodec) end() ([]byte, bool) {
	var ok bool
	k.out, ok = k.t.End(k.out[:0])
	return k.out, ok
}

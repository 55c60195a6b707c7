package translate

import (
	"encoding/json"

	"github.com/hopgate/hopgate/internal/gate"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// ChatStreamOptions configure a MessagesToChatStream.
type ChatStreamOptions struct {
	// IncludeUsage writes the usage chunk (choices [] and usage) before
	// [DONE]: the client asked for stream_options.include_usage. Usage is
	// reported in every Info either way, for billing.
	IncludeUsage bool
	// Created is the chunks' "created" (Unix seconds, the caller's clock).
	Created int64
}

// MessagesToChatStream transcodes one Anthropic Messages stream (SSE
// events, or the same event objects from Bedrock's event stream) into
// OpenAI chat.completion.chunk SSE frames: a role chunk first, text and
// tool-call deltas, a finish chunk, the usage chunk when asked, and
// data: [DONE]. Not safe for concurrent use.
type MessagesToChatStream struct {
	opt      ChatStreamOptions
	head     []byte // `data: {"id":…,"model":…,"choices":[` of every chunk
	id       string
	model    string
	started  bool // role chunk written
	finished bool // finish chunk written
	done     bool // [DONE] written
	blocks   []blockState
	tools    int // tool calls so far: the next OpenAI tool index
	usage    anUsage
	ev       anEvent // reused decode target
	scratch  []byte  // unescaped text of the fast path's last delta
	slow     bool    // tests: never take the fast path
}

type blockKind uint8

const (
	blockOther blockKind = iota
	blockText
	blockTool
	blockThinking
)

type blockState struct {
	kind blockKind
	tool int  // OpenAI tool_calls index
	args bool // some arguments were written
}

// anEvent is every Anthropic stream event.
type anEvent struct {
	Type         string       `json:"type"`
	Message      *anMessageIn `json:"message"`
	Index        int          `json:"index"`
	ContentBlock *anRespIn    `json:"content_block"`
	Delta        *anDelta     `json:"delta"`
	Usage        *anUsageIn   `json:"usage"`
	Error        *anErrorObj  `json:"error"`
}

type anDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	Thinking    string `json:"thinking"`
	StopReason  string `json:"stop_reason"`
	Signature   string `json:"signature"`
}

// anUsageIn is message_delta's usage: cumulative counts, each optional (a
// missing count keeps message_start's).
type anUsageIn struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// maxBlocks bounds per-stream state against an upstream sending absurd
// block indexes; real answers have a handful of blocks.
const maxBlocks = 4096

// NewMessagesToChatStream starts a transcoder for one stream.
func NewMessagesToChatStream(opt ChatStreamOptions) *MessagesToChatStream {
	return &MessagesToChatStream{opt: opt}
}

// Event translates one upstream event: name is the SSE event name ("" when
// absent, as from Bedrock), data the event's JSON. It appends the OpenAI
// frames (possibly none) to dst and returns them with the event's
// classification for the stream gate. An Anthropic error event becomes an
// OpenAI error frame (Info.Kind Error): before commit the caller discards
// it with the hop; after commit it is the client's in-band error.
func (s *MessagesToChatStream) Event(dst []byte, name string, data []byte) ([]byte, gate.Info) {
	if !s.slow {
		if d, scratch, ok := readFastDelta(data, s.scratch); ok {
			s.scratch = scratch
			if s.done {
				return dst, gate.Info{Kind: gate.Hold, Model: s.model} // nothing follows [DONE]
			}
			return s.delta(dst, d)
		}
	}
	ev := &s.ev
	*ev = anEvent{}
	if err := json.Unmarshal(data, ev); err != nil {
		if name == "error" {
			// Not Anthropic's shape: a Bedrock exception event
			// ({"message": …}) the caller passes as an error, or text.
			msg, _, _, _, _ := parseError(data)
			return appendChatError(dst, "api_error", msg), gate.Info{Kind: gate.Error, ErrorMessage: truncateMessage(msg)}
		}
		return dst, gate.Info{Kind: gate.Malformed}
	}
	typ := ev.Type
	if typ == "" {
		typ = name
	}
	info := gate.Info{Kind: gate.Hold, Model: s.model}
	if s.done {
		return dst, info // nothing follows [DONE]
	}
	switch typ {
	case "error":
		e := anErrorObj{Type: "api_error"}
		if ev.Error != nil {
			e = *ev.Error
		}
		info.Kind, info.ErrorMessage = gate.Error, truncateMessage(e.Message)
		return appendChatError(dst, e.Type, e.Message), info
	case "message_start":
		if m := ev.Message; m != nil {
			if !s.started {
				s.id, s.model = m.ID, m.Model
				s.head = nil
			}
			if m.Usage != nil {
				s.usage = *m.Usage
				info.Usage = s.usage.info()
			}
		}
		info.Model = s.model
		dst = s.start(dst)
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil || ev.Index < 0 || ev.Index >= maxBlocks {
			return dst, gate.Info{Kind: gate.Malformed}
		}
		for len(s.blocks) <= ev.Index {
			s.blocks = append(s.blocks, blockState{})
		}
		st := &s.blocks[ev.Index]
		*st = blockState{}
		dst = s.start(dst)
		switch b.Type {
		case "text":
			st.kind = blockText
			if b.Text != "" {
				dst = appendText(s, dst, "content", b.Text)
				info.Kind, info.Text = gate.Content, []byte(b.Text)
			}
		case "thinking":
			st.kind = blockThinking
			if b.Thinking != "" {
				dst = appendText(s, dst, "reasoning_content", b.Thinking)
				info.Kind = gate.Content
			}
		case "tool_use":
			st.kind, st.tool = blockTool, s.tools
			s.tools++
			args := ""
			if in := compactArgs(b.Input); in != "{}" {
				args, st.args = in, true // input given whole, no deltas to come
			}
			dst = s.appendToolStart(dst, st.tool, b.ID, b.Name, args)
			info.Kind, info.ToolCalls = gate.Content, true
		}
		// redacted_thinking, server_tool_use and server tool results have
		// no OpenAI form and are not decisive.
	case "content_block_delta":
		d := ev.Delta
		if d == nil || ev.Index < 0 || ev.Index >= len(s.blocks) {
			return dst, gate.Info{Kind: gate.Malformed}
		}
		st := &s.blocks[ev.Index]
		switch d.Type {
		case "text_delta":
			if d.Text != "" && st.kind == blockText {
				dst = s.start(dst)
				dst = appendText(s, dst, "content", d.Text)
				info.Kind, info.Text = gate.Content, []byte(d.Text)
			}
		case "thinking_delta":
			if d.Thinking != "" && st.kind == blockThinking {
				dst = s.start(dst)
				dst = appendText(s, dst, "reasoning_content", d.Thinking)
				info.Kind = gate.Content
			}
		case "input_json_delta":
			if d.PartialJSON != "" && st.kind == blockTool {
				dst = s.start(dst)
				dst = appendToolArgs(s, dst, st.tool, d.PartialJSON)
				st.args = true
				info.Kind, info.ToolCalls = gate.Content, true
			}
		}
		// signature_delta and citations_delta: not for an OpenAI client.
	case "content_block_stop":
		if ev.Index >= 0 && ev.Index < len(s.blocks) {
			if st := &s.blocks[ev.Index]; st.kind == blockTool && !st.args {
				// A tool without parameters streams no input: OpenAI
				// clients parse arguments as JSON, so "" must be "{}".
				dst = appendToolArgs(s, dst, st.tool, "{}")
				st.args = true
			}
		}
	case "message_delta":
		s.mergeUsage(ev.Usage)
		info.Usage = s.usage.info()
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			dst = s.finish(dst, ev.Delta.StopReason)
			info.Kind, info.FinishReason = gate.Finish, true
		}
	case "message_stop":
		dst = s.finish(dst, "")
		dst = append(dst, "data: [DONE]\n\n"...)
		s.done = true
		info.Kind = gate.Done
		info.Usage = s.usage.info()
	}
	// ping and unknown events: Anthropic asks clients to ignore them.
	return dst, info
}

// End is called when the upstream stream ended without an error. If the
// answer finished (a stop_reason was seen) it appends what the client
// still needs ([DONE]) and reports complete; otherwise it appends nothing
// and the caller ends the stream with the in-band interruption frame.
func (s *MessagesToChatStream) End(dst []byte) ([]byte, bool) {
	switch {
	case s.done:
		return dst, true
	case s.finished:
		s.done = true
		return append(dst, "data: [DONE]\n\n"...), true
	}
	return dst, false
}

func (s *MessagesToChatStream) mergeUsage(u *anUsageIn) { mergeAnUsage(&s.usage, u) }

// mergeAnUsage folds message_delta's usage into message_start's: each count
// it carries replaces the earlier one.
func mergeAnUsage(dst *anUsage, u *anUsageIn) {
	if u == nil {
		return
	}
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&dst.InputTokens, u.InputTokens)
	set(&dst.OutputTokens, u.OutputTokens)
	set(&dst.CacheCreationInputTokens, u.CacheCreationInputTokens)
	set(&dst.CacheReadInputTokens, u.CacheReadInputTokens)
	if u.OutputTokensDetails != nil {
		dst.OutputTokensDetails = u.OutputTokensDetails
	}
}

// start writes the role chunk once, before anything else.
func (s *MessagesToChatStream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	dst = s.chunk(dst)
	return append(dst, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// chunk appends a chunk's head up to the choices array.
func (s *MessagesToChatStream) chunk(dst []byte) []byte {
	if s.head == nil {
		h := append([]byte(nil), `data: {"id":`...)
		h = jsonscan.AppendQuote(h, s.id)
		h = append(h, `,"object":"chat.completion.chunk","created":`...)
		h = appendInt(h, s.opt.Created)
		h = append(h, `,"model":`...)
		h = jsonscan.AppendQuote(h, s.model)
		h = append(h, `,"choices":[`...)
		s.head = h
	}
	return append(dst, s.head...)
}

// appendText and appendToolArgs are functions, not methods, to take the
// text as a string (the general path) or as bytes (the fast one) alike.
func appendText[S ~string | ~[]byte](s *MessagesToChatStream, dst []byte, key string, text S) []byte {
	dst = s.chunk(dst)
	dst = append(dst, `{"index":0,"delta":{"`...)
	dst = append(dst, key...)
	dst = append(dst, `":`...)
	dst = jsonscan.AppendQuote(dst, text)
	return append(dst, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func (s *MessagesToChatStream) appendToolStart(dst []byte, index int, id, name, args string) []byte {
	dst = s.chunk(dst)
	dst = append(dst, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	dst = appendInt(dst, int64(index))
	dst = append(dst, `,"id":`...)
	dst = jsonscan.AppendQuote(dst, id)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = jsonscan.AppendQuote(dst, name)
	dst = append(dst, `,"arguments":`...)
	dst = jsonscan.AppendQuote(dst, args)
	return append(dst, `}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func appendToolArgs[S ~string | ~[]byte](s *MessagesToChatStream, dst []byte, index int, args S) []byte {
	dst = s.chunk(dst)
	dst = append(dst, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	dst = appendInt(dst, int64(index))
	dst = append(dst, `,"function":{"arguments":`...)
	dst = jsonscan.AppendQuote(dst, args)
	return append(dst, `}}]},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

// finish writes the finish chunk and, when asked, the usage chunk, once.
func (s *MessagesToChatStream) finish(dst []byte, stopReason string) []byte {
	if s.finished {
		return dst
	}
	s.finished = true
	dst = s.start(dst)
	dst = s.chunk(dst)
	dst = append(dst, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	dst = append(dst, FinishReason(stopReason)...)
	dst = append(dst, `"}]}`+"\n\n"...)
	if s.opt.IncludeUsage {
		dst = s.chunk(dst)
		dst = append(dst, `],"usage":`...)
		dst = appendChatUsage(dst, s.usage)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

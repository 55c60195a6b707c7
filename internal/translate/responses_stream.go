package translate

import (
	"encoding/json"

	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/jsonscan"
)

// MessagesToResponsesStream transcodes one Anthropic Messages stream (SSE
// events, or the same objects from Bedrock's event stream) into the typed
// event sequence of an OpenAI Responses stream (DESIGN.md §14):
//
//	message_start          → response.created, response.in_progress
//	text block start       → response.output_item.added (message), response.content_part.added
//	text_delta             → response.output_text.delta
//	text block stop        → response.output_text.done, response.content_part.done, response.output_item.done
//	tool_use block start   → response.output_item.added (function_call)
//	input_json_delta       → response.function_call_arguments.delta
//	tool_use block stop    → response.function_call_arguments.done, response.output_item.done
//	thinking block         → a reasoning item: response.reasoning_summary_part.added,
//	                         response.reasoning_summary_text.delta/.done, response.reasoning_summary_part.done
//	message_delta (stop)   → response.completed, or response.incomplete (max_tokens, refusal),
//	                         with response.output and usage filled
//
// Every event carries its sequence_number, and item events their item_id,
// output_index and content_index (or summary_index). For the gate, the
// events that open the response, an item or a part are not decisive; text,
// reasoning text and function-call arguments are. Not safe for concurrent
// use.
type MessagesToResponsesStream struct {
	created  int64
	seq      int64
	head     respHead
	base     string
	started  bool // created and in_progress written
	finished bool // completed or incomplete written
	done     bool // message_stop seen
	blocks   []respBlockState
	items    []respItemOut
	usage    anUsage
	ev       anEvent
	evs      eventStore // what a fast-read ev points to
	scratch  []byte
	slow     bool // tests: never take the fast paths
}

// respBlockState maps an Anthropic content block to its output item.
type respBlockState struct {
	kind blockKind
	item int  // index into items (the output_index)
	open bool // added, not yet done
}

// NewMessagesToResponsesStream starts a transcoder for one stream; created
// is the response's created_at (Unix seconds, the caller's clock).
func NewMessagesToResponsesStream(created int64) *MessagesToResponsesStream {
	return &MessagesToResponsesStream{created: created}
}

// Event translates one upstream event (name is the SSE event name, "" when
// absent, as from Bedrock), appending the Responses events (possibly none)
// to dst, and returns them with the event's gate classification. An
// Anthropic error event is an Error: before commit the caller discards the
// hop; after commit it ends the stream with Interrupt.
func (s *MessagesToResponsesStream) Event(dst []byte, name string, data []byte) ([]byte, gate.Info) {
	if !s.slow {
		if d, scratch, ok := readFastDelta(data, s.scratch); ok {
			s.scratch = scratch
			if s.done {
				return dst, gate.Info{Kind: gate.Hold, Model: s.head.model}
			}
			return s.delta(dst, d.index, string(d.typ), d.text)
		}
	}
	ev := &s.ev
	*ev = anEvent{}
	if s.slow || !readFastEvent(data, ev, &s.evs) {
		*ev = anEvent{}
		if err := json.Unmarshal(data, ev); err != nil {
			if name == "error" {
				msg, _, _, _, _ := parseError(data) // a Bedrock exception event, or text
				return dst, gate.Info{Kind: gate.Error, ErrorMessage: truncateMessage(msg)}
			}
			return dst, gate.Info{Kind: gate.Malformed}
		}
	}
	typ := ev.Type
	if typ == "" {
		typ = name
	}
	info := gate.Info{Kind: gate.Hold, Model: s.head.model}
	if s.done {
		return dst, info
	}
	switch typ {
	case "error":
		msg := ""
		if ev.Error != nil {
			msg = ev.Error.Message
		}
		info.Kind, info.ErrorMessage = gate.Error, truncateMessage(msg)
		return dst, info
	case "message_start":
		if m := ev.Message; m != nil {
			if !s.started {
				s.base = responseBase(m.ID)
				s.head.id, s.head.model = "resp_"+s.base, m.Model
			}
			if m.Usage != nil {
				s.usage = *m.Usage
				info.Usage = s.usage.info()
			}
		}
		info.Model = s.head.model
		dst = s.start(dst)
	case "content_block_start":
		b := ev.ContentBlock
		if b == nil || ev.Index < 0 || ev.Index >= maxBlocks {
			return dst, gate.Info{Kind: gate.Malformed}
		}
		for len(s.blocks) <= ev.Index {
			s.blocks = append(s.blocks, respBlockState{})
		}
		dst = s.start(dst)
		st := &s.blocks[ev.Index]
		if st.open {
			dst = s.closeItem(dst, st) // a block index reused before its stop
		}
		*st = respBlockState{}
		switch b.Type {
		case "text":
			dst = s.openItem(dst, st, respItemOut{kind: blockText})
			if b.Text != "" {
				return s.delta(dst, ev.Index, "text_delta", []byte(b.Text))
			}
		case "thinking":
			dst = s.openItem(dst, st, respItemOut{kind: blockThinking})
			if b.Thinking != "" {
				return s.delta(dst, ev.Index, "thinking_delta", []byte(b.Thinking))
			}
		case "tool_use":
			dst = s.openItem(dst, st, respItemOut{kind: blockTool, callID: b.ID, name: b.Name})
			if in := compactArgs(b.Input); in != "{}" {
				return s.delta(dst, ev.Index, "input_json_delta", []byte(in)) // input given whole
			}
		}
		// redacted_thinking, server_tool_use and server tool results have
		// no Responses form here and are not decisive.
	case "content_block_delta":
		d := ev.Delta
		if d == nil || ev.Index < 0 || ev.Index >= len(s.blocks) {
			return dst, gate.Info{Kind: gate.Malformed}
		}
		var text string
		switch d.Type {
		case "text_delta":
			text = d.Text
		case "thinking_delta":
			text = d.Thinking
		case "input_json_delta":
			text = d.PartialJSON
		}
		return s.delta(dst, ev.Index, d.Type, []byte(text))
	case "content_block_stop":
		if ev.Index >= 0 && ev.Index < len(s.blocks) {
			st := &s.blocks[ev.Index]
			if st.open && st.kind == blockTool && len(s.items[st.item].text) == 0 {
				// A tool without parameters streams no input: clients
				// parse arguments as JSON, so "" must be "{}".
				dst = s.appendArgsDelta(dst, st.item, []byte("{}"))
				info.Kind, info.ToolCalls = gate.Content, true
			}
			dst = s.closeItem(dst, st)
		}
	case "message_delta":
		s.mergeUsage(ev.Usage)
		info.Usage = s.usage.info()
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			dst = s.finish(dst, ev.Delta.StopReason)
			info.Kind, info.FinishReason = gate.Finish, true
		}
	case "message_stop":
		if !s.finished {
			dst = s.finish(dst, "")
			info.FinishReason = true
		}
		s.done = true
		info.Kind = gate.Done
		info.Usage = s.usage.info()
	}
	// ping and unknown events: Anthropic asks clients to ignore them.
	return dst, info
}

// delta handles a text, thinking or input JSON delta of block index, read
// by readFastDelta or decoded, alike.
func (s *MessagesToResponsesStream) delta(dst []byte, index int, typ string, text []byte) ([]byte, gate.Info) {
	info := gate.Info{Kind: gate.Hold, Model: s.head.model}
	if index < 0 || index >= len(s.blocks) {
		return dst, gate.Info{Kind: gate.Malformed}
	}
	st := &s.blocks[index]
	if len(text) == 0 || !st.open {
		return dst, info
	}
	it := &s.items[st.item]
	switch {
	case typ == "text_delta" && st.kind == blockText:
		it.text = append(it.text, text...)
		dst = s.event(dst, "response.output_text.delta", it.id, st.item, 0)
		dst = append(dst, `,"delta":`...)
		dst = jsonscan.AppendQuote(dst, text)
		dst = append(dst, `,"logprobs":[]}`+"\n\n"...)
		info.Kind, info.Text = gate.Content, text
	case typ == "thinking_delta" && st.kind == blockThinking:
		it.text = append(it.text, text...)
		dst = s.summaryEvent(dst, "response.reasoning_summary_text.delta", it.id, st.item)
		dst = append(dst, `,"delta":`...)
		dst = jsonscan.AppendQuote(dst, text)
		dst = append(dst, "}\n\n"...)
		info.Kind = gate.Content
	case typ == "input_json_delta" && st.kind == blockTool:
		dst = s.appendArgsDelta(dst, st.item, text)
		info.Kind, info.ToolCalls = gate.Content, true
	}
	return dst, info
}

func (s *MessagesToResponsesStream) appendArgsDelta(dst []byte, item int, args []byte) []byte {
	it := &s.items[item]
	it.text = append(it.text, args...)
	dst = s.event(dst, "response.function_call_arguments.delta", it.id, item, -1)
	dst = append(dst, `,"delta":`...)
	dst = jsonscan.AppendQuote(dst, args)
	return append(dst, "}\n\n"...)
}

// start writes response.created and response.in_progress once, before
// anything else.
func (s *MessagesToResponsesStream) start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	s.head.created, s.head.status = s.created, "in_progress"
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		dst = s.open(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = appendResponse(dst, &s.head, nil)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

// open appends an event's head: its SSE name and the payload's type and
// sequence_number.
func (s *MessagesToResponsesStream) open(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = appendInt(dst, s.seq)
	s.seq++
	return dst
}

// event appends an item event's head: item_id, output_index and, for a
// message's part, content_index (-1: none).
func (s *MessagesToResponsesStream) event(dst []byte, typ, id string, item, content int) []byte {
	dst = s.open(dst, typ)
	dst = append(dst, `,"item_id":`...)
	dst = jsonscan.AppendQuote(dst, id)
	dst = append(dst, `,"output_index":`...)
	dst = appendInt(dst, int64(item))
	if content >= 0 {
		dst = append(dst, `,"content_index":`...)
		dst = appendInt(dst, int64(content))
	}
	return dst
}

func (s *MessagesToResponsesStream) summaryEvent(dst []byte, typ, id string, item int) []byte {
	dst = s.event(dst, typ, id, item, -1)
	return append(dst, `,"summary_index":0`...)
}

// openItem adds an output item for block st: output_item.added, and the
// opening of its one part.
func (s *MessagesToResponsesStream) openItem(dst []byte, st *respBlockState, it respItemOut) []byte {
	st.kind, st.item, st.open = it.kind, len(s.items), true
	it.id = itemID(it.kind, s.base, st.item)
	s.items = append(s.items, it)
	p := &s.items[st.item]
	dst = s.open(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = appendInt(dst, int64(st.item))
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, p, "in_progress")
	dst = append(dst, "}\n\n"...)
	switch it.kind {
	case blockText:
		dst = s.event(dst, "response.content_part.added", p.id, st.item, 0)
		dst = append(dst, `,"part":`...)
		dst = appendTextPart(dst, nil)
		dst = append(dst, "}\n\n"...)
	case blockThinking:
		dst = s.summaryEvent(dst, "response.reasoning_summary_part.added", p.id, st.item)
		dst = append(dst, `,"part":`...)
		dst = appendSummaryPart(dst, nil)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

// closeItem ends block st's item: its part's and the item's done events.
func (s *MessagesToResponsesStream) closeItem(dst []byte, st *respBlockState) []byte {
	if !st.open {
		return dst
	}
	st.open = false
	p := &s.items[st.item]
	p.done = true
	switch p.kind {
	case blockText:
		dst = s.event(dst, "response.output_text.done", p.id, st.item, 0)
		dst = append(dst, `,"text":`...)
		dst = jsonscan.AppendQuote(dst, p.text)
		dst = append(dst, `,"logprobs":[]}`+"\n\n"...)
		dst = s.event(dst, "response.content_part.done", p.id, st.item, 0)
		dst = append(dst, `,"part":`...)
		dst = appendTextPart(dst, p.text)
		dst = append(dst, "}\n\n"...)
	case blockThinking:
		dst = s.summaryEvent(dst, "response.reasoning_summary_text.done", p.id, st.item)
		dst = append(dst, `,"text":`...)
		dst = jsonscan.AppendQuote(dst, p.text)
		dst = append(dst, "}\n\n"...)
		dst = s.summaryEvent(dst, "response.reasoning_summary_part.done", p.id, st.item)
		dst = append(dst, `,"part":`...)
		dst = appendSummaryPart(dst, p.text)
		dst = append(dst, "}\n\n"...)
	case blockTool:
		dst = s.event(dst, "response.function_call_arguments.done", p.id, st.item, -1)
		dst = append(dst, `,"name":`...)
		dst = jsonscan.AppendQuote(dst, p.name)
		dst = append(dst, `,"arguments":`...)
		dst = jsonscan.AppendQuote(dst, p.text)
		dst = append(dst, "}\n\n"...)
	}
	dst = s.open(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = appendInt(dst, int64(st.item))
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, p, "completed")
	return append(dst, "}\n\n"...)
}

// finish closes what is open and writes response.completed or
// response.incomplete with the whole output and the usage, once.
func (s *MessagesToResponsesStream) finish(dst []byte, stopReason string) []byte {
	if s.finished {
		return dst
	}
	s.finished = true
	dst = s.start(dst)
	for i := range s.blocks {
		dst = s.closeItem(dst, &s.blocks[i])
	}
	s.head.status, s.head.reason = respStatus(stopReason)
	u := s.usage
	s.head.usage = &u
	dst = s.open(dst, "response."+s.head.status)
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, &s.head, s.items)
	return append(dst, "}\n\n"...)
}

// End is called when the upstream stream ended without an error: the
// answer is complete when a stop reason (or message_stop) was seen, and
// nothing remains to write; otherwise the caller ends the stream with
// Interrupt.
func (s *MessagesToResponsesStream) End(dst []byte) ([]byte, bool) {
	return dst, s.finished
}

// Interrupt appends the end of a stream that cannot be completed: an error
// event with code upstream_stream_interrupted (the SDKs raise it), then
// response.failed with the same error and the output delivered so far —
// never a response.completed.
//
// A response already completed (its stop reason came, then the stream
// failed before message_stop) gets nothing: no event may follow the
// terminal one, and the answer it closed is whole.
func (s *MessagesToResponsesStream) Interrupt(dst []byte, msg string) []byte {
	return s.InterruptWith(dst, CodeStreamInterrupted, msg)
}

// InterruptWith is Interrupt with the error's code (the drain's
// gateway_shutting_down).
func (s *MessagesToResponsesStream) InterruptWith(dst []byte, code, msg string) []byte {
	if s.finished {
		return dst
	}
	dst = s.start(dst)
	dst = s.open(dst, "error")
	dst = appendResponsesErrorTail(dst, code, msg)
	s.finished = true
	s.head.status, s.head.reason, s.head.errCode, s.head.errMsg = "failed", "", code, msg
	u := s.usage
	s.head.usage = &u
	dst = s.open(dst, "response.failed")
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, &s.head, s.items)
	return append(dst, "}\n\n"...)
}

func (s *MessagesToResponsesStream) mergeUsage(u *anUsageIn) { mergeAnUsage(&s.usage, u) }

// ResponsesErrorEvent appends the Responses API's error event (what
// openai-go's stream raises as an error) numbered seq: the end of a
// passed-through Responses stream that cannot be completed, which has no
// completion after it.
func ResponsesErrorEvent(dst []byte, seq int64, code, msg string) []byte {
	dst = append(dst, "event: error\ndata: {\"type\":\"error\",\"sequence_number\":"...)
	dst = appendInt(dst, seq)
	return appendResponsesErrorTail(dst, code, msg)
}

func appendResponsesErrorTail(dst []byte, code, msg string) []byte {
	dst = append(dst, `,"code":`...)
	dst = jsonscan.AppendQuote(dst, code)
	dst = append(dst, `,"message":`...)
	dst = jsonscan.AppendQuote(dst, msg)
	return append(dst, `,"param":null}`+"\n\n"...)
}

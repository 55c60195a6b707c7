package translate

import (
	"bytes"
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
	memo     deltaMemo  // the last delta readFastDelta read
	lits     []byte     // what the items' lit and ref slice
	scratch  []byte
	slow     bool    // tests: never take the fast paths
	final    anUsage // the usage of the terminal event's response
	replay   string  // SetReplay's key

	// The first blocks and items of a stream, without an allocation.
	blockArr [4]respBlockState
	itemArr  [4]respItemOut
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
	s := &MessagesToResponsesStream{created: created}
	s.blocks, s.items = s.blockArr[:0], s.itemArr[:0]
	return s
}

// SetReplay makes reasoning items carry their thinking blocks for replay
// as encrypted_content (reasoning.go): key is the hop's ReplayKey. Call it
// before the first Event when the client asked for
// include: ["reasoning.encrypted_content"].
func (s *MessagesToResponsesStream) SetReplay(key string) { s.replay = key }

// Event translates one upstream event (name is the SSE event name, "" when
// absent, as from Bedrock), appending the Responses events (possibly none)
// to dst, and returns them with the event's gate classification. An
// Anthropic error event is an Error: before commit the caller discards the
// hop; after commit it ends the stream with Interrupt.
func (s *MessagesToResponsesStream) Event(dst []byte, name string, data []byte) ([]byte, gate.Info) {
	if !s.slow {
		if index, kind, text, scratch, ok := s.memo.read(data, s.scratch); ok {
			s.scratch = scratch
			if s.done {
				return dst, gate.Info{Kind: gate.Hold, Model: s.head.model}
			}
			return s.delta(dst, index, kind, text)
		}
		if d, scratch, ok := readFastDelta(data, s.scratch); ok {
			s.scratch = scratch
			s.memo.learn(data, d)
			if s.done {
				return dst, gate.Info{Kind: gate.Hold, Model: s.head.model}
			}
			return s.delta(dst, d.index, deltaKind(d.typ), d.text)
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
				return s.delta(dst, ev.Index, blockText, []byte(b.Text))
			}
		case "thinking":
			dst = s.openItem(dst, st, respItemOut{kind: blockThinking, sig: []byte(b.Signature)})
			if b.Thinking != "" {
				return s.delta(dst, ev.Index, blockThinking, []byte(b.Thinking))
			}
		case "tool_use":
			dst = s.openItem(dst, st, respItemOut{kind: blockTool, callID: b.ID, name: b.Name})
			if in := toolInput(b.Input); in != "{}" {
				return s.delta(dst, ev.Index, blockTool, []byte(in)) // input given whole
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
		case "signature_delta":
			if st := &s.blocks[ev.Index]; st.open && st.kind == blockThinking && s.replay != "" {
				it := &s.items[st.item]
				it.sig = append(it.sig, d.Signature...)
			}
			return dst, info // not decisive
		case "text_delta":
			text = d.Text
		case "thinking_delta":
			text = d.Thinking
		case "input_json_delta":
			text = d.PartialJSON
		}
		return s.delta(dst, ev.Index, deltaKind(d.Type), []byte(text))
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
// by readFastDelta or decoded, alike; kind is the kind of block the delta
// belongs to (deltaKind).
func (s *MessagesToResponsesStream) delta(dst []byte, index int, kind blockKind, text []byte) ([]byte, gate.Info) {
	if index < 0 || index >= len(s.blocks) {
		return dst, gate.Info{Kind: gate.Malformed}
	}
	st := &s.blocks[index]
	if len(text) == 0 || !st.open || st.kind != kind {
		return dst, gate.Info{Kind: gate.Hold, Model: s.head.model}
	}
	it := &s.items[st.item]
	switch kind {
	case blockText:
		it.text = append(it.text, text...)
		dst = s.event(dst, headTextDelta, it)
		dst = append(dst, `,"delta":`...)
		dst = jsonscan.AppendQuote(dst, text)
		dst = append(dst, `,"logprobs":[]}`+"\n\n"...)
		return dst, gate.Info{Kind: gate.Content, Text: text, Model: s.head.model}
	case blockThinking:
		it.text = append(it.text, text...)
		dst = s.event(dst, headReasoningDelta, it)
		dst = append(dst, `,"delta":`...)
		dst = jsonscan.AppendQuote(dst, text)
		dst = append(dst, "}\n\n"...)
		return dst, gate.Info{Kind: gate.Content, Model: s.head.model}
	}
	dst = s.appendArgsDelta(dst, st.item, text)
	return dst, gate.Info{Kind: gate.Content, ToolCalls: true, Model: s.head.model}
}

// deltaKind is the kind of block a content_block_delta's type belongs to;
// blockOther for the deltas that have no Responses form (signatures,
// citations).
func deltaKind[S ~string | ~[]byte](typ S) blockKind {
	switch string(typ) {
	case "text_delta":
		return blockText
	case "thinking_delta":
		return blockThinking
	case "input_json_delta":
		return blockTool
	}
	return blockOther
}

func (s *MessagesToResponsesStream) appendArgsDelta(dst []byte, item int, args []byte) []byte {
	it := &s.items[item]
	it.text = append(it.text, args...)
	dst = s.event(dst, headArgsDelta, it)
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
	for _, head := range [...]string{headCreated, headInProgress} {
		dst = s.open(dst, head)
		dst = append(dst, `,"response":`...)
		dst = appendResponse(dst, &s.head, nil)
		dst = append(dst, "}\n\n"...)
	}
	return dst
}

// An event's head up to its sequence_number's value: its SSE name and the
// payload's type, written in one append.
const (
	headCreated        = "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":"
	headInProgress     = "event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":"
	headCompleted      = "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":"
	headIncomplete     = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"sequence_number\":"
	headFailed         = "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":"
	headError          = "event: error\ndata: {\"type\":\"error\",\"sequence_number\":"
	headTextDelta      = "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":"
	headTextDone       = "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"sequence_number\":"
	headPartAdded      = "event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":"
	headPartDone       = "event: response.content_part.done\ndata: {\"type\":\"response.content_part.done\",\"sequence_number\":"
	headReasoningDelta = "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"sequence_number\":"
	headReasoningDone  = "event: response.reasoning_summary_text.done\ndata: {\"type\":\"response.reasoning_summary_text.done\",\"sequence_number\":"
	headSummaryAdded   = "event: response.reasoning_summary_part.added\ndata: {\"type\":\"response.reasoning_summary_part.added\",\"sequence_number\":"
	headSummaryDone    = "event: response.reasoning_summary_part.done\ndata: {\"type\":\"response.reasoning_summary_part.done\",\"sequence_number\":"
	headArgsDelta      = "event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":"
	headArgsDone       = "event: response.function_call_arguments.done\ndata: {\"type\":\"response.function_call_arguments.done\",\"sequence_number\":"
	headItemAdded      = "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":"
	headItemDone       = "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"sequence_number\":"
)

// open appends an event's head and its sequence_number.
func (s *MessagesToResponsesStream) open(dst []byte, head string) []byte {
	dst = append(dst, head...)
	dst = appendInt(dst, s.seq)
	s.seq++
	return dst
}

// event appends an item event's head: after the sequence_number, the
// item's ref.
func (s *MessagesToResponsesStream) event(dst []byte, head string, it *respItemOut) []byte {
	dst = s.open(dst, head)
	return append(dst, it.ref...)
}

// setRef writes item's ref (respItemOut.ref): item_id, output_index and,
// for a message's part, content_index, for a reasoning item's
// summary_index.
func (s *MessagesToResponsesStream) setRef(it *respItemOut, item int) {
	if s.lits == nil {
		s.lits = make([]byte, 0, 512) // a short answer's refs and texts
	}
	start := len(s.lits)
	s.lits = append(s.lits, `,"item_id":`...)
	s.lits = jsonscan.AppendQuote(s.lits, it.id)
	s.lits = append(s.lits, `,"output_index":`...)
	s.lits = appendInt(s.lits, int64(item))
	switch it.kind {
	case blockText:
		s.lits = append(s.lits, `,"content_index":0`...)
	case blockThinking:
		s.lits = append(s.lits, `,"summary_index":0`...)
	}
	it.ref = s.lits[start:len(s.lits):len(s.lits)]
}

// openItem adds an output item for block st: output_item.added, and the
// opening of its one part.
func (s *MessagesToResponsesStream) openItem(dst []byte, st *respBlockState, it respItemOut) []byte {
	st.kind, st.item, st.open = it.kind, len(s.items), true
	it.id = itemID(it.kind, s.base, st.item)
	it.text = make([]byte, 0, 128) // most of an item's text without growing
	s.setRef(&it, st.item)
	s.items = append(s.items, it)
	p := &s.items[st.item]
	dst = s.open(dst, headItemAdded)
	dst = append(dst, `,"output_index":`...)
	dst = appendInt(dst, int64(st.item))
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, p, "in_progress")
	dst = append(dst, "}\n\n"...)
	switch it.kind { // the part, empty: its text comes as deltas
	case blockText:
		dst = s.event(dst, headPartAdded, p)
		dst = append(dst, `,"part":`...)
		dst = appendTextPart(dst, p)
		dst = append(dst, "}\n\n"...)
	case blockThinking:
		dst = s.event(dst, headSummaryAdded, p)
		dst = append(dst, `,"part":`...)
		dst = appendSummaryPart(dst, p)
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
	start := len(s.lits) // the text, quoted once for all that repeat it
	s.lits = jsonscan.AppendQuote(s.lits, p.text)
	p.lit = s.lits[start:len(s.lits):len(s.lits)]
	switch p.kind {
	case blockText:
		dst = s.event(dst, headTextDone, p)
		dst = append(dst, `,"text":`...)
		dst = append(dst, p.lit...)
		dst = append(dst, `,"logprobs":[]}`+"\n\n"...)
		dst = s.event(dst, headPartDone, p)
		dst = append(dst, `,"part":`...)
		dst = appendTextPart(dst, p)
		dst = append(dst, "}\n\n"...)
	case blockThinking:
		p.enc = encodeThinking(s.replay, p.text, p.sig)
		dst = s.event(dst, headReasoningDone, p)
		dst = append(dst, `,"text":`...)
		dst = append(dst, p.lit...)
		dst = append(dst, "}\n\n"...)
		dst = s.event(dst, headSummaryDone, p)
		dst = append(dst, `,"part":`...)
		dst = appendSummaryPart(dst, p)
		dst = append(dst, "}\n\n"...)
	case blockTool:
		dst = s.event(dst, headArgsDone, p)
		dst = append(dst, `,"name":`...)
		dst = jsonscan.AppendQuote(dst, p.name)
		dst = append(dst, `,"arguments":`...)
		dst = append(dst, p.lit...)
		dst = append(dst, "}\n\n"...)
	}
	dst = s.open(dst, headItemDone)
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
	s.final = s.usage
	s.head.usage = &s.final
	head := headCompleted
	if s.head.status == "incomplete" {
		head = headIncomplete
	}
	dst = s.open(dst, head)
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
	dst = s.open(dst, headError)
	dst = appendResponsesErrorTail(dst, code, msg)
	s.finished = true
	s.head.status, s.head.reason, s.head.errCode, s.head.errMsg = "failed", "", code, msg
	s.final = s.usage
	s.head.usage = &s.final
	dst = s.open(dst, headFailed)
	dst = append(dst, `,"response":`...)
	dst = appendResponse(dst, &s.head, s.items)
	return append(dst, "}\n\n"...)
}

func (s *MessagesToResponsesStream) mergeUsage(u *anUsageIn) { mergeAnUsage(&s.usage, u) }

// toolInput is compactArgs without its buffer for the empty input a
// streamed tool_use block starts with.
func toolInput(in json.RawMessage) string {
	if in = bytes.TrimSpace(in); len(in) >= 2 && in[0] == '{' && in[len(in)-1] == '}' && jsonscan.SkipWS(in, 1) == len(in)-1 {
		return "{}"
	}
	return compactArgs(in)
}

// ResponsesErrorEvent appends the Responses API's error event (what
// openai-go's stream raises as an error) numbered seq: the end of a
// passed-through Responses stream that cannot be completed, which has no
// completion after it.
func ResponsesErrorEvent(dst []byte, seq int64, code, msg string) []byte {
	dst = append(dst, headError...)
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

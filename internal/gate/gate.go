package gate

import (
	"bytes"
	"strconv"
	"sync/atomic"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
	"github.com/hopgate/hopgate/internal/sse"
)

// Kind is what a frame means to the stream gate.
type Kind int

const (
	// Hold is not decisive: role-only or empty delta, comment/keep-alive,
	// usage-only chunk, unknown event.
	Hold Kind = iota
	// Content is decisive output: text, tool calls, refusal or reasoning.
	Content
	// Finish is a finish_reason (or response.completed) without content.
	Finish
	// Error is an in-band error: discard before commit, interrupted after.
	Error
	// Done is `data: [DONE]`.
	Done
	// Malformed is data that is not a JSON object (and not [DONE]).
	Malformed
)

var kindNames = [...]string{"hold", "content", "finish", "error", "done", "malformed"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Info is the classification of one frame or body.
type Info struct {
	Kind Kind
	// FinishReason: some choice has a non-null finish_reason (may come with
	// Content in the same chunk).
	FinishReason bool
	// ToolCalls: non-empty delta.tool_calls (or legacy function_call), or a
	// Responses function-call arguments delta. Resume is forbidden after one.
	ToolCalls bool
	// Text is choice 0's delta.content (or completions text, or Responses
	// output_text delta), JSON-unescaped. It may alias the frame's bytes, so
	// it is valid only as long as the frame.
	Text []byte
	// UsageOnly: choices is [] and usage is an object (the include_usage chunk).
	UsageOnly bool
	Usage     Usage
	// Model is the "model" field if present.
	Model string
	// ErrorMessage is error.message of Error frames, at most 256 bytes.
	ErrorMessage string
}

// Usage is token usage as reported by the upstream.
type Usage struct {
	InputTokens, OutputTokens int64
	Present                   bool
}

const maxErrorMessage = 256

var doneMarker = []byte("[DONE]")

// InspectChat classifies a chat.completions (or /v1/completions) stream frame.
func InspectChat(f sse.Frame) Info { return inspectChat(f, nil) }

// ChatInspector is InspectChat for the frames of one stream, in order. The
// members before "choices" (id, object, created, model, fingerprint: about
// two thirds of a chunk) repeat byte for byte in every chunk of a stream;
// when a frame starts with the bytes the previous frame validated up to
// there, they are compared instead of scanned again. Results are those of
// InspectChat. Not safe for concurrent use; the zero value is ready.
//
// Most chunks of a stream differ from the previous content chunk only in
// the text: the inspector also remembers the last plain content chunk (text
// of choice 0, no finish, tool call, usage or error) around its text
// literal, and a frame that is those bytes around another non-empty string
// literal is that chunk with another text: structure, validity and every
// other field are the same.
type ChatInspector struct {
	prefix             []byte // previous frame up to and including the ',' before "choices"
	pos, n             int    // object iterator state at that ',' (Pos, Count)
	model              string // "model" and the spans of "error" and "usage" before it
	errorVal, usageVal span

	// The last plain content chunk before and after its text literal, and
	// its Info without Text.
	head, tail []byte
	plain      Info
}

// Inspect classifies the next frame of the stream.
func (ci *ChatInspector) Inspect(f sse.Frame) Info {
	if info, ok := ci.sameShape(f); ok {
		return info
	}
	return inspectChat(f, ci)
}

// sameShape answers for a frame that is the remembered content chunk with
// another non-empty text literal.
func (ci *ChatInspector) sameShape(f sse.Frame) (Info, bool) {
	data := f.Data
	if len(ci.head) == 0 || f.Event != "" || !f.HasData || len(data) < len(ci.head)+len(ci.tail)+3 ||
		!bytes.HasPrefix(data, ci.head) || !bytes.HasSuffix(data, ci.tail) {
		return Info{}, false
	}
	s, e := len(ci.head), len(data)-len(ci.tail)
	if end, _ := jsonscan.String(data, s); end != e {
		return Info{}, false // not exactly one string literal in between
	}
	info := ci.plain
	info.Text = unquote(data, span{s, e})
	return info, true
}

// learn remembers a plain content chunk whose text is the literal at text.
func (ci *ChatInspector) learn(data []byte, info Info, text span) {
	if info.Kind != Content || info.FinishReason || info.ToolCalls || info.UsageOnly || info.Usage.Present ||
		info.ErrorMessage != "" || !text.set() || text.e-text.s < 3 || len(data)-(text.e-text.s) > maxMemo {
		return
	}
	ci.head = append(ci.head[:0], data[:text.s]...)
	ci.tail = append(ci.tail[:0], data[text.e:]...)
	ci.plain = info
	ci.plain.Text = nil
}

// minPrefix: shorter prefixes are not worth remembering.
const minPrefix = 32

// maxMemo bounds what an inspector copies from one frame (the prefix, or a
// content chunk's head and tail): a real chunk's head is a few hundred
// bytes, and an upstream sending huge frames must not make every open
// stream hold copies of them. Larger frames are simply parsed in full.
const maxMemo = 4 << 10

func inspectChat(f sse.Frame, memo *ChatInspector) Info {
	if f.Event == "error" {
		return errorInfo(f.Data)
	}
	if !f.HasData {
		return Info{Kind: Hold}
	}
	data := f.Data
	if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		return Info{Kind: Done}
	}
	i := jsonscan.SkipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return Info{Kind: Malformed}
	}
	var info Info
	var errorVal, choicesVal, usageVal span
	obj := jsonscan.Members(data, i)
	if memo != nil && len(memo.prefix) > 0 && bytes.HasPrefix(data, memo.prefix) {
		obj = jsonscan.ResumeMembers(data, memo.pos, memo.n)
		info.Model, errorVal, usageVal = memo.model, memo.errorVal, memo.usageVal
	}
	// The iterator state before "choices", remembered once the frame is
	// known valid.
	cutPos, cutN := -1, 0
	var cutModel string
	var cutErr, cutUsage span
	for {
		pos, n := obj.Pos(), obj.Count()
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "choices", false):
			if memo != nil && n > 0 && !choicesVal.set() {
				cutPos, cutN, cutModel, cutErr, cutUsage = pos, n, info.Model, errorVal, usageVal
			}
			choicesVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "error", false):
			errorVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "usage", false):
			usageVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "model", false):
			info.Model = internModel(data, vs, ve)
		}
	}
	if obj.Err() || jsonscan.SkipWS(data, obj.End()) != len(data) {
		return Info{Kind: Malformed}
	}
	if cutPos >= 0 && (cutPos != memo.pos || !bytes.HasPrefix(data, memo.prefix)) {
		// The ',' before "choices" ends the prefix: it terminates the
		// value before it, so equal bytes up to it parse the same way.
		if comma := jsonscan.SkipWS(data, cutPos); comma+1 >= minPrefix && comma < maxMemo && comma < len(data) && data[comma] == ',' {
			memo.prefix = append(memo.prefix[:0], data[:comma+1]...)
			memo.pos, memo.n = cutPos, cutN
			memo.model, memo.errorVal, memo.usageVal = cutModel, cutErr, cutUsage
		}
	}
	if isErrorValue(data, errorVal) {
		info.Kind = Error
		info.ErrorMessage = errorMessage(data, errorVal)
		return info
	}
	if usageVal.isObject(data) {
		info.Usage = parseUsage(data, usageVal)
	}
	content := false
	var text span // the literal of info.Text
	if choicesVal.set() && data[choicesVal.s] == '[' {
		arr := jsonscan.ValidElements(data, choicesVal.s)
		pos := 0
		for {
			vs, _, ok := arr.Next()
			if !ok {
				break
			}
			c := inspectChoice(data, vs, pos)
			content = content || c.content
			info.FinishReason = info.FinishReason || c.finish
			info.ToolCalls = info.ToolCalls || c.toolCalls
			if c.index0 && info.Text == nil && c.text.set() {
				info.Text = unquote(data, c.text)
				text = c.text
			}
			pos++
		}
		info.UsageOnly = arr.Len() == 0 && usageVal.isObject(data)
	} else {
		// Some OpenAI-compatible servers omit choices (or send null) in the
		// usage chunk instead of sending [].
		info.UsageOnly = usageVal.isObject(data)
	}
	switch {
	case content:
		info.Kind = Content
	case info.FinishReason:
		info.Kind = Finish
	default:
		info.Kind = Hold
	}
	if memo != nil {
		memo.learn(data, info, text)
	}
	return info
}

type choice struct {
	content, finish, toolCalls, index0 bool
	text                               span // choice's content or text string literal
}

func inspectChoice(data []byte, at, pos int) choice {
	var c choice
	if data[at] != '{' {
		return c
	}
	index := -1
	obj := jsonscan.ValidMembers(data, at)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "delta", false):
			if data[vs] == '{' {
				inspectDelta(data, vs, &c)
			}
		case jsonscan.KeyIs(key, esc, "text", false): // /v1/completions
			if nonEmptyString(data, vs, ve) {
				c.content = true
				c.text = span{vs, ve}
			}
		case jsonscan.KeyIs(key, esc, "finish_reason", false):
			c.finish = data[vs] != 'n' // anything but null
		case jsonscan.KeyIs(key, esc, "index", false):
			if n, ok := parseInt(data[vs:ve]); ok {
				index = int(n)
			}
		}
	}
	c.index0 = index == 0 || index < 0 && pos == 0
	return c
}

func inspectDelta(data []byte, at int, c *choice) {
	obj := jsonscan.ValidMembers(data, at)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			return
		}
		switch {
		case jsonscan.KeyIs(key, esc, "content", false):
			if nonEmptyString(data, vs, ve) {
				c.content = true
				c.text = span{vs, ve}
			}
		case jsonscan.KeyIs(key, esc, "refusal", false),
			jsonscan.KeyIs(key, esc, "reasoning_content", false),
			jsonscan.KeyIs(key, esc, "reasoning", false):
			if nonEmptyString(data, vs, ve) {
				c.content = true
			}
		case jsonscan.KeyIs(key, esc, "tool_calls", false):
			if nonEmptyArray(data, vs) {
				c.content, c.toolCalls = true, true
			}
		case jsonscan.KeyIs(key, esc, "function_call", false): // legacy functions API
			if data[vs] == '{' {
				c.content, c.toolCalls = true, true
			}
		}
	}
}

// InspectResponses classifies a /v1/responses stream event. The event type
// comes from the `event:` line, or from the payload's "type" when a proxy
// dropped the event lines.
func InspectResponses(f sse.Frame) Info {
	if !f.HasData {
		if f.Event == "error" {
			return Info{Kind: Error}
		}
		return Info{Kind: Hold}
	}
	data := f.Data
	if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
		return Info{Kind: Done}
	}
	i := jsonscan.SkipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		if f.Event == "error" {
			return Info{Kind: Error}
		}
		return Info{Kind: Malformed}
	}
	var typ []byte
	var typeVal, delta, response, errorVal span
	obj := jsonscan.Members(data, i)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "type", false):
			typeVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "delta", false):
			delta = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "response", false):
			response = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "error", false):
			errorVal = span{vs, ve}
		}
	}
	if obj.Err() || jsonscan.SkipWS(data, obj.End()) != len(data) {
		if f.Event == "error" {
			return Info{Kind: Error}
		}
		return Info{Kind: Malformed}
	}
	if typeVal.set() && data[typeVal.s] == '"' {
		typ = unquote(data, typeVal) // aliases data unless escaped
	}
	ev := eventName{line: f.Event, typ: typ}
	var info Info
	var respErr span
	if response.isObject(data) {
		r := inspectResponseObject(data, response)
		info.Model, info.Usage, respErr = r.model, r.usage, r.err
	}
	switch {
	case ev.is("error"):
		info.Kind = Error
		info.ErrorMessage = messageField(data, span{i, len(data)})
		if isErrorValue(data, errorVal) {
			info.ErrorMessage = errorMessage(data, errorVal)
		}
	case ev.is("response.failed"):
		info.Kind = Error
		info.ErrorMessage = errorMessage(data, respErr)
	case ev.is("response.completed"), ev.is("response.incomplete"):
		// incomplete is a finished response cut by max_output_tokens or a
		// content filter: like finish_reason "length", it is an answer.
		info.Kind, info.FinishReason = Finish, true
	case isErrorValue(data, errorVal):
		// A chat-style {"error":{...}} from a proxy in front of the upstream.
		info.Kind = Error
		info.ErrorMessage = errorMessage(data, errorVal)
	case ev.hasSuffix(".delta") && nonEmptyString(data, delta.s, delta.e):
		info.Kind = Content
		switch {
		case ev.is("response.output_text.delta"):
			info.Text = unquote(data, delta)
		case ev.is("response.function_call_arguments.delta"), ev.is("response.custom_tool_call_input.delta"):
			info.ToolCalls = true
		}
	default:
		info.Kind = Hold
	}
	return info
}

// eventName is the Responses event type: the SSE event line wins, the
// payload's "type" is the fallback. Kept as bytes to compare without
// allocating.
type eventName struct {
	line string
	typ  []byte
}

func (e eventName) is(name string) bool {
	if e.line != "" {
		return e.line == name
	}
	return string(e.typ) == name
}

func (e eventName) hasSuffix(suf string) bool {
	if e.line != "" {
		return len(e.line) > len(suf) && e.line[len(e.line)-len(suf):] == suf
	}
	return len(e.typ) > len(suf) && string(e.typ[len(e.typ)-len(suf):]) == suf
}

type responseObject struct {
	model string
	usage Usage
	err   span
}

func inspectResponseObject(data []byte, at span) responseObject {
	var r responseObject
	var usage span
	obj := jsonscan.ValidMembers(data, at.s)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "model", false):
			r.model = internModel(data, vs, ve)
		case jsonscan.KeyIs(key, esc, "usage", false):
			usage = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "error", false):
			r.err = span{vs, ve}
		}
	}
	if usage.isObject(data) {
		r.usage = parseUsage(data, usage)
	}
	return r
}

// InspectBody classifies a complete non-streaming JSON response body.
func InspectBody(body []byte) Info {
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return Info{Kind: Malformed}
	}
	var info Info
	var errorVal, usageVal span
	obj := jsonscan.Members(body, i)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "error", false):
			errorVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "usage", false):
			usageVal = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "model", false):
			info.Model = internModel(body, vs, ve)
		}
	}
	if obj.Err() || jsonscan.SkipWS(body, obj.End()) != len(body) {
		return Info{Kind: Malformed}
	}
	if isErrorValue(body, errorVal) {
		return Info{Kind: Error, Model: info.Model, ErrorMessage: errorMessage(body, errorVal)}
	}
	if usageVal.isObject(body) {
		info.Usage = parseUsage(body, usageVal)
	}
	info.Kind = Content
	return info
}

// ErrorCode returns error.code of an upstream error body, e.g.
// "context_length_exceeded", or error.type when code is not a non-empty
// string or a number; "" if neither is. A number is returned as written.
func ErrorCode(body []byte) string {
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) || body[i] != '{' || !jsonscan.Valid(body) {
		return ""
	}
	var errorVal span
	obj := jsonscan.ValidMembers(body, i)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		if jsonscan.KeyIs(key, esc, "error", false) {
			errorVal = span{vs, ve}
		}
	}
	if !errorVal.isObject(body) {
		return ""
	}
	var code, typ span
	eo := jsonscan.ValidMembers(body, errorVal.s)
	for {
		key, esc, vs, ve, ok := eo.Next()
		if !ok {
			break
		}
		switch {
		case jsonscan.KeyIs(key, esc, "code", false):
			code = span{vs, ve}
		case jsonscan.KeyIs(key, esc, "type", false):
			typ = span{vs, ve}
		}
	}
	for _, s := range []span{code, typ} {
		if !s.set() {
			continue
		}
		switch c := body[s.s]; {
		case c == '"':
			if v := string(unquote(body, s)); v != "" {
				return v
			}
		case c == '-' || '0' <= c && c <= '9':
			return string(body[s.s:s.e])
		}
	}
	return ""
}

// span is a value's byte range; the zero span means absent (no JSON value
// starts at offset 0 of a member value).
type span struct{ s, e int }

func (s span) set() bool { return s.e > s.s }

func (s span) isObject(b []byte) bool { return s.set() && b[s.s] == '{' }

// isErrorValue: a non-null object or string under "error". Some providers send
// "error": null on success chunks, which is not an error.
func isErrorValue(b []byte, s span) bool {
	return s.set() && (b[s.s] == '{' || b[s.s] == '"')
}

func nonEmptyString(b []byte, s, e int) bool {
	return e-s > 2 && b[s] == '"'
}

func nonEmptyArray(b []byte, at int) bool {
	return b[at] == '[' && b[jsonscan.SkipWS(b, at+1)] != ']'
}

// unquote returns the decoded string literal at s, aliasing b when the literal
// has no escapes.
func unquote(b []byte, s span) []byte {
	raw := b[s.s+1 : s.e-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw[:len(raw):len(raw)]
	}
	return jsonscan.Unquote(make([]byte, 0, len(raw)), raw)
}

func errorInfo(data []byte) Info {
	info := Info{Kind: Error}
	i := jsonscan.SkipWS(data, 0)
	if i < len(data) && data[i] == '{' && jsonscan.Valid(data) {
		info.ErrorMessage = messageField(data, span{i, len(data)})
		var errorVal span
		obj := jsonscan.ValidMembers(data, i)
		for {
			key, esc, vs, ve, ok := obj.Next()
			if !ok {
				break
			}
			if jsonscan.KeyIs(key, esc, "error", false) {
				errorVal = span{vs, ve}
			}
		}
		if isErrorValue(data, errorVal) {
			info.ErrorMessage = errorMessage(data, errorVal)
		}
	}
	return info
}

// errorMessage reads an "error" value: a string, or an object's "message".
func errorMessage(b []byte, s span) string {
	if !s.set() {
		return ""
	}
	if b[s.s] == '"' {
		return truncate(unquote(b, s))
	}
	return messageField(b, s)
}

// messageField is the object's "message" when that is a string. Of
// duplicate members the last wins, as everywhere in this package (and in
// encoding/json and JSON.parse).
func messageField(b []byte, obj span) string {
	if !obj.isObject(b) {
		return ""
	}
	var msg span
	o := jsonscan.ValidMembers(b, obj.s)
	for {
		key, esc, vs, ve, ok := o.Next()
		if !ok {
			break
		}
		if jsonscan.KeyIs(key, esc, "message", false) {
			msg = span{vs, ve}
		}
	}
	if !msg.set() || b[msg.s] != '"' {
		return ""
	}
	return truncate(unquote(b, msg))
}

// truncate cuts to maxErrorMessage bytes without splitting a UTF-8 sequence.
func truncate(m []byte) string {
	if len(m) <= maxErrorMessage {
		return string(m)
	}
	n := maxErrorMessage
	for n > 0 && m[n]&0xC0 == 0x80 {
		n--
	}
	return string(m[:n])
}

// parseUsage reads the token counts of a usage object: prompt_tokens or
// input_tokens, completion_tokens or output_tokens, each a non-negative
// integer of at most 18 digits. Unlike other members, the last *valid*
// count wins: a usage that repeats a count as null or a string still
// reports the number it gave.
func parseUsage(b []byte, s span) Usage {
	var u Usage
	o := jsonscan.ValidMembers(b, s.s)
	for {
		key, esc, vs, ve, ok := o.Next()
		if !ok {
			return u
		}
		switch {
		case jsonscan.KeyIs(key, esc, "prompt_tokens", false), jsonscan.KeyIs(key, esc, "input_tokens", false):
			if n, ok := parseInt(b[vs:ve]); ok {
				u.InputTokens, u.Present = n, true
			}
		case jsonscan.KeyIs(key, esc, "completion_tokens", false), jsonscan.KeyIs(key, esc, "output_tokens", false):
			if n, ok := parseInt(b[vs:ve]); ok {
				u.OutputTokens, u.Present = n, true
			}
		}
	}
}

// parseInt accepts a non-negative JSON integer that fits in int64.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// lastModel caches the most recent model name: every chunk of a stream
// repeats it, and reusing the string keeps classification allocation-free.
// Atomic, so concurrent streams with different models only lose the cache.
var lastModel atomic.Pointer[string]

func internModel(b []byte, vs, ve int) string {
	if b[vs] != '"' {
		return ""
	}
	// Compare decoded bytes: comparing the escaped literal could match a
	// cached name that merely spells the same escape sequence.
	u := unquote(b, span{vs, ve})
	if p := lastModel.Load(); p != nil && *p == string(u) {
		return *p
	}
	s := string(u)
	if len(s) <= 256 {
		lastModel.Store(&s)
	}
	return s
}

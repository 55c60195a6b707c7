package translate

import (
	"bytes"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// readFastEvent reads the Anthropic stream events that are not a text
// delta — message_start, content_block_start and _stop, message_delta,
// message_stop, ping — into ev without encoding/json, filling it exactly
// as json.Unmarshal fills a zero anEvent. It gives up (false, ev and st
// then hold anything) on whatever it would have to decide differently
// from encoding/json: a key escaped, non-ASCII or a field's name in
// another case (encoding/json matches keys case-insensitively, ſ and K
// included), a known key twice, a value of another kind than its field's,
// a number that is not a small integer, an error object, a message with
// content, invalid JSON. Keys of no field are skipped, as encoding/json
// skips them. FuzzFastEvent holds the two to the same result.
//
// The pointers it sets point into st, so ev is valid until the next call
// with the same st; an input object aliases data.
//
// MessagesToResponsesStream reads with it. On the SDK cassette
// (BenchmarkMessagesToResponsesStreamCassette, 2 cores: 8 of its 24
// events are of these kinds) the stream's translation went from 94
// allocations to 27 and took about half the time: encoding/json spent
// some 2 µs and 8 allocations on each.
func readFastEvent(data []byte, ev *anEvent, st *eventStore) bool {
	obj := jsonscan.Members(data, jsonscan.SkipWS(data, 0))
	var seen uint8
	for {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var bit uint8
		ok := true
		switch string(key) {
		case "type":
			bit, ok = 1, st.setString(&ev.Type, data[vs:ve])
		case "index":
			bit = 2
			ev.Index, ok = smallInt(data[vs:ve])
		case "message":
			bit, ok = 4, st.readMessage(data[:ve], vs)
			ev.Message = &st.msg
		case "content_block":
			bit, ok = 8, st.readBlock(data[:ve], vs)
			ev.ContentBlock = &st.block
		case "delta":
			bit, ok = 16, st.readDelta(data[:ve], vs)
			ev.Delta = &st.delta
		case "usage":
			bit, ok = 32, st.readUsageIn(data[:ve], vs)
			ev.Usage = &st.usageIn
		case "error":
			return false // the general path: error events are rare
		default:
			if !unknownKey(key, esc, topFields[:]) {
				return false
			}
			continue
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return !obj.Err() && jsonscan.SkipWS(data, obj.End()) == len(data)
}

// eventStore holds what readFastEvent's pointers point to: one of each
// nested object, reused from event to event.
type eventStore struct {
	msg     anMessageIn
	usage   anUsage
	block   anRespIn
	delta   anDelta
	usageIn anUsageIn
	counts  [4]int64 // usageIn's counts
	scratch []byte   // a string's unescaped bytes
}

// emptyContent is message_start's "content": [], which encoding/json
// decodes to an empty slice, not nil.
var emptyContent = []anRespIn{}

// The JSON names of each decoded object's fields.
var (
	topFields     = [...]string{"type", "message", "index", "content_block", "delta", "usage", "error"}
	messageFields = [...]string{"id", "type", "model", "content", "stop_reason", "usage", "error"}
	usageFields   = [...]string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens_details"}
	blockFields   = [...]string{"type", "text", "thinking", "id", "name", "input"}
	deltaFields   = [...]string{"type", "text", "partial_json", "thinking", "stop_reason"}
)

// unknownKey reports whether a key not spelled as any of fields matches
// none of them in encoding/json either, which matches keys to fields
// case-insensitively: it is not escaped, all ASCII (encoding/json folds ſ
// to s and K to k) and no field's name in another case.
func unknownKey(key []byte, esc bool, fields []string) bool {
	if esc {
		return false
	}
	upper := false
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
		upper = upper || 'A' <= c && c <= 'Z'
	}
	if upper {
		for _, f := range fields {
			if jsonscan.KeyIs(key, false, f, true) {
				return false
			}
		}
	}
	return true
}

// members iterates the object at b[i], already validated; not ok when
// b[i] is not an object (null included: it would clear a pointer the
// caller sets).
func members(b []byte, i int) (jsonscan.Object, bool) {
	return jsonscan.ValidMembers(b, i), b[i] == '{'
}

func (st *eventStore) readMessage(b []byte, i int) bool {
	st.msg = anMessageIn{}
	m := &st.msg
	obj, ok := members(b, i)
	var seen uint8
	for ok {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var bit uint8
		switch v := b[vs:ve]; string(key) {
		case "id":
			bit, ok = 1, st.setString(&m.ID, v)
		case "type":
			bit, ok = 2, st.setString(&m.Type, v)
		case "model":
			bit, ok = 4, st.setString(&m.Model, v)
		case "stop_reason":
			bit, ok = 8, st.setString(&m.StopReason, v)
		case "content":
			// Only the empty content of a stream's start.
			bit, ok = 16, v[0] == '[' && jsonscan.SkipWS(v, 1) == len(v)-1
			m.Content = emptyContent
		case "usage":
			bit, ok = 32, st.readUsage(b[:ve], vs)
			m.Usage = &st.usage
		case "error":
			return false
		default:
			if !unknownKey(key, esc, messageFields[:]) {
				return false
			}
			continue
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return ok
}

func (st *eventStore) readUsage(b []byte, i int) bool {
	st.usage = anUsage{}
	u := &st.usage
	obj, ok := members(b, i)
	var seen uint8
	for ok {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var bit uint8
		switch v := b[vs:ve]; string(key) {
		case "input_tokens":
			bit, ok = 1, setCount(&u.InputTokens, v)
		case "output_tokens":
			bit, ok = 2, setCount(&u.OutputTokens, v)
		case "cache_creation_input_tokens":
			bit, ok = 4, setCount(&u.CacheCreationInputTokens, v)
		case "cache_read_input_tokens":
			bit, ok = 8, setCount(&u.CacheReadInputTokens, v)
		case "output_tokens_details":
			bit = 16
			u.OutputTokensDetails, ok = readThinkingTokens(b[:ve], vs)
		default:
			if !unknownKey(key, esc, usageFields[:]) {
				return false
			}
			continue
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return ok
}

// readUsageIn reads message_delta's usage, whose counts are pointers: a
// count given points into st.counts, null leaves it nil.
func (st *eventStore) readUsageIn(b []byte, i int) bool {
	st.usageIn = anUsageIn{}
	u := &st.usageIn
	obj, ok := members(b, i)
	var seen uint8
	for ok {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var k int
		switch string(key) {
		case "input_tokens":
			k = 0
		case "output_tokens":
			k = 1
		case "cache_creation_input_tokens":
			k = 2
		case "cache_read_input_tokens":
			k = 3
		case "output_tokens_details":
			k = 4
		default:
			if !unknownKey(key, esc, usageFields[:]) {
				return false
			}
			continue
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		v := b[vs:ve]
		if k == 4 {
			u.OutputTokensDetails, ok = readThinkingTokens(b[:ve], vs)
			continue
		}
		if string(v) == "null" {
			continue
		}
		n, isInt := smallInt(v)
		ok = isInt
		st.counts[k] = int64(n)
		p := &st.counts[k]
		switch k {
		case 0:
			u.InputTokens = p
		case 1:
			u.OutputTokens = p
		case 2:
			u.CacheCreationInputTokens = p
		case 3:
			u.CacheReadInputTokens = p
		}
	}
	return ok
}

// readThinkingTokens reads output_tokens_details into a new object (the
// usage merged keeps the pointer, so it cannot be st's); null is nil.
func readThinkingTokens(b []byte, i int) (*struct {
	ThinkingTokens int64 `json:"thinking_tokens"`
}, bool) {
	if string(b[i:]) == "null" {
		return nil, true
	}
	obj, ok := members(b, i)
	if !ok {
		return nil, false
	}
	d := &struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	}{}
	seen := false
	for {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			return d, true
		}
		if string(key) != "thinking_tokens" {
			if !unknownKey(key, esc, []string{"thinking_tokens"}) {
				return nil, false
			}
			continue
		}
		if seen || !setCount(&d.ThinkingTokens, b[vs:ve]) {
			return nil, false
		}
		seen = true
	}
}

func (st *eventStore) readBlock(b []byte, i int) bool {
	st.block = anRespIn{}
	c := &st.block
	obj, ok := members(b, i)
	var seen uint8
	for ok {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var bit uint8
		switch v := b[vs:ve]; string(key) {
		case "type":
			bit, ok = 1, st.setString(&c.Type, v)
		case "text":
			bit, ok = 2, st.setString(&c.Text, v)
		case "thinking":
			bit, ok = 4, st.setString(&c.Thinking, v)
		case "id":
			bit, ok = 8, st.setString(&c.ID, v)
		case "name":
			bit, ok = 16, st.setString(&c.Name, v)
		case "input":
			// A json.RawMessage takes the value's bytes as they are;
			// only an object here, the tool's input.
			bit, ok = 32, v[0] == '{'
			c.Input = v
		default:
			if !unknownKey(key, esc, blockFields[:]) {
				return false
			}
			continue
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return ok
}

func (st *eventStore) readDelta(b []byte, i int) bool {
	st.delta = anDelta{}
	d := &st.delta
	obj, ok := members(b, i)
	var seen uint8
	for ok {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		var bit uint8
		switch v := b[vs:ve]; string(key) {
		case "type":
			bit, ok = 1, st.setString(&d.Type, v)
		case "text":
			bit, ok = 2, st.setString(&d.Text, v)
		case "partial_json":
			bit, ok = 4, st.setString(&d.PartialJSON, v)
		case "thinking":
			bit, ok = 8, st.setString(&d.Thinking, v)
		case "stop_reason":
			bit, ok = 16, st.setString(&d.StopReason, v)
		default:
			if !unknownKey(key, esc, deltaFields[:]) {
				return false
			}
			continue
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return ok
}

// setString decodes the validated value v into a string field as
// encoding/json does: null leaves the field as it is, escapes and invalid
// UTF-8 (U+FFFD) decoded; not ok for another kind. The names the stream
// is made of are not allocated.
func (st *eventStore) setString(dst *string, v []byte) bool {
	if string(v) == "null" {
		return true
	}
	if v[0] != '"' {
		return false
	}
	raw := v[1 : len(v)-1]
	if bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
		st.scratch = jsonscan.Unquote(st.scratch[:0], raw)
		raw = st.scratch
	}
	*dst = internName(raw)
	return true
}

// internName is string(b), without an allocation for the event, block and
// delta types and stop reasons of a stream.
func internName(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "message_start":
		return "message_start"
	case "content_block_start":
		return "content_block_start"
	case "content_block_delta":
		return "content_block_delta"
	case "content_block_stop":
		return "content_block_stop"
	case "message_delta":
		return "message_delta"
	case "message_stop":
		return "message_stop"
	case "ping":
		return "ping"
	case "message":
		return "message"
	case "text":
		return "text"
	case "thinking":
		return "thinking"
	case "tool_use":
		return "tool_use"
	case "signature_delta":
		return "signature_delta"
	case "end_turn":
		return "end_turn"
	case "max_tokens":
		return "max_tokens"
	case "stop_sequence":
		return "stop_sequence"
	case "pause_turn":
		return "pause_turn"
	case "refusal":
		return "refusal"
	}
	return string(b)
}

// setCount decodes a token count as encoding/json does into an int64:
// null leaves it; not ok for anything but a small integer (the general
// path decides the rest).
func setCount(dst *int64, v []byte) bool {
	if string(v) == "null" {
		return true
	}
	n, ok := smallInt(v)
	*dst = int64(n)
	return ok
}

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
	ok := readMembers(&obj, topFields[:], func(k, vs, ve int) bool {
		v := data[vs:ve]
		switch k {
		case 0:
			return st.setString(&ev.Type, v)
		case 1:
			var ok bool
			ev.Index, ok = smallInt(v)
			return ok
		case 2:
			ev.Message = &st.msg
			return st.readMessage(data[:ve], vs)
		case 3:
			ev.ContentBlock = &st.block
			return st.readBlock(data[:ve], vs)
		case 4:
			ev.Delta = &st.delta
			return st.readDelta(data[:ve], vs)
		case 5:
			ev.Usage = &st.usageIn
			return st.readUsageIn(data[:ve], vs)
		}
		return false // error: the general path, error events are rare
	})
	return ok && jsonscan.SkipWS(data, obj.End()) == len(data)
}

// The JSON names of each decoded object's fields, in the order of the
// cases that set them.
var (
	topFields     = [...]string{"type", "index", "message", "content_block", "delta", "usage", "error"}
	messageFields = [...]string{"id", "type", "model", "stop_reason", "content", "usage", "error"}
	usageFields   = [...]string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens_details"}
	blockFields   = [...]string{"type", "text", "thinking", "id", "name", "signature", "input"}
	deltaFields   = [...]string{"type", "text", "partial_json", "thinking", "stop_reason", "signature"}
	detailsFields = [...]string{"thinking_tokens"}
)

// readMembers walks obj's members, calling set with the index in fields
// of each one named by a field, with its value's span; a member of no
// field is skipped. Not ok when set is not, on a field's key twice, on a
// key encoding/json might match to a field where this reads none
// (unknownKey), or on invalid JSON.
func readMembers(obj *jsonscan.Object, fields []string, set func(k, vs, ve int) bool) bool {
	var seen uint32
	for {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			return !obj.Err()
		}
		k := fieldIndex(key, fields)
		if k < 0 {
			if !unknownKey(key, esc, fields) {
				return false
			}
			continue
		}
		if seen&(1<<k) != 0 || !set(k, vs, ve) {
			return false
		}
		seen |= 1 << k
	}
}

// readObject is readMembers for the validated value at b[i], which must
// be an object (null would clear a pointer the caller sets).
func readObject(b []byte, i int, fields []string, set func(k, vs, ve int) bool) bool {
	if b[i] != '{' {
		return false
	}
	obj := jsonscan.ValidMembers(b, i)
	return readMembers(&obj, fields, set)
}

func fieldIndex(key []byte, fields []string) int {
	for k, f := range fields {
		if string(key) == f {
			return k
		}
	}
	return -1
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

func (st *eventStore) readMessage(b []byte, i int) bool {
	st.msg = anMessageIn{}
	m := &st.msg
	strs := [...]*string{&m.ID, &m.Type, &m.Model, &m.StopReason}
	return readObject(b, i, messageFields[:], func(k, vs, ve int) bool {
		v := b[vs:ve]
		switch k {
		case 0, 1, 2, 3:
			return st.setString(strs[k], v)
		case 4: // only the empty content of a stream's start
			m.Content = emptyContent
			return v[0] == '[' && jsonscan.SkipWS(v, 1) == len(v)-1
		case 5:
			m.Usage = &st.usage
			return st.readUsage(b[:ve], vs)
		}
		return false // error
	})
}

func (st *eventStore) readUsage(b []byte, i int) bool {
	st.usage = anUsage{}
	u := &st.usage
	return readObject(b, i, usageFields[:], func(k, vs, ve int) bool {
		var ok bool
		switch v := b[vs:ve]; k {
		case 0:
			ok = setCount(&u.InputTokens, v)
		case 1:
			ok = setCount(&u.OutputTokens, v)
		case 2:
			ok = setCount(&u.CacheCreationInputTokens, v)
		case 3:
			ok = setCount(&u.CacheReadInputTokens, v)
		case 4:
			u.OutputTokensDetails, ok = readThinkingTokens(b[:ve], vs)
		}
		return ok
	})
}

// readUsageIn reads message_delta's usage, whose counts are pointers: a
// count given points into st.counts, null leaves it nil.
func (st *eventStore) readUsageIn(b []byte, i int) bool {
	st.usageIn = anUsageIn{}
	u := &st.usageIn
	return readObject(b, i, usageFields[:], func(k, vs, ve int) bool {
		v := b[vs:ve]
		if k == 4 {
			var ok bool
			u.OutputTokensDetails, ok = readThinkingTokens(b[:ve], vs)
			return ok
		}
		if string(v) == "null" {
			return true
		}
		n, ok := smallInt(v)
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
		return ok
	})
}

// readThinkingTokens reads output_tokens_details into a new object (the
// usage merged keeps the pointer, so it cannot be st's); null is nil.
func readThinkingTokens(b []byte, i int) (*struct {
	ThinkingTokens int64 `json:"thinking_tokens"`
}, bool) {
	if string(b[i:]) == "null" {
		return nil, true
	}
	d := &struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	}{}
	ok := readObject(b, i, detailsFields[:], func(_, vs, ve int) bool {
		return setCount(&d.ThinkingTokens, b[vs:ve])
	})
	return d, ok
}

func (st *eventStore) readBlock(b []byte, i int) bool {
	st.block = anRespIn{}
	c := &st.block
	strs := [...]*string{&c.Type, &c.Text, &c.Thinking, &c.ID, &c.Name, &c.Signature}
	return readObject(b, i, blockFields[:], func(k, vs, ve int) bool {
		v := b[vs:ve]
		if k < len(strs) {
			return st.setString(strs[k], v)
		}
		// A json.RawMessage takes the value's bytes as they are; only an
		// object here, the tool's input.
		c.Input = v
		return v[0] == '{'
	})
}

func (st *eventStore) readDelta(b []byte, i int) bool {
	st.delta = anDelta{}
	d := &st.delta
	strs := [...]*string{&d.Type, &d.Text, &d.PartialJSON, &d.Thinking, &d.StopReason, &d.Signature}
	return readObject(b, i, deltaFields[:], func(k, vs, ve int) bool {
		return st.setString(strs[k], b[vs:ve])
	})
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

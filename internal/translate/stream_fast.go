package translate

import (
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/jsonscan"
)

// fastDelta is the content_block_delta event most of any Anthropic stream
// is made of, read without encoding/json: {"type":"content_block_delta",
// "index":N,"delta":{"type":"text_delta"|"thinking_delta"|
// "input_json_delta","text"|"thinking"|"partial_json":"…"}} with its keys in
// any order. Anything else — another event, another key, a key spelled in
// another case or escaped, a repeated key, a non-integer index, invalid
// JSON — is left to the general path (ok false), so both read every event
// the same way (FuzzFastDelta holds them to it).
//
// Measured on BenchmarkMessagesToChatStreamTextDelta (2 cores): the general
// path spends about 1.7 µs and 11 allocations per text delta, mostly in
// encoding/json; this one does without it.
type fastDelta struct {
	index    int
	typ      []byte // delta.type, raw (has no escapes)
	text     []byte // the text, thinking or partial_json, unescaped
	tvs, tve int    // data[tvs:tve] is the text's string literal
}

// readFastDelta reads data as a fastDelta; scratch holds the unescaped
// text when it had escapes (the result may alias data or scratch).
func readFastDelta(data, scratch []byte) (d fastDelta, _ []byte, ok bool) {
	i := jsonscan.SkipWS(data, 0)
	obj := jsonscan.Members(data, i)
	var seenType, seenIndex, seenDelta bool
	var dvs, dve int
	for {
		key, esc, vs, ve, more := obj.Next()
		if !more {
			break
		}
		if esc {
			return d, scratch, false
		}
		switch string(key) {
		case "type":
			if seenType || string(data[vs:ve]) != `"content_block_delta"` {
				return d, scratch, false
			}
			seenType = true
		case "index":
			n, ok := smallInt(data[vs:ve])
			if seenIndex || !ok {
				return d, scratch, false
			}
			d.index, seenIndex = n, true
		case "delta":
			if seenDelta || data[vs] != '{' {
				return d, scratch, false
			}
			dvs, dve, seenDelta = vs, ve, true
		default:
			return d, scratch, false
		}
	}
	if obj.Err() || jsonscan.SkipWS(data, obj.End()) != len(data) || !seenType || !seenIndex || !seenDelta {
		return d, scratch, false
	}
	var textKey string // a constant: no copy of the key
	var tvs, tve int
	var textEsc bool
	delta := jsonscan.ValidMembers(data[:dve], dvs)
	for {
		key, esc, vs, ve, more := delta.Next()
		if !more {
			break
		}
		if esc || data[vs] != '"' {
			return d, scratch, false
		}
		k := ""
		switch string(key) {
		case "text":
			k = "text"
		case "thinking":
			k = "thinking"
		case "partial_json":
			k = "partial_json"
		}
		switch {
		case string(key) == "type":
			if d.typ != nil {
				return d, scratch, false
			}
			if _, e := jsonscan.String(data, vs); e {
				return d, scratch, false
			}
			d.typ = data[vs+1 : ve-1]
		case k != "":
			if textKey != "" {
				return d, scratch, false
			}
			textKey, tvs, tve = k, vs, ve
			_, textEsc = jsonscan.String(data, vs)
		default:
			return d, scratch, false
		}
	}
	if delta.Err() || d.typ == nil || textKey == "" {
		return d, scratch, false
	}
	switch {
	case string(d.typ) == "text_delta" && textKey == "text",
		string(d.typ) == "thinking_delta" && textKey == "thinking",
		string(d.typ) == "input_json_delta" && textKey == "partial_json":
	default:
		return d, scratch, false
	}
	d.tvs, d.tve = tvs, tve
	// encoding/json turns invalid UTF-8 into U+FFFD: so does Unquote.
	if raw := data[tvs+1 : tve-1]; textEsc || !utf8.Valid(raw) {
		scratch = jsonscan.Unquote(scratch[:0], raw)
		d.text = scratch
	} else {
		d.text = raw
	}
	return d, scratch, true
}

// smallInt parses a JSON integer that fits an int comfortably (what
// encoding/json would put in an int without error); anything else is not
// ok.
func smallInt(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 9 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// delta handles a content_block_delta read by readFastDelta exactly as
// Event's general path handles the decoded event.
func (s *MessagesToChatStream) delta(dst []byte, d fastDelta) ([]byte, gate.Info) {
	info := gate.Info{Kind: gate.Hold, Model: s.model}
	if d.index < 0 || d.index >= len(s.blocks) {
		return dst, gate.Info{Kind: gate.Malformed}
	}
	st := &s.blocks[d.index]
	if len(d.text) == 0 {
		return dst, info
	}
	switch string(d.typ) {
	case "text_delta":
		if st.kind == blockText {
			dst = s.start(dst)
			dst = appendText(s, dst, "content", d.text)
			info.Kind, info.Text = gate.Content, d.text
		}
	case "thinking_delta":
		if st.kind == blockThinking {
			dst = s.start(dst)
			dst = appendText(s, dst, "reasoning_content", d.text)
			info.Kind = gate.Content
		}
	case "input_json_delta":
		if st.kind == blockTool {
			dst = s.start(dst)
			dst = appendToolArgs(s, dst, st.tool, d.text)
			st.args = true
			info.Kind, info.ToolCalls = gate.Content, true
		}
	}
	return dst, info
}

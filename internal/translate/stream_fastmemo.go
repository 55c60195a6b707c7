package translate

import (
	"bytes"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// deltaMemo reads a content_block_delta that is the last one readFastDelta
// read with another text: the same bytes before the text's string literal
// and after it (but for trailing whitespace), and between them exactly one
// valid string literal. Such an event has the last one's keys, index and
// delta type, so readFastDelta would read it the same way; the memo does
// without walking its members again: most of an answer's deltas are one
// block's text, each the last with another few words. FuzzFastResponsesStream
// holds it to the general path's output.
type deltaMemo struct {
	around []byte // the bytes before the literal, then those after it
	pre    int    // len(before)
	index  int
	kind   blockKind // deltaKind of the delta's type
	ok     bool
}

// learn remembers d, just read by readFastDelta from data.
func (m *deltaMemo) learn(data []byte, d fastDelta) {
	m.around = append(append(m.around[:0], data[:d.tvs]...), trimWS(data)[d.tve:]...)
	m.pre, m.index, m.kind, m.ok = d.tvs, d.index, deltaKind(d.typ), true
}

// read reads data as the remembered delta with its own text (unescaped,
// aliasing data or scratch, as readFastDelta's); ok false when data is not
// one.
func (m *deltaMemo) read(data, scratch []byte) (index int, kind blockKind, text, _ []byte, ok bool) {
	data = trimWS(data)
	before, after := m.around[:m.pre], m.around[m.pre:]
	end := len(data) - len(after)
	if !m.ok || end-len(before) < 2 || !bytes.HasPrefix(data, before) || !bytes.Equal(data[end:], after) {
		return 0, 0, nil, scratch, false
	}
	e, esc := jsonscan.String(data, m.pre)
	if e != end {
		return 0, 0, nil, scratch, false
	}
	text = data[m.pre+1 : end-1]
	if esc || !utf8.Valid(text) { // as readFastDelta
		scratch = jsonscan.Unquote(scratch[:0], text)
		text = scratch
	}
	return m.index, m.kind, text, scratch, true
}

// trimWS drops the JSON whitespace that may follow a value.
func trimWS(b []byte) []byte {
	for len(b) > 0 {
		switch b[len(b)-1] {
		case ' ', '\t', '\n', '\r':
			b = b[:len(b)-1]
			continue
		}
		break
	}
	return b
}

package jsonscan

import (
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the nesting limit of encoding/json (maxNestingDepth): a document
// nested deeper is invalid there, so it is invalid here too.
const MaxDepth = 10000

// plain[c] is true for bytes that may appear unescaped inside a string and need
// no further inspection: everything but '"', '\\' and control characters.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipWS returns the index of the first non-whitespace byte at or after i.
func SkipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

// Valid reports whether b is exactly one JSON value surrounded by optional
// whitespace, like encoding/json.Valid.
func Valid(b []byte) bool {
	i := SkipWS(b, 0)
	if i >= len(b) {
		return false
	}
	end := Value(b, i)
	return end >= 0 && SkipWS(b, end) == len(b)
}

// String scans the string literal starting at b[i] == '"'. It returns the index
// just after the closing quote and whether the literal contains a backslash
// escape, or -1 if the literal is invalid or unterminated.
func String(b []byte, i int) (end int, escaped bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	i++
	for {
		// Eight bytes at a time while none of them needs a look.
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return -1, false
		}
		switch b[i] {
		case '"':
			return i + 1, escaped
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				return -1, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return -1, false
				}
				i += 6
			default:
				return -1, false
			}
		default: // control character
			return -1, false
		}
	}
}

// SWAR constants: a byte value repeated in every byte of a word.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 reports whether one of the eight bytes of w (in any order) is a
// quote, a backslash or a control character (< 0x20). It never misses one;
// it may also report a byte after a real hit (borrows propagate upward),
// which only ends the fast path early.
func special8(w uint64) bool {
	q := w ^ ('"' * ones)
	bs := w ^ ('\\' * ones)
	return ((q-ones)&^q|(bs-ones)&^bs|(w-0x20*ones)&^w)&highs != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i++
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// Value validates the JSON value starting at b[i] (which must not be
// whitespace) and returns the index just after it, or -1 if it is invalid.
func Value(b []byte, i int) int { return value(b, i, MaxDepth) }

func value(b []byte, i, maxDepth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '{' || c == '[':
		return container(b, i, maxDepth)
	case c == '"':
		i, _ = String(b, i)
		return i
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || isDigit(c):
		return number(b, i)
	}
	return -1
}

// container is iterative so hostile nesting costs no stack: one bit per open
// container records whether it is an object. The bits of the first 256
// levels live in the frame; deeper documents (hostile ones, in practice)
// grow a heap bitset, at most MaxDepth bits. Clearing a MaxDepth-bit array
// on every call cost more than scanning a typical SSE frame.
func container(b []byte, i, maxDepth int) int {
	var small [4]uint64
	isObj := small[:]
	depth := 0
	for {
		// Expect a value at i.
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				return -1
			}
			w, bit := (depth-1)/64, uint64(1)<<((depth-1)%64)
			if w == len(isObj) {
				isObj = append(isObj, make([]uint64, len(isObj))...)
			}
			i = SkipWS(b, i+1)
			if c == '{' {
				isObj[w] |= bit
				if i < len(b) && b[i] == '}' {
					i++
					depth--
					break
				}
				if i = key(b, i); i < 0 {
					return -1
				}
				continue
			}
			isObj[w] &^= bit
			if i < len(b) && b[i] == ']' {
				i++
				depth--
				break
			}
			continue
		case c == '"':
			if i, _ = String(b, i); i < 0 {
				return -1
			}
		case c == 't':
			i = literal(b, i, "true")
		case c == 'f':
			i = literal(b, i, "false")
		case c == 'n':
			i = literal(b, i, "null")
		case c == '-' || isDigit(c):
			i = number(b, i)
		default:
			return -1
		}
		if i < 0 {
			return -1
		}
		// After a value: close containers or move to the next element.
		for {
			if depth == 0 {
				return i
			}
			i = SkipWS(b, i)
			if i >= len(b) {
				return -1
			}
			obj := isObj[(depth-1)/64]&(uint64(1)<<((depth-1)%64)) != 0
			c := b[i]
			if c == ',' {
				i = SkipWS(b, i+1)
				if obj {
					if i = key(b, i); i < 0 {
						return -1
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				i++
				depth--
				continue
			}
			return -1
		}
	}
}

// key scans `"name" :` plus following whitespace and returns the index of the
// member value.
func key(b []byte, i int) int {
	i, _ = String(b, i)
	if i < 0 {
		return -1
	}
	i = SkipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return SkipWS(b, i+1)
}

// Object iterates the members of an object, validating as it goes.
type Object struct {
	b     []byte
	i     int
	n     int
	end   int
	depth int
	state uint8 // 0 running, 1 done, 2 invalid
	known bool  // known valid: skip values instead of validating them
}

// Members starts iterating the object whose '{' is at b[i].
func Members(b []byte, i int) Object {
	o := Object{b: b, i: i + 1, depth: MaxDepth - 1}
	if i >= len(b) || b[i] != '{' {
		o.state = 2
	}
	return o
}

// ValidMembers is Members for an object already validated, e.g. a value
// span returned by a validating iterator: its members are skipped, not
// validated again, so walking into a document costs one validating pass in
// all. On bytes that are not valid JSON its results are unspecified (but it
// stays within b).
func ValidMembers(b []byte, i int) Object {
	o := Members(b, i)
	o.known = true
	return o
}

// Next returns the next member: the raw key bytes between the quotes (still
// escaped if escaped is true) and the value span b[vs:ve]. ok is false at the
// end of the object or on invalid input; see Err.
func (o *Object) Next() (key []byte, escaped bool, vs, ve int, ok bool) {
	if o.state != 0 {
		return nil, false, 0, 0, false
	}
	b := o.b
	i := SkipWS(b, o.i)
	if i < len(b) && b[i] == '}' {
		o.end, o.state = i+1, 1
		return nil, false, 0, 0, false
	}
	if o.n > 0 {
		if i >= len(b) || b[i] != ',' {
			o.state = 2
			return nil, false, 0, 0, false
		}
		i = SkipWS(b, i+1)
	}
	var ke int
	var esc bool
	if o.known {
		ke, esc = skipString(b, i)
	} else {
		ke, esc = String(b, i)
	}
	if ke < 0 {
		o.state = 2
		return nil, false, 0, 0, false
	}
	j := SkipWS(b, ke)
	if j >= len(b) || b[j] != ':' {
		o.state = 2
		return nil, false, 0, 0, false
	}
	vs = SkipWS(b, j+1)
	if o.known {
		ve = skip(b, vs)
	} else {
		ve = value(b, vs, o.depth)
	}
	if ve < 0 {
		o.state = 2
		return nil, false, 0, 0, false
	}
	o.i = ve
	o.n++
	return b[i+1 : ke-1], esc, vs, ve, true
}

// Err reports whether iteration stopped on invalid input.
func (o *Object) Err() bool { return o.state == 2 }

// Pos is where the next call to Next starts scanning (just after the last
// member's value), and Count the number of members returned so far: with
// ResumeMembers they rebuild the iterator at this point.
func (o *Object) Pos() int   { return o.i }
func (o *Object) Count() int { return o.n }

// ResumeMembers rebuilds, over b, an Object iterator that had returned n
// members and stood at pos (Pos and Count). Use it only when b[:k] for
// some k > pos, ending after the ',' that follows the last value, is
// identical to the bytes the original iterator read up to there: those bytes
// are then known valid and need no second scan (the ',' ends any number or
// literal before it).
func ResumeMembers(b []byte, pos, n int) Object {
	o := Object{b: b, i: pos, n: n, depth: MaxDepth - 1}
	if pos > len(b) || n < 0 {
		o.state = 2
	}
	return o
}

// End is the index just after the closing '}' once Next returned false
// without error.
func (o *Object) End() int { return o.end }

// Len is the number of members seen so far.
func (o *Object) Len() int { return o.n }

// Array iterates the elements of an array, validating as it goes.
type Array struct {
	b     []byte
	i     int
	n     int
	end   int
	state uint8
	known bool // known valid: skip elements instead of validating them
}

// Elements starts iterating the array whose '[' is at b[i].
func Elements(b []byte, i int) Array {
	a := Array{b: b, i: i + 1}
	if i >= len(b) || b[i] != '[' {
		a.state = 2
	}
	return a
}

// ValidElements is Elements for an array already validated (see
// ValidMembers).
func ValidElements(b []byte, i int) Array {
	a := Elements(b, i)
	a.known = true
	return a
}

// Next returns the span b[vs:ve] of the next element.
func (a *Array) Next() (vs, ve int, ok bool) {
	if a.state != 0 {
		return 0, 0, false
	}
	b := a.b
	i := SkipWS(b, a.i)
	if i < len(b) && b[i] == ']' {
		a.end, a.state = i+1, 1
		return 0, 0, false
	}
	if a.n > 0 {
		if i >= len(b) || b[i] != ',' {
			a.state = 2
			return 0, 0, false
		}
		i = SkipWS(b, i+1)
	}
	if a.known {
		ve = skip(b, i)
	} else {
		ve = value(b, i, MaxDepth-1)
	}
	if ve < 0 {
		a.state = 2
		return 0, 0, false
	}
	a.i = ve
	a.n++
	return i, ve, true
}

// Err reports whether iteration stopped on invalid input.
func (a *Array) Err() bool { return a.state == 2 }

// End is the index just after the closing ']'.
func (a *Array) End() int { return a.end }

// Len is the number of elements seen so far.
func (a *Array) Len() int { return a.n }

// Unquote appends the decoded content of a string literal to dst; raw is the
// validated literal without its quotes. Like encoding/json, invalid UTF-8 and
// unpaired surrogates become U+FFFD.
func Unquote(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\' && i+1 < len(raw):
			switch e := raw[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, hex4(raw[i+2:])); dec != utf8.RuneError {
							i += 6
							dst = utf8.AppendRune(dst, dec)
							continue
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // '"', '\\', '/'
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(raw) && raw[j] < utf8.RuneSelf && raw[j] != '\\' {
				j++
			}
			dst = append(dst, raw[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, raw[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}

func hex4(b []byte) rune {
	if len(b) < 4 {
		return utf8.RuneError
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return utf8.RuneError
		}
		r = r<<4 | rune(c)
	}
	return r
}

// KeyIs reports whether the raw key (as returned by Object.Next) decodes to
// want. With fold, ASCII case is ignored, which is how encoding/json (v1)
// matches struct fields: upstreams written in Go see "Model" as "model".
func KeyIs(raw []byte, escaped bool, want string, fold bool) bool {
	if escaped {
		if len(raw) > 6*len(want)+6 {
			return false
		}
		var tmp [128]byte
		raw = Unquote(tmp[:0], raw)
	}
	if len(raw) != len(want) {
		return false
	}
	if !fold {
		return string(raw) == want
	}
	for i := range len(raw) {
		a, b := raw[i], want[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// AppendQuote appends s as a JSON string literal. Like the providers it
// leaves <, > and & literal; invalid UTF-8 becomes U+FFFD, so the output is
// valid JSON whatever the input, and U+2028/U+2029 are escaped, as
// encoding/json does (they break JavaScript consumers that eval lines).
func AppendQuote[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// decodeRune is utf8.DecodeRune for a string or a byte slice, without
// converting (and copying) the rest of s: a rune is at most 4 bytes.
func decodeRune[S ~string | ~[]byte](s S) (rune, int) {
	var buf [utf8.UTFMax]byte
	n := copy(buf[:], s[:min(len(s), utf8.UTFMax)])
	return utf8.DecodeRune(buf[:n])
}

// skip returns the index just after the value at b[i], which is known to be
// valid JSON: strings are found with a vectorised search for their closing
// quote, containers by counting brackets outside strings. On invalid input
// it returns -1 or an index within b, never panics.
func skip(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := skipString(b, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i, _ = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// A number or a literal ends at a delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// skipString is String for a literal known to be valid: it returns the index
// just after the closing quote of the literal at b[i] and whether it holds
// an escape.
func skipString(b []byte, i int) (end int, escaped bool) {
	if i >= len(b) || b[i] != '"' {
		return -1, false
	}
	i++
	for {
		// Eight bytes at a time while none is a quote or a backslash, then
		// byte by byte to the one that is.
		for i+8 <= len(b) && !quoteOrBackslash8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && b[i] != '"' && b[i] != '\\' {
			i++
		}
		if i >= len(b) {
			return -1, false
		}
		if b[i] == '"' {
			return i + 1, escaped
		}
		escaped = true
		i += 2 // the escaped byte cannot end the literal
	}
}

// quoteOrBackslash8 is special8 without the control-character test.
func quoteOrBackslash8(w uint64) bool {
	q := w ^ ('"' * ones)
	bs := w ^ ('\\' * ones)
	return ((q-ones)&^q|(bs-ones)&^bs)&highs != 0
}

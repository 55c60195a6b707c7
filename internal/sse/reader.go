package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrFrameTooLarge is returned (wrapped, use errors.Is) when a frame does not
// end within the reader's frame limit. The reader is then unusable: the rest
// of the stream cannot be framed reliably.
var ErrFrameTooLarge = errors.New("sse: frame too large")

// DefaultMaxFrame is the frame limit used when NewReader gets maxFrame <= 0.
const DefaultMaxFrame = 1 << 20

const (
	initialBuf = 1 << 10 // grows on demand; most frames are a few hundred bytes
	// burstBuf is the buffer of a reader whose read filled the room it
	// was given: an upstream writing frames faster than one read takes
	// them (a burst). The buffer grows to burstBuf at once, not by
	// doubling, so the rest of a burst is taken in one or two reads (the
	// transport's own 4 KiB buffer hands over what it holds, then a read
	// of at least its size goes to the socket directly), and a proxy
	// flushing when no complete frame is buffered (Buffered) flushes that
	// many times; doubling took 1, 2, 4 and 8 KiB reads and allocated
	// each. A stream of one frame per write never fills its buffer and
	// stays at initialBuf.
	burstBuf = 16 << 10
	// maxInterned bounds the event-name cache, so a hostile upstream sending a
	// new event name per frame cannot grow memory; past it names allocate.
	maxInterned    = 64
	maxInternedLen = 64
)

// Frame is one SSE frame (an "event" in the spec's terms).
type Frame struct {
	// Raw is the exact bytes of the frame including its terminating blank
	// line, as received. A byte-order mark at stream start is not part of it.
	Raw []byte
	// Event is the value of the last `event:` field, "" if none.
	Event string
	// Data is the `data:` values joined with "\n"; one space after the colon
	// is stripped.
	Data []byte
	// HasData reports at least one `data` field. Comment-only frames and
	// empty frames have HasData false and Event "".
	HasData bool
}

// Reader splits an event stream into frames. It is not safe for concurrent use.
type Reader struct {
	rd       io.Reader
	buf      []byte // buffered bytes are buf[start:end]
	start    int
	end      int
	maxFrame int

	// Incremental frame-end search, as offsets from start, so a frame that
	// arrives one byte per Read is scanned once, not once per Read.
	scanned   int
	lineStart int

	bomDone bool
	full    bool  // the last read filled the room it was given: more is likely waiting
	err     error // sticky read error, returned once buffered frames are drained
	done    error // terminal error returned by every later Next

	data   []byte // joined data of multi-line frames
	events map[string]string
}

// NewReader returns a Reader whose frames may be at most maxFrame bytes
// (DefaultMaxFrame if maxFrame <= 0). The buffer grows on demand up to
// maxFrame+1 bytes and never beyond.
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &Reader{rd: r, maxFrame: maxFrame}
}

// Reset makes the reader read from rd as a new stream, keeping its buffers
// and frame limit, so readers can be pooled.
func (r *Reader) Reset(rd io.Reader) {
	r.rd = rd
	r.start, r.end, r.scanned, r.lineStart = 0, 0, 0, 0
	r.bomDone, r.full = false, false
	r.err, r.done = nil, nil
	r.data = r.data[:0]
}

// Next returns the next frame. Its slices are valid only until the next call
// to Next or Reset.
//
// At a clean end of stream (after a blank line) Next returns io.EOF. If the
// stream ends with bytes after the last blank line, Next returns that partial
// frame with io.ErrUnexpectedEOF (or with the read error that ended the
// stream), so the caller can still classify it; later calls return io.EOF (or
// the read error). A frame over the limit yields an error wrapping
// ErrFrameTooLarge, and so does every later call.
func (r *Reader) Next() (Frame, error) {
	if r.done != nil {
		return Frame{}, r.done
	}
	for {
		if !r.bomDone {
			// Decide as soon as the bytes cannot be a BOM, so a lone "\n"
			// frame is not held back waiting for a third byte.
			head := r.buf[r.start:r.end]
			if len(head) >= len(bom) || r.err != nil || !bytes.HasPrefix(bom, head) {
				r.bomDone = true
				if bytes.HasPrefix(head, bom) {
					r.start += len(bom)
				}
			}
		}
		if r.bomDone {
			if n, ok := r.frameEnd(); ok {
				if n > r.maxFrame {
					return Frame{}, r.tooLarge(n)
				}
				raw := r.buf[r.start : r.start+n : r.start+n]
				r.start += n
				r.scanned, r.lineStart = 0, 0
				return r.parse(raw), nil
			}
			if r.end-r.start > r.maxFrame {
				return Frame{}, r.tooLarge(r.end - r.start)
			}
			if r.err != nil {
				return r.finish()
			}
		}
		r.fill()
	}
}

var bom = []byte{0xEF, 0xBB, 0xBF}

func (r *Reader) tooLarge(n int) error {
	r.done = fmt.Errorf("%w: %d bytes without a frame end (limit %d)", ErrFrameTooLarge, n, r.maxFrame)
	return r.done
}

// finish handles the end of the stream with no complete frame buffered.
func (r *Reader) finish() (Frame, error) {
	final := r.err
	if final == io.EOF {
		final = io.ErrUnexpectedEOF
	}
	if r.start == r.end {
		r.done = r.err
		return Frame{}, r.err
	}
	raw := r.buf[r.start:r.end:r.end]
	r.start = r.end
	r.done = r.err
	return r.parse(raw), final
}

// frameEnd continues the search for the blank line ending the frame at
// buf[start:]. It returns the frame length including that line.
func (r *Reader) frameEnd() (int, bool) {
	b := r.buf[r.start:r.end]
	for i := r.scanned; i < len(b); {
		j := lineBreak(b[i:])
		if j < 0 {
			r.scanned = len(b)
			return 0, false
		}
		j += i
		brk := 1
		if b[j] == '\r' {
			if j+1 == len(b) && r.err == nil {
				// A CR at the end of the buffer may be the first half of a CRLF.
				r.scanned = j
				return 0, false
			}
			if j+1 < len(b) && b[j+1] == '\n' {
				brk = 2
			}
		}
		if j == r.lineStart {
			return j + brk, true
		}
		i = j + brk
		r.lineStart = i
		r.scanned = i
	}
	return 0, false
}

// lineBreak returns the index of the first CR or LF in b, or -1.
func lineBreak(b []byte) int {
	n := bytes.IndexByte(b, '\n')
	if n < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if c := bytes.IndexByte(b[:n], '\r'); c >= 0 {
		return c
	}
	return n
}

// fill reads more bytes, compacting and growing the buffer as needed; the
// buffer never exceeds maxFrame+1 bytes (one extra byte to see whether a
// trailing CR is followed by LF).
func (r *Reader) fill() {
	// A read that filled its room and brought whole frames (some were
	// taken since) is a burst; one that filled it with part of one large
	// frame only doubles the buffer.
	burst := r.full && r.start > 0
	// At least room for a BOM, so a tiny limit can still decide on one.
	limit := max(r.maxFrame+1, len(bom))
	switch {
	case r.buf == nil:
		// The first read has room for all the transport may hold already:
		// the response's first bytes come with its headers, and a burst
		// upstream's whole stream may be there. Taken at initialBuf, the
		// rest waited for a second read, and a proxy flushing whenever no
		// complete frame is buffered flushed in between: one write more
		// per burst stream than the bare proxy's (docs/performance.md).
		// The price: a stream whose upstream sends headers and then
		// nothing waits for its first bytes holding burstBuf, not
		// initialBuf, until they come or the read is cut (the client
		// leaves, stream_idle_timeout when set: off by default). Anthropic
		// sends message_start right after the headers and OpenAI-style
		// chat its role delta; an upstream that thinks before its first
		// event holds the 15 KiB more while it thinks.
		r.buf = getBuf(min(burstBuf, limit))
	case !r.full && len(r.buf) == burstBuf && r.start == r.end:
		// The last read did not fill the burst buffer and ended on a
		// frame's end, so the next one may wait: a stream waits holding
		// initialBuf, not burstBuf (an idle stream's memory). (Part of a
		// frame left is more on its way: the buffer stays.)
		putBuf(r.buf) // the frames in it were valid only until this Next
		r.buf = getBuf(initialBuf)
		r.start, r.end = 0, 0
	}
	if r.start > 0 && (r.start == r.end || r.end == len(r.buf)) {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) || r.full && len(r.buf) < min(burstBuf, limit) {
		n := max(2*len(r.buf), initialBuf)
		if burst {
			n = max(n, burstBuf) // take the rest of it at once
		}
		n = min(n, limit)
		nb := getBuf(n)
		// Offsets (scanned, lineStart) are from start: moving the bytes to
		// the front keeps them.
		r.end = copy(nb, r.buf[r.start:r.end])
		r.start = 0
		putBuf(r.buf) // the frames in it were valid only until this Next
		r.buf = nb
	}
	r.full = false
	for range 100 {
		room := len(r.buf) - r.end
		n, err := r.rd.Read(r.buf[r.end:])
		if n < 0 || n > room {
			r.err = errors.New("sse: reader returned invalid count")
			return
		}
		r.full = n == room
		r.end += n
		if err != nil {
			r.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	r.err = io.ErrNoProgress
}

// parse extracts the fields of a frame. raw is a complete frame, or the
// unterminated tail of a stream.
func (r *Reader) parse(raw []byte) Frame {
	f := Frame{Raw: raw}
	var first []byte
	lines := 0
	for rest := raw; len(rest) > 0; {
		var line []byte
		if j := lineBreak(rest); j < 0 {
			line, rest = rest, nil
		} else {
			line = rest[:j]
			if rest[j] == '\r' && j+1 < len(rest) && rest[j+1] == '\n' {
				j++
			}
			rest = rest[j+1:]
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		name, value := line, line[len(line):]
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			switch lines {
			case 0:
				first = value
			case 1:
				r.data = append(append(append(r.data[:0], first...), '\n'), value...)
			default:
				r.data = append(append(r.data, '\n'), value...)
			}
			lines++
		case "event":
			f.Event = r.intern(value)
		}
		// id and retry are connection state for a browser's EventSource; a
		// proxy forwards them inside Raw and has no use for them.
	}
	switch {
	case lines == 1:
		f.Data, f.HasData = first[:len(first):len(first)], true
	case lines > 1:
		f.Data, f.HasData = r.data[:len(r.data):len(r.data)], true
	}
	return f
}

// intern returns an event name without allocating for names seen before.
func (r *Reader) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := r.events[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= maxInternedLen && len(r.events) < maxInterned {
		if r.events == nil {
			r.events = make(map[string]string)
		}
		r.events[s] = s
	}
	return s
}

// Extend returns run and raw as one slice of the reader's buffer when raw
// is the frame Next returned last and run (if not empty) is the bytes
// just before it there, as the frames before it were; ok is false
// otherwise. A proxy writes such a run of frames with one write instead
// of one per frame. The slice is valid as long as raw is: only until the
// next call to Next that reads (Buffered is false) or to Reset.
func (r *Reader) Extend(run, raw []byte) (joined []byte, ok bool) {
	n := len(raw)
	if n == 0 || n > r.start || r.start > len(r.buf) {
		return nil, false
	}
	s := r.start - n
	if &r.buf[s] != &raw[0] {
		return nil, false // not the last frame: another buffer, or an older frame
	}
	if m := len(run); m > 0 {
		if m > s || &r.buf[s-m] != &run[0] {
			return nil, false
		}
		s -= m
	}
	return r.buf[s:r.start:r.start], true
}

// Buffered reports whether a complete frame is already buffered, so that
// the next call to Next returns without reading. A proxy uses it to flush
// only when no further frame is at hand.
func (r *Reader) Buffered() bool {
	if r.done != nil || !r.bomDone {
		return false
	}
	_, ok := r.frameEnd()
	return ok
}

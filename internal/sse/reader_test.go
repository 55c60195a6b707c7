package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

type wantFrame struct {
	raw     string
	event   string
	data    string
	hasData bool
}

func (w wantFrame) String() string {
	return fmt.Sprintf("{raw=%q event=%q data=%q hasData=%v}", w.raw, w.event, w.data, w.hasData)
}

var readerCases = []struct {
	name   string
	in     string
	frames []wantFrame
	err    error // error returned with/after the last frame
}{
	// The common case: OpenAI chat chunks, LF endings, [DONE].
	{"openai chat", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []wantFrame{
		{"data: {\"a\":1}\n\n", "", `{"a":1}`, true},
		{"data: [DONE]\n\n", "", "[DONE]", true},
	}, io.EOF},
	// Some providers (and Windows proxies) send CRLF; Raw must keep it.
	{"crlf", "event: ping\r\ndata: x\r\n\r\n", []wantFrame{{"event: ping\r\ndata: x\r\n\r\n", "ping", "x", true}}, io.EOF},
	// Lone CR is a valid line ending per the spec.
	{"lone cr", "data: a\rdata: b\r\rdata: c\r\r", []wantFrame{
		{"data: a\rdata: b\r\r", "", "a\nb", true},
		{"data: c\r\r", "", "c", true},
	}, io.EOF},
	// CR then CRLF: the blank line is "\r\n", which must stay in this frame.
	{"cr then crlf", "data: a\r\r\ndata: b\n\n", []wantFrame{
		{"data: a\r\r\n", "", "a", true},
		{"data: b\n\n", "", "b", true},
	}, io.EOF},
	// Multi-line data is joined with LF; only one leading space is stripped.
	{"multiline data", "data:  two\ndata:none\ndata\n\n", []wantFrame{{"data:  two\ndata:none\ndata\n\n", "", " two\nnone\n", true}}, io.EOF},
	// Keep-alive comments are frames of their own with no data.
	{"comment", ": keep-alive\n\n", []wantFrame{{": keep-alive\n\n", "", "", false}}, io.EOF},
	// Responses API style: event line plus data; the last event wins; id/retry ignored.
	{"event id retry", "event: a\nid: 7\nretry: 100\nevent: response.completed\ndata: {}\n\n", []wantFrame{
		{"event: a\nid: 7\nretry: 100\nevent: response.completed\ndata: {}\n\n", "response.completed", "{}", true},
	}, io.EOF},
	// A field without a colon is a field name with an empty value.
	{"field without colon", "event\ndata\n\n", []wantFrame{{"event\ndata\n\n", "", "", true}}, io.EOF},
	// Unknown fields are ignored but kept in Raw.
	{"unknown field", "foo: bar\ndata: x\n\n", []wantFrame{{"foo: bar\ndata: x\n\n", "", "x", true}}, io.EOF},
	// A UTF-8 BOM at stream start is dropped (the spec strips it).
	{"bom", "\xEF\xBB\xBFdata: x\n\n", []wantFrame{{"data: x\n\n", "", "x", true}}, io.EOF},
	// A BOM later in the stream is just bytes.
	{"bom later", "data: x\n\n\xEF\xBB\xBFdata: y\n\n", []wantFrame{
		{"data: x\n\n", "", "x", true},
		{"\xEF\xBB\xBFdata: y\n\n", "", "", false},
	}, io.EOF},
	// Extra blank lines between frames come back as empty frames so forwarding stays byte-identical.
	{"extra blank line", "data: x\n\n\n", []wantFrame{
		{"data: x\n\n", "", "x", true},
		{"\n", "", "", false},
	}, io.EOF},
	// Stream cut mid-frame: the partial frame is returned for classification.
	{"cut mid frame", "data: x\n\ndata: {\"err", []wantFrame{
		{"data: x\n\n", "", "x", true},
		{"data: {\"err", "", "{\"err", true},
	}, io.ErrUnexpectedEOF},
	// Ends after a data line but before the blank line: still incomplete.
	{"missing blank line", "data: x\n", []wantFrame{{"data: x\n", "", "x", true}}, io.ErrUnexpectedEOF},
	// A trailing CR at EOF is a complete line ending.
	{"trailing cr at eof", "data: x\r\r", []wantFrame{{"data: x\r\r", "", "x", true}}, io.EOF},
	// Nothing at all.
	{"empty", "", nil, io.EOF},
	// A partial BOM at EOF is data, not lost.
	{"partial bom at eof", "\xEF\xBB", []wantFrame{{"\xEF\xBB", "", "", false}}, io.ErrUnexpectedEOF},
}

func readAll(t *testing.T, rd *Reader) ([]wantFrame, error) {
	t.Helper()
	var got []wantFrame
	for {
		f, err := rd.Next()
		if len(f.Raw) > 0 {
			got = append(got, wantFrame{string(f.Raw), f.Event, string(f.Data), f.HasData})
		}
		if err != nil {
			if err == io.ErrUnexpectedEOF {
				if _, err2 := rd.Next(); err2 != io.EOF {
					t.Fatalf("after ErrUnexpectedEOF got %v, want io.EOF", err2)
				}
			}
			return got, err
		}
	}
}

func check(t *testing.T, name string, got []wantFrame, err error, frames []wantFrame, wantErr error) {
	t.Helper()
	if err != wantErr {
		t.Fatalf("%s: err = %v, want %v", name, err, wantErr)
	}
	if !slices.Equal(got, frames) {
		t.Fatalf("%s:\n got %v\nwant %v", name, got, frames)
	}
}

// Every case must give the same frames however the bytes are split into
// reads: TCP delivers upstream frames at arbitrary boundaries.
func TestReader(t *testing.T) {
	for _, tc := range readerCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, NewReader(strings.NewReader(tc.in), 0))
			check(t, "whole", got, err, tc.frames, tc.err)
			got, err = readAll(t, NewReader(iotest.OneByteReader(strings.NewReader(tc.in)), 0))
			check(t, "one byte", got, err, tc.frames, tc.err)
			got, err = readAll(t, NewReader(iotest.DataErrReader(strings.NewReader(tc.in)), 0))
			check(t, "data+err", got, err, tc.frames, tc.err)
			for i := range len(tc.in) {
				got, err = readAll(t, NewReader(io.MultiReader(strings.NewReader(tc.in[:i]), strings.NewReader(tc.in[i:])), 0))
				check(t, fmt.Sprintf("split at %d", i), got, err, tc.frames, tc.err)
			}
		})
	}
}

// A read error mid-frame is returned with the partial frame, and stays.
func TestReaderReadError(t *testing.T) {
	boom := errors.New("connection reset")
	rd := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)), 0)
	if f, err := rd.Next(); err != nil || string(f.Data) != "a" {
		t.Fatalf("first frame %q %v", f.Data, err)
	}
	f, err := rd.Next()
	if err != boom || string(f.Data) != "b" {
		t.Fatalf("partial frame %q %v", f.Data, err)
	}
	if _, err := rd.Next(); err != boom {
		t.Fatalf("sticky error = %v", err)
	}
}

type endless struct{ b byte }

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b
	}
	return len(p), nil
}

// An upstream that never sends a line break must not grow memory past the
// limit: this is the bounded-memory promise.
func TestReaderFrameTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   io.Reader
	}{
		{"endless line", endless{'a'}},
		{"endless lines without blank", strings.NewReader(strings.Repeat("data: 0123456789\n", 1000))},
		{"endless CRs split", iotest.OneByteReader(io.MultiReader(strings.NewReader("data: x"), io.LimitReader(endless{'y'}, 5000)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := NewReader(tc.in, 1000)
			_, err := rd.Next()
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("err = %v", err)
			}
			if cap(rd.buf) > 1001 {
				t.Fatalf("buffer grew to %d", cap(rd.buf))
			}
			if _, err2 := rd.Next(); !errors.Is(err2, ErrFrameTooLarge) {
				t.Fatalf("second call err = %v", err2)
			}
		})
	}
}

// A frame of exactly the limit passes; one byte more does not.
func TestReaderLimitBoundary(t *testing.T) {
	frame := "data: " + strings.Repeat("x", 92) + "\n\n" // 100 bytes
	if _, err := NewReader(strings.NewReader(frame), 100).Next(); err != nil {
		t.Fatalf("exact limit: %v", err)
	}
	// Exactly the limit, ending in CR: needs the lookahead byte to know.
	crFrame := "data: " + strings.Repeat("x", 92) + "\r\r" + "data: y\n\n"
	rd := NewReader(iotest.OneByteReader(strings.NewReader(crFrame)), 100)
	if f, err := rd.Next(); err != nil || len(f.Raw) != 100 {
		t.Fatalf("exact limit CR: %d %v", len(f.Raw), err)
	}
	if _, err := NewReader(strings.NewReader("d"+frame), 100).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("limit+1: %v", err)
	}
}

// Pooled readers must not leak state (BOM decision, errors) between streams.
func TestReaderReset(t *testing.T) {
	rd := NewReader(strings.NewReader("data: a"), 0)
	if _, err := rd.Next(); err != io.ErrUnexpectedEOF {
		t.Fatal(err)
	}
	rd.Reset(strings.NewReader("\xEF\xBB\xBFevent: e\ndata: b\n\n"))
	f, err := rd.Next()
	if err != nil || f.Event != "e" || string(f.Data) != "b" {
		t.Fatalf("after reset: %+v %v", f, err)
	}
}

// refFrames is a deliberately naive reference: split the whole input into
// lines first, then group lines into frames.
func refFrames(in []byte) []wantFrame {
	in = bytes.TrimPrefix(in, bom)
	var frames []wantFrame
	var cur wantFrame
	var data [][]byte
	start := 0
	flush := func(end int) {
		cur.raw = string(in[start:end])
		if cur.hasData {
			cur.data = string(bytes.Join(data, []byte("\n")))
		}
		frames = append(frames, cur)
		cur, data, start = wantFrame{}, nil, end
	}
	for i := 0; i < len(in); {
		j := i
		for j < len(in) && in[j] != '\r' && in[j] != '\n' {
			j++
		}
		line := in[i:j]
		if j == len(in) {
			i = j
		} else if in[j] == '\r' && j+1 < len(in) && in[j+1] == '\n' {
			i = j + 2
		} else {
			i = j + 1
		}
		if len(line) == 0 && j < len(in) {
			flush(i)
			continue
		}
		if len(line) == 0 || line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			cur.hasData = true
			data = append(data, value)
		case "event":
			cur.event = string(value)
		}
	}
	if start < len(in) {
		flush(len(in))
	}
	return frames
}

func FuzzReader(f *testing.F) {
	for _, tc := range readerCases {
		f.Add([]byte(tc.in), uint16(0))
	}
	f.Add([]byte("data: a\r\n\r\ndata: b\r\r\n:c\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		want := refFrames(in)
		var src io.Reader = bytes.NewReader(in)
		if split > 0 && int(split) < len(in) {
			src = io.MultiReader(bytes.NewReader(in[:split]), iotest.OneByteReader(bytes.NewReader(in[split:])))
		}
		// A recycled reader, as a gateway gets one per stream: what the
		// input before left in it must not show.
		rd := Get(src, 64)
		defer rd.Release()
		var got []wantFrame
		for {
			fr, err := rd.Next()
			if errors.Is(err, ErrFrameTooLarge) {
				if cap(rd.buf) > 65 {
					t.Fatalf("buffer %d", cap(rd.buf))
				}
				return
			}
			if len(fr.Raw) > 64 {
				t.Fatalf("frame of %d bytes over limit", len(fr.Raw))
			}
			if len(fr.Raw) > 0 {
				got = append(got, wantFrame{string(fr.Raw), fr.Event, string(fr.Data), fr.HasData})
			}
			if err != nil {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("input %q\n got %v\nwant %v", in, got, want)
		}
		checkRuns(t, in, split, want)
	})
}

// checkRuns reads in as a proxy joining runs does (Extend after every
// frame, the run written out before a read, as the pump flushes when
// Buffered is false): what it writes must be the frames' bytes in order,
// so no run may join bytes across a read that moved the buffer.
func checkRuns(t *testing.T, in []byte, split uint16, want []wantFrame) {
	var src io.Reader = bytes.NewReader(in)
	if split > 0 && int(split) < len(in) {
		src = io.MultiReader(iotest.HalfReader(bytes.NewReader(in[:split])), bytes.NewReader(in[split:]))
	}
	rd := NewReader(src, 64)
	var out, run []byte
	for {
		if !rd.Buffered() {
			out, run = append(out, run...), nil
		}
		fr, err := rd.Next()
		if len(fr.Raw) > 0 {
			if j, ok := rd.Extend(run, fr.Raw); ok {
				run = j
			} else {
				t.Fatalf("frame %q not joined to the run of its read", fr.Raw)
			}
		}
		if err != nil {
			break
		}
	}
	out = append(out, run...)
	var all []byte
	for _, w := range want {
		all = append(all, w.raw...)
	}
	if !bytes.Equal(out, all) {
		t.Fatalf("input %q: runs wrote %q, want %q", in, out, all)
	}
}

// A limit smaller than a BOM must still make progress, not spin on a full buffer.
func TestReaderTinyLimit(t *testing.T) {
	_, err := NewReader(strings.NewReader("\xEF\xBBx"), 1).Next()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v", err)
	}
	f, err := NewReader(strings.NewReader("\n"), 1).Next()
	if err != nil || string(f.Raw) != "\n" {
		t.Fatalf("%q %v", f.Raw, err)
	}
}

// chunks returns its reads one by one, like a network connection returning
// what arrived so far.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	(*c)[0] = (*c)[0][n:]
	if (*c)[0] == "" {
		*c = (*c)[1:]
	}
	return n, nil
}

// TestReaderBuffered: a proxy flushes when Buffered is false, so it must be
// true only when Next can return a frame without reading (frames that
// arrived together), and false for a partial frame, a possible CRLF split
// and at the end of the stream.
func TestReaderBuffered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads []string
		want  []bool // Buffered after each Next
	}{
		{"two frames in one read", []string{"data: a\n\ndata: b\n\n"}, []bool{true, false}},
		{"one frame per read", []string{"data: a\n\n", "data: b\n\n"}, []bool{false, false}},
		{"second frame partial", []string{"data: a\n\ndata: b\n", "\n"}, []bool{false, false}},
		{"trailing CR may be CRLF", []string{"data: a\r\n\r\ndata: b\r\n\r", "\n"}, []bool{false, false}},
		{"three in one read", []string{"data: a\n\n: ping\n\ndata: b\n\n"}, []bool{true, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := chunks(slices.Clone(tc.reads))
			rd := NewReader(&src, 0)
			if rd.Buffered() {
				t.Fatal("Buffered before the first read")
			}
			for i, want := range tc.want {
				if _, err := rd.Next(); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				if got := rd.Buffered(); got != want {
					t.Fatalf("after frame %d: Buffered %v, want %v", i, got, want)
				}
			}
			if _, err := rd.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("end: %v", err)
			}
			if rd.Buffered() {
				t.Fatal("Buffered after the end")
			}
		})
	}
}

// TestReaderTakesABurstInFewReads: the first read has room for burstBuf,
// so a stream the upstream wrote at once (and what the transport already
// holds with the headers) comes in one read and a proxy that flushes
// whenever no complete frame is buffered flushes once, as the bare proxy
// does; a later read that fills the buffer with whole frames grows it to
// burstBuf at once, not once per kilobyte (or per doubling); a stream of
// one frame per read waits in its reads with initialBuf, and one large
// frame only doubles it.
func TestReaderTakesABurstInFewReads(t *testing.T) {
	frame := "data: " + strings.Repeat("x", 180) + "\n\n"
	burst := strings.Repeat(frame, 50) // 9.4 KB in one write
	big := "data: " + strings.Repeat("y", 1500) + "\n\n"
	for _, tc := range []struct {
		name       string
		reads      []string
		transport  bool // behind a 4 KiB bufio.Reader, as net/http's transport reads
		want       string
		maxFlushes int // times Buffered is false before the end
		maxBuf     int // the buffer at the end
		maxWait    int // the room of every read after the first (0: not checked)
	}{
		// Why: the first read takes it all; at 1 KiB it took two reads
		// (and two flushes), doubling took five.
		{"a burst", []string{burst}, false, frame, 1, initialBuf, 0},
		{"a burst through the transport", []string{burst}, true, frame, 1, initialBuf, 0},
		// Why: a frame, then a burst: the reader waits for the burst with
		// 1 KiB (it cannot know one comes), which fills it, and the buffer
		// grows to burstBuf at once: one read more, not four; it waits for
		// the end with 1 KiB again.
		{"a burst after a first frame", []string{frame, burst}, false, frame, 3, initialBuf, 0},
		// Why: an idle or steady stream waits with its small buffer.
		{"one frame per read", slices.Repeat([]string{frame}, 50), false, frame, 50, initialBuf, initialBuf},
		{"frames with the headers, then one per read", append([]string{frame + frame + frame}, slices.Repeat([]string{frame}, 20)...),
			false, frame, 21, initialBuf, initialBuf},
		// Why: a frame longer than the buffer is not a burst: it doubles.
		{"large frames", slices.Repeat([]string{big}, 50), false, big, 50, 2 * initialBuf, 2 * initialBuf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := roomOf{r: new(chunks)}
			*src.r.(*chunks) = slices.Clone(tc.reads)
			var in io.Reader = &src
			if tc.transport {
				in = bufio.NewReaderSize(in, 4096)
			}
			rd := NewReader(in, 0)
			flushes, frames := 0, 0
			for {
				f, err := rd.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil || string(f.Raw) != tc.want {
					t.Fatalf("frame %d: %q, %v", frames, f.Raw, err)
				}
				frames++
				if !rd.Buffered() {
					flushes++
				}
			}
			want := 0
			for _, r := range tc.reads {
				want += strings.Count(r, tc.want)
			}
			if frames != want || flushes > tc.maxFlushes || len(rd.buf) > tc.maxBuf {
				t.Fatalf("%d frames, %d flushes (want ≤ %d), buffer %d bytes (want ≤ %d)", frames, flushes, tc.maxFlushes, len(rd.buf), tc.maxBuf)
			}
			if !tc.transport && src.rooms[0] < burstBuf {
				t.Errorf("the first read had room for %d bytes, want %d", src.rooms[0], burstBuf)
			}
			if tc.maxWait > 0 {
				if m := slices.Max(src.rooms[1:]); m > tc.maxWait {
					t.Errorf("a later read had room for %d bytes: a waiting stream holds more than %d (rooms %v)", m, tc.maxWait, src.rooms)
				}
			}
		})
	}
}

// roomOf records the room each Read of r was given.
type roomOf struct {
	r     io.Reader
	rooms []int
}

func (o *roomOf) Read(p []byte) (int, error) {
	o.rooms = append(o.rooms, len(p))
	return o.r.Read(p)
}

// TestReaderExtend: Extend joins a frame to the run only when both are the
// reader's bytes, one right after the other, and the frame is the last one
// Next returned; a copy of the same bytes, an older frame or a gap is not
// joined (the proxy writes it on its own).
func TestReaderExtend(t *testing.T) {
	frame := "data: x\n\n"
	rd := NewReader(strings.NewReader(frame+frame+frame+"data: y"), 0)
	f1, _ := rd.Next()
	if run, ok := rd.Extend(nil, f1.Raw); !ok || string(run) != frame {
		t.Fatalf("the last frame alone: %q, %v", run, ok)
	}
	copied := bytes.Clone(f1.Raw)
	if _, ok := rd.Extend(nil, copied); ok {
		t.Fatal("a copy of the frame's bytes joined as if it were the reader's")
	}
	rd = NewReader(strings.NewReader(frame+frame+frame+"data: y"), 0)
	a, _ := rd.Next()
	b, _ := rd.Next()
	run, ok := rd.Extend(a.Raw, b.Raw)
	if !ok || string(run) != frame+frame {
		t.Fatalf("two adjacent frames: %q, %v", run, ok)
	}
	if _, ok := rd.Extend(nil, a.Raw); ok {
		t.Fatal("an older frame joined as the last one")
	}
	c, _ := rd.Next()
	if _, ok := rd.Extend(a.Raw, c.Raw); ok {
		t.Fatal("frames with a frame between them joined")
	}
	if _, ok := rd.Extend(copied, c.Raw); ok {
		t.Fatal("a run outside the reader's buffer joined")
	}
	if run, ok := rd.Extend(run, c.Raw); !ok || string(run) != frame+frame+frame {
		t.Fatalf("a run of three: %q, %v", run, ok)
	}
	// The unterminated tail of the stream is a frame too.
	d, err := rd.Next()
	if run, ok := rd.Extend(c.Raw, d.Raw); err == nil || !ok || string(run) != frame+"data: y" {
		t.Fatalf("the tail: %q, %v (%v)", run, ok, err)
	}
	if _, ok := rd.Extend(nil, nil); ok {
		t.Fatal("an empty frame joined")
	}
}

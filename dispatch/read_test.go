package dispatch

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/hopgate/hopgate/dispatch/overload"
)

// TestReadBounded pins readBounded to io.ReadAll over io.LimitReader(limit+1),
// what it replaced, whatever the declared length says.
func TestReadBounded(t *testing.T) {
	body := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name  string
		body  string
		limit int64
		size  int64 // declared length; -1 unknown
		r     func(io.Reader) io.Reader
		want  string
		err   error
	}{
		// The common case: Content-Length says the truth.
		{name: "declared", body: body, limit: 4096, size: 1000, want: body},
		// Chunked answers have no length: grown from 512 bytes.
		{name: "unknown", body: body, limit: 4096, size: -1, want: body},
		// A length below the truth must not truncate the body.
		{name: "declared short", body: body, limit: 4096, size: 10, want: body},
		// A length above the truth must not invent bytes.
		{name: "declared long", body: body, limit: 4096, size: 5000, want: body},
		// Exactly at the limit is allowed.
		{name: "at limit", body: body, limit: 1000, size: 1000, want: body},
		// One byte over is an error, with the first limit bytes.
		{name: "over limit", body: body, limit: 999, size: 1000, want: body[:999], err: errBodyTooLarge},
		// Over the limit with no length: the same.
		{name: "over limit unknown", body: body, limit: 100, size: -1, want: body[:100], err: errBodyTooLarge},
		// An empty body with a zero length.
		{name: "empty", body: "", limit: 100, size: 0, want: ""},
		// A reader that returns data with EOF, and one byte at a time.
		{name: "data with EOF", body: body, limit: 4096, size: 1000, r: iotest.DataErrReader, want: body},
		{name: "one byte reads", body: body, limit: 4096, size: 1000, r: iotest.OneByteReader, want: body},
		// A read error is passed on with what was read before it.
		{name: "read error", body: body, limit: 4096, size: 1000,
			r: func(r io.Reader) io.Reader {
				return io.MultiReader(io.LimitReader(r, 10), iotest.ErrReader(io.ErrUnexpectedEOF))
			},
			want: body[:10], err: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tc.body)
			if tc.r != nil {
				r = tc.r(r)
			}
			got, err := readBounded(r, tc.limit, tc.size, nil)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if !bytes.Equal(got, []byte(tc.want)) {
				t.Fatalf("got %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
}

// TestReadBoundedOneAllocation: a body that declares its length is read
// into one buffer (the point of the size argument).
func TestReadBoundedOneAllocation(t *testing.T) {
	body := []byte(strings.Repeat("x", 1100))
	r := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(body)
		if _, err := readBounded(r, 1<<20, int64(len(body)), nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Fatalf("%v allocations per read, want 1", allocs)
	}
}

// FuzzReadBounded: any body length, limit, declared length and read size
// reads as io.ReadAll over io.LimitReader(limit+1) does, across the first
// buffer and any number of chunks; over the limit is errBodyTooLarge with
// the first limit bytes.
func FuzzReadBounded(f *testing.F) {
	f.Add(uint32(1000), uint32(4096), int32(-1), uint16(0))
	f.Add(uint32(3*chunkSize+17), uint32(4*chunkSize), int32(-1), uint16(1000))
	f.Add(uint32(3*chunkSize+17), uint32(2*chunkSize+5), int32(100), uint16(0))
	f.Add(uint32(chunkSize+511), uint32(chunkSize+511), int32(chunkSize+511), uint16(7))
	f.Fuzz(func(t *testing.T, n, limit uint32, size int32, step uint16) {
		n, limit = n%(5*chunkSize), limit%(5*chunkSize)
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i * 7)
		}
		var r io.Reader = bytes.NewReader(body)
		if step > 0 {
			r = &stepReader{r, int(step)}
		}
		got, err := readBounded(r, int64(limit), int64(size), nil)
		want, _ := io.ReadAll(io.LimitReader(bytes.NewReader(body), int64(limit)+1))
		if len(want) > int(limit) {
			if !errors.Is(err, errBodyTooLarge) || !bytes.Equal(got, want[:limit]) {
				t.Fatalf("over the limit: %d bytes, %v", len(got), err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes, %v; want %d", len(got), err, len(want))
		}
	})
}

// stepReader reads at most n bytes at a time.
type stepReader struct {
	r io.Reader
	n int
}

func (s *stepReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

// A long body is held against the budget before each buffer is made, and
// the chunks it was read into go back to the pool and the budget: what
// stays held is the first buffer and the body's own. A budget too small
// for it fails the read with errBudget, and nothing stays taken once the
// hold is released.
func TestReadBoundedHoldsBeforeAllocating(t *testing.T) {
	body := bytes.Repeat([]byte("y"), 5*chunkSize+3)
	budget := overload.NewBudget(64 << 20)
	hold := overload.NewHold(budget)
	got, err := readBounded(bytes.NewReader(body), 16<<20, -1, &hold)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if want := int64(512 + len(body)); hold.Held() != want || budget.Used() != want {
		t.Fatalf("held %d, budget used %d; want %d (first buffer + the body)", hold.Held(), budget.Used(), want)
	}
	hold.Release()

	small := overload.NewBudget(2 * chunkSize)
	hold = overload.NewHold(small)
	if _, err := readBounded(bytes.NewReader(body), 16<<20, -1, &hold); !errors.Is(err, errBudget) {
		t.Fatalf("err = %v, want errBudget", err)
	}
	if hold.Held() != small.Used() || hold.Held() > 2*chunkSize {
		t.Fatalf("after errBudget: held %d, budget used %d", hold.Held(), small.Used())
	}
	hold.Release()
	if small.Used() != 0 {
		t.Fatalf("budget used %d after release", small.Used())
	}
}

// Reading a long body of unknown length allocates about its size, not the
// trail of copies append would leave (about five times the body).
func TestReadBoundedLongBodyAllocatesItsSize(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 4<<20)
	r := bytes.NewReader(body)
	readBounded(r, 16<<20, -1, nil) // fill the chunk pool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r.Reset(body)
	if _, err := readBounded(r, 16<<20, -1, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// The body itself, plus chunks the pool lost to a GC meanwhile.
	if got := after.TotalAlloc - before.TotalAlloc; got > 2*uint64(len(body)) {
		t.Fatalf("allocated %d bytes to read %d", got, len(body))
	}
}

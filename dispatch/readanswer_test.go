package dispatch

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"

	"github.com/hopgate/hopgate/dispatch/overload"
)

// endless is a body that never ends (the fake's endless-body).
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestReadAnswer: a buffered answer reads as readBounded reads it when it
// is whole; when the read fails past the first buffer (over the limit, a
// read error) its bytes are dropped: nil, the error, and nothing left
// held but the first buffer.
func TestReadAnswer(t *testing.T) {
	body := bytes.Repeat([]byte("y"), 3*chunkSize+17)
	cases := []struct {
		name  string
		r     io.Reader
		limit int64
		want  []byte
		err   error
	}{
		// Why: a whole answer is the answer, as readBounded reads it.
		{"whole", bytes.NewReader(body), 16 << 20, body, nil},
		// Why: over the limit is a failed hop: no copy of its bytes.
		{"over the limit", bytes.NewReader(body), 2 * chunkSize, nil, errBodyTooLarge},
		// Why: a body cut after some chunks is a failed hop too.
		{"read error", io.MultiReader(bytes.NewReader(body), iotest.ErrReader(io.ErrUnexpectedEOF)), 16 << 20, nil, io.ErrUnexpectedEOF},
		// Why: within the first buffer the error keeps what was read (no copy is made).
		{"over the limit in the first buffer", bytes.NewReader(body[:1000]), 100, body[:100], errBodyTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			budget := overload.NewBudget(64 << 20)
			hold := overload.NewHold(budget)
			defer hold.Release()
			got, err := readAnswer(tc.r, tc.limit, -1, &hold)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if !bytes.Equal(got, tc.want) || (tc.want == nil) != (got == nil) {
				t.Fatalf("got %d bytes, want %d", len(got), len(tc.want))
			}
			if tc.want == nil && hold.Held() != 512 {
				t.Fatalf("held %d after a failed read, want only the first buffer's 512", hold.Held())
			}
		})
	}
}

// TestReadAnswerEndlessBodyAllocatesNoCopy: an endless body read up to its
// limit allocates nothing near the limit (the chunks come from the pool);
// before, the failed read was joined into one buffer of the limit's size,
// garbage at once (issue 35 item 6: at 250/s the soak's largest
// allocation site).
func TestReadAnswerEndlessBodyAllocatesNoCopy(t *testing.T) {
	const limit = 4 << 20
	if _, err := readAnswer(endless{}, limit, -1, nil); !errors.Is(err, errBodyTooLarge) { // fill the chunk pool
		t.Fatalf("err = %v", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err := readAnswer(endless{}, limit, -1, nil)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errBodyTooLarge) || got != nil {
		t.Fatalf("%d bytes, err %v; want nil, errBodyTooLarge", len(got), err)
	}
	// Chunks the pool lost to a GC meanwhile may be made again.
	if n := after.TotalAlloc - before.TotalAlloc; n >= limit/2 {
		t.Fatalf("allocated %d bytes to read and drop an endless body (limit %d)", n, limit)
	}
}

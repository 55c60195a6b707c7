package dispatch

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
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

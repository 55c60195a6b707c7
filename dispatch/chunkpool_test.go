package dispatch

import (
	"bytes"
	"errors"
	"testing"
)

// Why: an endless body gives back max_response_bytes of chunks at once;
// a sync.Pool kept them all alive, uncounted by the budget, until the
// second collection after (170 MB of the heap in the soak at 250/s). The
// free list keeps at most maxIdleChunks, and what it keeps is reused.
func TestIdleChunksAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks int // chunks the body needs past its first buffer
		keep   bool
	}{
		// An endless body over the limit, dropped (readAnswer).
		{"endless body dropped", 4 * maxIdleChunks, false},
		// A long answer kept: its chunks are joined and given back.
		{"long answer kept", 2 * maxIdleChunks, true},
		// Fewer chunks than the list holds: all of them kept for reuse.
		{"short", maxIdleChunks / 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for len(idleChunks) > 0 {
				<-idleChunks
			}
			limit := int64(tc.chunks) * chunkSize
			body := bytes.Repeat([]byte("z"), int(limit)+1+512) // over the limit past the first buffer
			if tc.keep {
				body = body[:limit]
			}
			_, err := readBody(bytes.NewReader(body), limit, -1, nil, tc.keep)
			if tc.keep != (err == nil) || (!tc.keep && !errors.Is(err, errBodyTooLarge)) {
				t.Fatalf("err = %v", err)
			}
			if n, want := len(idleChunks), min(tc.chunks, maxIdleChunks); n != want {
				t.Fatalf("%d idle chunks after a body of %d, want %d", n, tc.chunks, want)
			}
			c := getChunk()
			if cap(*c) != chunkSize || len(*c) != 0 {
				t.Fatalf("reused chunk len %d cap %d", len(*c), cap(*c))
			}
			if n, want := len(idleChunks), min(tc.chunks, maxIdleChunks)-1; n != want {
				t.Fatalf("getChunk did not take an idle chunk: %d left, want %d", n, want)
			}
			putChunk(c)
		})
	}
}

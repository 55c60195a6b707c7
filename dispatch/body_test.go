package dispatch

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Why: up to smallBody a hop's body is an in-memory reader the request
// keeps (one write with the headers); above it, a body that lets go of the
// prompt at EOF. GetBody's replays read the same bytes, again and again.
func TestUpstreamBodyKinds(t *testing.T) {
	// The transport's write buffer is 4 KiB: a kept body larger than what
	// fits beside typical headers (~500 bytes) would be held per open
	// stream without ever saving the write.
	if smallBody+512 > 4<<10 {
		t.Fatalf("smallBody = %d: it and the headers no longer fit one 4 KiB write", smallBody)
	}
	for _, n := range []int{0, smallBody, smallBody + 1, 64 << 10} {
		b := bytes.Repeat([]byte("x"), n)
		body := newUpstreamBody(b)
		ub, lets := body.(*upstreamBody)
		if lets != (n > smallBody) {
			t.Errorf("%d bytes: body %T", n, body)
		}
		if got, err := io.ReadAll(body); err != nil || len(got) != n {
			t.Errorf("%d bytes: read %d, %v", n, len(got), err)
		}
		if lets && ub.b != nil {
			t.Errorf("%d bytes: the body still holds the prompt after EOF", n)
		}
		held := &heldBody{b: b}
		for range 2 {
			replay, err := held.get()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := io.ReadAll(replay); len(got) != n {
				t.Errorf("%d bytes: a replay read %d", n, len(got))
			}
		}
		held.release()
		if _, err := held.get(); !errors.Is(err, errBodyReleased) {
			t.Errorf("%d bytes: a replay after release: %v", n, err)
		}
	}
}

package dispatch_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// countingConn counts the writes made on an upstream connection.
type countingConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *int
}

func (c countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	*c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// TestSmallRequestOneWrite: a hop's request with a small body leaves in one
// write, headers and body together. A body the transport does not know to
// be in memory makes it flush the headers first: a second syscall and
// packet on every hop. A large body takes several writes whatever its type;
// it is sent too, so the counter is seen to count.
func TestSmallRequestOneWrite(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	var (
		mu     sync.Mutex
		writes int
	)
	dial := h.Transport.DialContext
	h.Transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, mu: &mu, writes: &writes}, nil
	}
	for _, tc := range []struct {
		name   string
		prompt int
		max    int // writes allowed for the request
	}{
		{"1KiB", 1 << 10, 1},
		{"64KiB", 64 << 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			writes = 0
			mu.Unlock()
			body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", tc.prompt) + `"}]}`
			if r := h.Post(body); r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			mu.Lock()
			n := writes
			mu.Unlock()
			t.Logf("%d writes for a %d-byte body", n, len(body))
			if n < 1 || n > tc.max {
				t.Errorf("the upstream request took %d writes, want 1..%d", n, tc.max)
			}
			if tc.max > 1 && n < 2 {
				t.Errorf("a %d-byte body in %d write: the counter does not see the writes", len(body), n)
			}
		})
	}
}

package testkit

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// The buffer keeps every write of concurrent writers whole, and Tail gives
// the last lines.
func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { fmt.Fprintf(&b, "line %02d\n", i) })
	}
	wg.Wait()
	if got := len(b.String()); got != 50*len("line 00\n") {
		t.Fatalf("buffer holds %d bytes, want %d", got, 50*len("line 00\n"))
	}
	var c SyncBuffer
	c.Write([]byte("a\nb\nc\n"))
	if got := c.Tail(2); got != "b\nc" {
		t.Fatalf("Tail(2) = %q, want %q", got, "b\nc")
	}
}

// The address is on loopback and can be bound.
func TestLoopbackAddr(t *testing.T) {
	addr := LoopbackAddr(t)
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("LoopbackAddr() = %q", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot bind %s: %v", addr, err)
	}
	ln.Close()
}

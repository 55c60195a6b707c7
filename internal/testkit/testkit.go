// Package testkit holds the few helpers that tests of several packages
// need alike: a free loopback address, a log buffer safe for concurrent
// writers, and the one bounded wait on a condition (Eventually, Recv) that
// replaces hand-rolled polling loops. Its sub-packages start real
// components: gwtest a gateway, pgtest PostgreSQL. It is for tests only;
// nothing in the gateway imports it.
package testkit

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// LoopbackAddr returns a 127.0.0.1 address that was free a moment ago.
// Another process may take it before the caller binds; the caller then
// fails loudly.
func LoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// SyncBuffer collects what concurrent writers write (a gateway's logger, a
// child process's output copied by exec) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Tail returns the last n lines, for failure messages.
func (s *SyncBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(s.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

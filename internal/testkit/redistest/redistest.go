// Package redistest starts real, throwaway Redis servers for tests:
// redis-server on a free 127.0.0.1 port, no persistence, its working
// directory a temporary one, stopped when the test ends. Each test gets a
// server of its own (they start in milliseconds), so a test may stop and
// restart it under load without disturbing another.
//
// The binary comes from HOPGATE_REDIS_BIN (what `make redis` prints), else
// PATH. When it is missing the test is skipped, except under CI=true, where
// a missing server means the install step broke and must not pass
// silently. Under -short every Redis test is skipped, like the repo's other
// tests that start real components.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
)

// EnvBin names the redis-server binary.
const EnvBin = "HOPGATE_REDIS_BIN"

// Server is one running (or stopped) redis-server. Its methods are safe
// for concurrent use.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	addr string
	log  testkit.SyncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// New starts a server for the test and stops it when the test ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: this test starts a real Redis")
	}
	bin := os.Getenv(EnvBin)
	if bin == "" {
		bin, _ = exec.LookPath("redis-server")
	}
	if bin == "" {
		msg := "redis-server unavailable (run `make redis`, or set " + EnvBin + ")"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), addr: testkit.LoopbackAddr(tb)}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return s.addr }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return "redis://" + s.addr + "/0" }

// Start starts the server on its port (again, after Stop) and waits until
// it answers PING.
func (s *Server) Start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.addr)
	cmd := exec.Command(s.bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(testkit.Bound)
	for {
		if ping(s.addr) == nil {
			return
		}
		select {
		case <-done:
			s.cmd = nil
			s.tb.Fatalf("redis-server exited at start:\n%s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server did not answer PING within %s:\n%s", testkit.Bound, s.log.String())
		}
		time.Sleep(5 * time.Millisecond) // polling a child process's port: nothing to wait on
	}
}

// Stop kills the server (SIGKILL: what a crash looks like to clients)
// and waits for it to exit. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// ping speaks just enough RESP to see the server answer.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

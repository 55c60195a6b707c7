// Package hopproc runs real `hopgate serve` OS processes for tests that
// need more than one gateway process (replicas sharing a store), built once
// per test binary from cmd/hopgate. Processes listen on loopback ports the
// package reserves, and stop (SIGTERM, then kill) when the test ends.
package hopproc

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/hopgate once per test binary and returns its path. It
// skips the test under -short.
func Binary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs the hopgate binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hopgate-proc-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "hopgate")
		if out, err := exec.Command("go", "build", "-o", binPath, "github.com/hopgate/hopgate/cmd/hopgate").CombinedOutput(); err != nil {
			buildErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build hopgate: %v", buildErr)
	}
	return binPath
}

// Proc is one running `hopgate serve`.
type Proc struct {
	Addr, Admin string              // the main and admin listeners, host:port
	Logs        *testkit.SyncBuffer // its stderr
	done        chan struct{}
}

// client checks readiness; its idle connections are closed at cleanup
// (goleak).
var client = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}

// Start writes yml — whose listen and admin_listen must be "{{listen}}" and
// "{{admin}}" — to a file and runs `hopgate serve` on it with env added to
// the test's environment, until the test ends. It returns once /readyz
// answers 200.
func Start(t testing.TB, yml string, env ...string) *Proc {
	t.Helper()
	bin := Binary(t)
	p := &Proc{Addr: testkit.LoopbackAddr(t), Admin: testkit.LoopbackAddr(t), Logs: &testkit.SyncBuffer{}, done: make(chan struct{})}
	yml = strings.Replace(yml, "{{listen}}", p.Addr, 1)
	yml = strings.Replace(yml, "{{admin}}", p.Admin, 1)
	path := filepath.Join(t.TempDir(), "hopgate.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = p.Logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var werr error
	go func() { werr = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		client.CloseIdleConnections()
	})
	testkit.Poll{Every: 20 * time.Millisecond}.EventuallyNil(t, func() error {
		select {
		case <-p.done:
			return fmt.Errorf("hopgate exited: %v\n%s", werr, p.Logs.String())
		default:
		}
		resp, err := client.Get("http://" + p.Admin + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}, "hopgate ready")
	return p
}

package dispatch

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// InStackChild is how a stack test runs under debug.SetMaxStack, which
// crashes the process a goroutine grows past the limit in: in a child
// process. Called in the test (the process env is not set in), it runs
// the test again in a child with env set and returns false, having failed
// t with the child's output (the crashing goroutine's traceback first)
// unless the child exited cleanly and logged done. In the child it returns
// true: the caller runs the measured part and logs done.
func InStackChild(t *testing.T, env, done, failure string) bool {
	t.Helper()
	if os.Getenv(env) != "" {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(done)) {
		out = out[:min(len(out), 16<<10)] // the crashing goroutine comes first
		t.Fatalf("%s (%v); the path that did:\n%s", failure, err, out)
	}
	return false
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
)

// envSpawnTest makes the test binary play a hopbench that started one
// child through startChild and is then killed (TestChildEndsWithHopbench).
const envSpawnTest = "HOPBENCH_TEST_SPAWN"

// spawnAndWait starts `sleep 600` as startChild starts nginx or node,
// handing it file descriptor 3 (the test's pipe), prints its pid and
// waits to be killed.
func spawnAndWait() {
	cmd := exec.Command("sleep", "600")
	cmd.ExtraFiles = []*os.File{os.NewFile(3, "pipe")}
	c, err := startChild("sleep", cmd, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("pid %d\n", c.pid())
	select {}
}

// A run cut short leaves nothing running: a child started by startChild
// ends when hopbench ends, even when hopbench is killed and none of its
// stops run. The child holds the write end of a pipe, so the pipe's read
// end sees EOF exactly when the child (and the killed parent) are gone:
// no polling of the process table.
func TestChildEndsWithHopbench(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's (proc_other.go)")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe)
	parent.Env = append(os.Environ(), envSpawnTest+"=1")
	parent.ExtraFiles = []*os.File{w}
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close() // the parent and its child hold the only write ends now
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()

	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("the spawning process printed nothing: %v", sc.Err())
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "pid "))
	if err != nil {
		t.Fatalf("%q: %v", sc.Text(), err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	if err := r.SetReadDeadline(time.Now().Add(testkit.Bound)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the child (pid %d) still held its pipe %v after its parent was killed: %v", pid, testkit.Bound, err)
	}
}

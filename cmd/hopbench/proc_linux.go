//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// endWithParent makes cmd's process end when hopbench does: the kernel
// sends it SIGTERM once the thread that started it exits, which for a Go
// program without locked threads is when the process exits, however it
// exits (killed by CI's timeout, an unhandled signal, a panic). Without
// it, node was seen still listening after hopbench was killed (the roles
// end on their own when their stdin closes). SIGTERM rather than SIGKILL,
// so nginx's master stops its workers as it exits. The signal reaches the
// processes hopbench starts, not their children: the test binary `go
// test` runs (go does not pass SIGTERM on) finishes its micro-benchmarks,
// bounded by -benchtime, on its own, and so would an npm install script.
func endWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}

//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// endWithParent makes cmd's process end when hopbench does: the kernel
// sends it SIGTERM once the thread that started it exits, which for a Go
// program without locked threads is when the process exits, however it
// exits (killed by CI's timeout, an unhandled signal, a panic). Without it
// a run cut short left its nginx, HAProxy, Redis and node processes
// running (node was seen still listening after hopbench was killed; the
// roles end on their own when their stdin closes). SIGTERM rather than
// SIGKILL: nginx's and Redis's masters then stop their own workers.
func endWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}

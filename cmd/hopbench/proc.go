package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// child is one process of the benchmark world.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addrs  map[string]string
	done   chan struct{}
	err    error
	stderr *tailBuffer
}

// startRole re-executes this binary in role (see runRole) and waits until it
// announced its listeners.
func startRole(role string, env ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), append([]string{envRole + "=" + role}, env...)...)
	c, err := startChild(role, cmd, true)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// startChild starts cmd. With protocol, it reads "listen NAME ADDR" lines
// until "ready"; otherwise it returns at once and the caller waits for the
// process's port itself.
func startChild(name string, cmd *exec.Cmd, protocol bool) (*child, error) {
	c := &child{name: name, cmd: cmd, addrs: map[string]string{}, done: make(chan struct{})}
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &tailBuffer{}
	c.stderr = stderr
	cmd.Stderr = stderr
	endWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if protocol {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	if !protocol {
		return c, nil
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				<-c.done
				return nil, fmt.Errorf("%s exited before ready: %v\n%s", name, c.err, stderr.String())
			}
			if line == "ready" {
				go func() {
					for range lines { // keep draining
					}
				}()
				return c, nil
			}
			if n, a, ok := parseListen(line); ok {
				c.addrs[n] = a
			}
		case <-timeout:
			c.stop()
			return nil, fmt.Errorf("%s not ready after 60 s\n%s", name, stderr.String())
		}
	}
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stop closes the child's stdin (its signal to shut down cleanly) and kills
// it if it has not exited within 15 s.
func (c *child) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// kill ends a child that does not speak the stdin protocol (node).
func (c *child) kill() {
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// cpuNS is the CPU time pid's threads have run, in nanoseconds: the sum
// of the first field of /proc/PID/task/*/schedstat (the scheduler's own
// clock, not the 10 ms ticks of /proc/PID/stat). A thread that exited is
// no longer counted; a Go process keeps its threads.
func cpuNS(pid int) (int64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited between the two reads
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		sum += n
	}
	return sum, nil
}

// freePort reserves an ephemeral loopback port for a process that cannot
// report the one it bound (node). The gap until it binds is a small race.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitPort waits until addr accepts TCP connections.
func waitPort(addr string, d time.Duration, done <-chan struct{}) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("process exited")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not listening after %s", addr, d)
}

// tailBuffer keeps the last 8 KiB written to it (a child's stderr).
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 8<<10 {
		t.b = append(t.b[:0], t.b[len(t.b)-8<<10:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// sysIO is a process's read and write system calls so far
// (/proc/PID/io: syscr, syscw; sockets included).
type sysIO struct{ reads, writes int64 }

func readSysIO(pid int) (sysIO, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return sysIO{}, err
	}
	return parseSysIO(pid, b)
}

// parseSysIO reads syscr and syscw from the text of /proc/PID/io.
func parseSysIO(pid int, b []byte) (sysIO, error) {
	var s sysIO
	var seen int
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *int64
		switch k {
		case "syscr":
			dst = &s.reads
		case "syscw":
			dst = &s.writes
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return sysIO{}, fmt.Errorf("/proc/%d/io: %s: %w", pid, k, err)
		}
		*dst = n
		seen++
	}
	if seen != 2 {
		return sysIO{}, fmt.Errorf("/proc/%d/io: no syscr and syscw", pid)
	}
	return s, nil
}

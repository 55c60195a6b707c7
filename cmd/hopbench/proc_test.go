package main

import (
	"os"
	"strings"
	"testing"
)

// The syscall columns come from /proc/PID/io's syscr and syscw; a file
// without them (or with a value that is not a count) is an error, never a
// zero that would read as "no system calls".
func TestParseSysIO(t *testing.T) {
	const proc = "rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 3\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
	for _, tc := range []struct {
		name string
		in   string
		want sysIO
		err  string
	}{
		// why: the two counters, the byte counters beside them ignored.
		{"the kernel's file", proc, sysIO{reads: 10, writes: 3}, ""},
		// why: a kernel without task I/O accounting has no such lines.
		{"no counters", "rchar: 1\nwchar: 2\n", sysIO{}, "no syscr and syscw"},
		{"one counter", "syscr: 10\n", sysIO{}, "no syscr and syscw"},
		{"not a count", strings.Replace(proc, "syscw: 3", "syscw: three", 1), sysIO{}, "syscw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSysIO(1, []byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	// This process's own counters: reading a file is a read system call,
	// so they are there and move.
	before, err := readSysIO(os.Getpid())
	if err != nil {
		t.Fatalf("/proc/PID/io: %v (hopbench reads it for every relay)", err)
	}
	if _, err := os.ReadFile("/proc/self/status"); err != nil {
		t.Fatal(err)
	}
	after, err := readSysIO(os.Getpid())
	if err != nil || after.reads <= before.reads {
		t.Fatalf("reads %d then %d (%v): the counter did not move", before.reads, after.reads, err)
	}
}

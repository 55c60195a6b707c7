package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// machineFacts describe where the numbers came from.
type machineFacts struct {
	date    time.Time
	cpu     string
	cores   int
	goVer   string
	kernel  string
	loadavg string
}

func readFacts() machineFacts {
	f := machineFacts{date: time.Now().UTC(), cores: runtime.NumCPU(), goVer: runtime.Version(), cpu: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				f.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if fs := strings.Fields(string(b)); len(fs) >= 3 {
			f.loadavg = strings.Join(fs[:3], " ")
		}
	}
	return f
}

// moduleRoot finds the directory holding go.mod, from dir upwards.
func moduleRoot(dir string) (string, error) {
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

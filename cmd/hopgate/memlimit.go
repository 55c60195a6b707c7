package main

import (
	"fmt"
	"strconv"
	"strings"
)

// memoryLimitShare is the share of the container's memory limit given to
// the Go runtime as its soft limit. Not all of it: the binary's
// file-backed pages and memory the runtime does not count sit on top
// (a soak at the runtime limit went over it by 20–30 MiB:
// docs/reliability.md, Finding 5), and a pod at its limit is one burst
// from an OOM kill. At 0.9 a 250/s soak peaked at 487 MiB of 512 (95 %);
// 0.8 leaves the runtime's overshoot and the binary inside 90 %.
const memoryLimitShare = 0.8

// memoryLimit returns the soft memory limit to set from the environment:
// HOPGATE_MEMORY_LIMIT is the container's limit in bytes (what Kubernetes'
// resourceFieldRef limits.memory gives), and the runtime gets
// memoryLimitShare of it. GOMEMLIMIT, when set, wins: the runtime read it
// already and it is left alone (0).
func memoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv("HOPGATE_MEMORY_LIMIT"))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("HOPGATE_MEMORY_LIMIT=%q: want the container's memory limit in bytes", v)
	}
	return int64(float64(n) * memoryLimitShare), nil
}

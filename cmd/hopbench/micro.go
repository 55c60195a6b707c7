package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// microPackages hold the hot-path micro-benchmarks: SSE reader, gate,
// breaker check, classification, request rewrite, the telemetry the
// request path records, the encoding of trace exports (SDK vs otlpwire),
// the translation between OpenAI chat and Anthropic Messages (per
// stream event, the translating path's own cost), and the tenant
// limiter's admission and settle.
var microPackages = []string{
	"./internal/sse", "./internal/gate", "./dispatch/breaker", "./dispatch/classify",
	"./internal/reqbody", "./dispatch", "./telemetry", "./internal/otlpwire", "./internal/translate",
	"./dispatch/ratelimit",
}

// microBench is one line of `go test -bench` output.
type microBench struct {
	pkg         string // short, e.g. internal/sse
	name        string
	nsPerOp     float64
	mbPerS      float64 // 0 when not reported
	bytesPerOp  float64
	allocsPerOp float64
	hasMem      bool
}

type microResult struct {
	ran     bool
	command string
	benches []microBench
	failed  []string // packages that did not build or failed
	err     string
}

// runMicro runs the micro-benchmarks in the module at root.
func runMicro(ctx context.Context, root, benchtime string, log io.Writer) microResult {
	res := microResult{ran: true}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", benchtime}, microPackages...)
	res.command = "go " + strings.Join(args, " ")
	cmd := exec.CommandContext(ctx, goBin, args...)
	endWithParent(cmd)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, log)
	cmd.Stderr = io.MultiWriter(&out, log)
	if err := cmd.Run(); err != nil {
		res.err = err.Error()
	}
	res.benches, res.failed = parseBench(out.String())
	return res
}

const modulePath = "github.com/hopgate/hopgate/"

// parseBench reads `go test -bench -benchmem` output.
func parseBench(out string) ([]microBench, []string) {
	var benches []microBench
	var failed []string
	pkg := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(strings.TrimSpace(p), modulePath)
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && (f[0] == "FAIL" || f[0] == "---") && strings.HasPrefix(f[1], modulePath) {
			failed = append(failed, strings.TrimPrefix(f[1], modulePath))
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		b := microBench{pkg: pkg, name: stripProcs(f[0])}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				b.nsPerOp = v
			case "MB/s":
				b.mbPerS = v
			case "B/op":
				b.bytesPerOp, b.hasMem = v, true
			case "allocs/op":
				b.allocsPerOp = v
			}
		}
		benches = append(benches, b)
	}
	return benches, failed
}

// stripProcs drops the -GOMAXPROCS suffix: BenchmarkReader-2 → BenchmarkReader.
func stripProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func (b microBench) String() string {
	return fmt.Sprintf("%s.%s %.1f ns/op %.0f allocs/op", b.pkg, b.name, b.nsPerOp, b.allocsPerOp)
}

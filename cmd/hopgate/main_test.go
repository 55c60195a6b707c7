package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestCheckReportsEveryMistake: `hopgate check` on a config with three
// mistakes reports all three, each with its line.
func TestCheckReportsEveryMistake(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"check", "--config", "../../testdata/config/three-mistakes.yaml"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, errb.String())
	}
	var lines []string
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.HasPrefix(l, "  ../../testdata/config/three-mistakes.yaml:") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("want 3 located errors, got %d:\n%s", len(lines), errb.String())
	}
	for _, want := range []string{":8: unknown key \"regoin\"", ":21: chain of model", ":25: unknown channel \"openia-eu\""} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("missing %q in:\n%s", want, errb.String())
		}
	}
}

// TestCheckPrintsChains: a valid config prints every model's chain,
// cheapest first, and never the credential.
func TestCheckPrintsChains(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-be-printed")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-be-printed")
	var out, errb bytes.Buffer
	if code := run([]string{"check", "--config", "../../testdata/config/canonical.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	if !strings.Contains(s, "gpt-4o-mini") || strings.Contains(s, "sk-must-not-be-printed") || strings.Contains(s, "sk-ant-must-not-be-printed") {
		t.Fatalf("output:\n%s", s)
	}
	// Equal prices keep file order: backup-us is listed first in the chain.
	if !strings.Contains(s, "1.  backup-us") || !strings.Contains(s, "2.  openai-eu") {
		t.Fatalf("chain not in price/file order:\n%s", s)
	}
}

// TestCheckMissingEnv: a missing credential variable is a start-up error
// that names it, never a silent empty key.
func TestCheckMissingEnv(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-test")
	t.Setenv("OPENAI_API_KEY", "")
	os.Unsetenv("OPENAI_API_KEY")
	var out, errb bytes.Buffer
	if code := run([]string{"check", "--config", "../../testdata/config/canonical.yaml"}, &out, &errb); code == 0 {
		t.Fatal("missing env var accepted")
	}
	if !strings.Contains(errb.String(), "OPENAI_API_KEY") {
		t.Fatalf("error does not name the variable:\n%s", errb.String())
	}
}

// TestServeDrainsOnSIGTERM runs the real binary: a stream in flight when
// SIGTERM arrives completes, /readyz turns 503, and the process exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, fakes, addr, adminAddr, cfgPath := binaryFixture(t)
	writeOneModelConfig(t, cfgPath, fakes, addr, adminAddr, "m|tokens=20|frame-delay=50ms")
	// A collector that refuses every export: the failure must reach the
	// JSON log when the drain flushes the spans.
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "tenant unknown", http.StatusBadRequest)
	}))
	defer collector.Close()
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--drain-timeout", "20s")
	// Export batches every 20 ms, so a refusal happens while serving.
	cmd.Env = append(os.Environ(), "CHANNEL_KEY="+fakes.APIKey,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=20")
	logs := &testkit.SyncBuffer{} // written by exec's copy goroutine while the test reads
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitReady(t, "http://"+adminAddr+"/readyz")

	// A first request: its trace's export is refused while the gateway
	// serves, which OpenTelemetry reports through its error handler.
	first, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, first.Body)
	first.Body.Close()
	waitLog(t, logs, `"level":"ERROR","msg":"opentelemetry","error":"otlp export: 400 Bad Request`)

	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the stream is flowing
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("stream cut by the drain: %v", err)
	}
	if !strings.Contains(string(rest), "tok20 ") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream incomplete after SIGTERM:\n%s", rest)
	}
	waitExit(t, cmd, logs, 30*time.Second)
	if !strings.Contains(logs.String(), `"msg":"drained; bye"`) {
		t.Fatalf("logs:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"error":"otlp export: 400 Bad Request: \"tenant unknown`) {
		t.Fatalf("the refused trace export is not in the JSON log:\n%s", logs.String())
	}
}

// Why: an export that fails while the gateway runs is reported through
// OpenTelemetry's global handler; it must arrive as a JSON error line.
func TestOTelErrorsReachTheJSONLog(t *testing.T) {
	var buf bytes.Buffer
	prev := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	logOTelErrors(telemetry.NewLogger(&buf, slog.LevelInfo))
	otel.Handle(errors.New("otlp export: 503 Service Unavailable"))
	var line struct{ Level, Msg, Error string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line.Level != "ERROR" || line.Msg != "opentelemetry" ||
		line.Error != "otlp export: 503 Service Unavailable" {
		t.Fatalf("log %q (%v)", buf.String(), err)
	}
}

// binaryFixture builds the real binary into a temp dir and starts a fake
// provider "a" on the real clock; it returns the binary, the provider
// (whose credential the child's CHANNEL_KEY must hold), two free loopback
// addresses (listen, admin) and where to write the config.
func binaryFixture(t *testing.T) (bin string, fakes *gwtest.Fakes, addr, adminAddr, cfgPath string) {
	t.Helper()
	bin = filepath.Join(t.TempDir(), "hopgate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	fakes = gwtest.StartFakes(t, gwtest.Options{UpstreamClock: clockwork.NewRealClock()}, "a")
	return bin, fakes, testkit.LoopbackAddr(t), testkit.LoopbackAddr(t), filepath.Join(t.TempDir(), "hopgate.yaml")
}

// writeOneModelConfig writes a config serving model m from the fake a as
// upstreamModel (a fault word of the fake's grammar), on addr and adminAddr.
func writeOneModelConfig(t *testing.T, path string, fakes *gwtest.Fakes, addr, adminAddr, upstreamModel string) {
	t.Helper()
	cfg := fakes.Expand(fmt.Sprintf(`listen: %s
admin_listen: %s
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: %q, price: {input: 1, output: 1}}
`, addr, adminAddr, upstreamModel))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits at most bound for cmd to exit 0.
func waitExit(t *testing.T, cmd *exec.Cmd, logs *testkit.SyncBuffer, bound time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(bound):
		t.Fatalf("did not exit after the drain\n%s", logs.String())
	}
}

// child polls what a child process does, every 20 ms: a real process
// moves on its own, and polling it faster only costs the machine.
var child = testkit.Poll{Every: 20 * time.Millisecond}

// waitLog waits until the process has logged want.
func waitLog(t *testing.T, logs *testkit.SyncBuffer, want string) {
	t.Helper()
	child.EventuallyNil(t, func() error {
		if strings.Contains(logs.String(), want) {
			return nil
		}
		return fmt.Errorf("logs:\n%s", logs.String())
	}, "log "+want)
}

// waitReady waits until url answers 200.
func waitReady(t *testing.T, url string) {
	t.Helper()
	child.Eventually(t, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, url+" ready")
}

// The container's limit becomes 80 % of it for the runtime; an explicit
// GOMEMLIMIT is left to the runtime; a value that is not bytes is a
// start-up error, never a silent default.
func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int64
		err  bool
	}{
		{env: map[string]string{}, want: 0},
		{env: map[string]string{"HOPGATE_MEMORY_LIMIT": "536870912"}, want: 429496729},
		{env: map[string]string{"HOPGATE_MEMORY_LIMIT": "536870912", "GOMEMLIMIT": "400MiB"}, want: 0},
		{env: map[string]string{"HOPGATE_MEMORY_LIMIT": "512Mi"}, err: true},
		{env: map[string]string{"HOPGATE_MEMORY_LIMIT": "0"}, err: true},
	} {
		got, err := memoryLimit(func(k string) string { return tc.env[k] })
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%v: %d, %v; want %d (error %v)", tc.env, got, err, tc.want, tc.err)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// The demo's fake channels: cheapest first, in two regions.
var demoChannels = []struct{ id, region string }{
	{"cheap-eu", "eu-west-1"},
	{"mid-us", "us-east-1"},
	{"premium-eu", "eu-west-1"},
}

const demoConfig = `# hopgate demo: three in-process fake channels, one public model.
listen: %s
admin_listen: %s
region: eu-west-1
auth: {mode: none}
policy:
  # short timers so the incident plays in seconds, not minutes
  breaker: {mode: count, window: 5m, failures: 3, cooldown: 4s}
  header_timeout: 2s
  stream_gate: {timeout: 5s, on_timeout: commit}
  stream_idle_timeout: 10s
channels:
  - {id: cheap-eu, base_url: "%s", region: eu-west-1}
  - {id: mid-us, base_url: "%s", region: us-east-1}
  - {id: premium-eu, base_url: "%s", region: eu-west-1}
  # the voice incident's speech channels (demo_voice.go)
  - {id: tts-eu, base_url: "%s", region: eu-west-1}
  - {id: eleven-us, provider: elevenlabs, base_url: "%s", api_key_env: DEMO_ELEVENLABS_KEY, region: us-east-1}
  - {id: rt-eu, base_url: "%s", region: eu-west-1}
  - {id: rt-us, base_url: "%s", region: us-east-1}
models:
  - name: gpt-4o-mini
    chain:
      - {channel: premium-eu, upstream_model: gpt-4o-mini, price: {input: 2.50, output: 10.00}}
      - {channel: cheap-eu, upstream_model: gpt-4o-mini, price: {input: 0.15, output: 0.60}}
      - {channel: mid-us, upstream_model: gpt-4o-mini, price: {input: 0.30, output: 1.20}}
  - name: gpt-realtime          # eu-west-1 refuses sessions: the model name picks the fake's fault
    operations: [realtime]
    chain:
      - {channel: rt-eu, upstream_model: "gpt-realtime|rt-refuse", price: {input: 4, output: 16}}
      - {channel: rt-us, upstream_model: gpt-realtime, price: {input: 4, output: 16}}
  - name: tts                   # the voice SLO: a 1 s header_timeout
    operations: [audio_speech]
    policy: {header_timeout: 1s}
    chain:
      - {channel: tts-eu, upstream_model: gpt-4o-mini-tts, price: {input: 0.60, output: 12.00}}
      - {channel: eleven-us, upstream_model: eleven_flash_v2_5, price: {input: 1.00, output: 15.00}, voices: {alloy: 21m00Tcm4TlvDq8ikWAM}}
telemetry: {healthy_sample_ratio: 1.0}
`

// demoStep is one scripted request and what it must show.
type demoStep struct {
	title  string
	before func(ups map[string]*upstream.Server) error
	stream bool
	want   string // the exact failover path
	// wait before the step (real time: the demo runs on the real clock)
	wait time.Duration
	// do sends the step's request (default: a chat completion); kind
	// names it in the output, status is its success (default 200)
	do     func(ctx context.Context, base, admin string) (demoReply, error)
	kind   string
	status int
}

func demoScript() []demoStep {
	set := func(ch, fault string) func(map[string]*upstream.Server) error {
		return func(u map[string]*upstream.Server) error { return u[ch].SetFault("gpt-4o-mini", fault) }
	}
	return []demoStep{
		{title: "healthy: non-streaming answer from the cheapest channel", want: "cheap-eu:ok"},
		{title: "healthy: streamed answer from the cheapest channel", stream: true, want: "cheap-eu:ok"},
		{title: "incident: cheap-eu starts returning 503 — failover to mid-us", before: set("cheap-eu", "503"), want: "cheap-eu:503 -> mid-us:ok"},
		{title: "cheap-eu fails again (2/3)", stream: true, want: "cheap-eu:503 -> mid-us:ok"},
		{title: "cheap-eu fails a third time: its breaker opens", want: "cheap-eu:503 -> mid-us:ok"},
		{title: "L1: cheap-eu is skipped before anything is sent", stream: true, want: "cheap-eu:open -> mid-us:ok"},
		{title: "mid-us answers 200 then puts an error in the stream: the gate discards it", before: set("mid-us", "stream-error"), stream: true,
			want: "cheap-eu:open -> mid-us:stream_error -> premium-eu:ok"},
		{title: "mid-us never sends headers: the 2 s header timeout fires", before: set("mid-us", "no-headers"), stream: true,
			want: "cheap-eu:open -> mid-us:header_timeout -> premium-eu:ok"},
		{title: "recovery: faults cleared; after the 4 s cooldown one trial closes cheap-eu's breaker",
			before: func(u map[string]*upstream.Server) error {
				if err := u["cheap-eu"].SetFault("gpt-4o-mini", ""); err != nil {
					return err
				}
				return u["mid-us"].SetFault("gpt-4o-mini", "")
			}, wait: 4500 * time.Millisecond, want: "cheap-eu:ok"},
		{title: "back to normal: streamed from the cheapest channel", stream: true, want: "cheap-eu:ok"},
	}
}

// demoSteps is the chat story, then the voice incident (demo_voice.go).
func demoSteps() []demoStep { return append(demoScript(), demoVoiceSteps()...) }

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", envOr("DEMO_LISTEN", "127.0.0.1:8080"), "gateway listener")
	adminListen := fs.String("admin-listen", envOr("DEMO_ADMIN_LISTEN", "127.0.0.1:9090"), "admin listener")
	jaegerBin := fs.String("jaeger", "", "path to a Jaeger v2 binary (make demo builds and passes it); empty: no trace backend, /admin/failovers only")
	jaegerCfg := fs.String("jaeger-config", "deploy/jaeger/config.yaml", "Jaeger config file")
	oneshot := fs.Bool("oneshot", os.Getenv("DEMO_ONESHOT") == "1", "play the incident, verify it, exit (DEMO_ONESHOT=1)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }

	// Trace backend: a real Jaeger when given, else the embedded failover log.
	getenv := func(string) string { return "" }
	jaegerUI := ""
	if *jaegerBin != "" {
		j, err := startJaeger(ctx, *jaegerBin, *jaegerCfg, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "demo: jaeger:", err)
			return 1
		}
		defer j.stop()
		jaegerUI = j.ui
		otlp := j.otlpHTTP
		getenv = func(k string) string {
			switch k {
			case "OTEL_EXPORTER_OTLP_ENDPOINT":
				return otlp
			case "OTEL_SERVICE_NAME":
				return "hopgate-demo"
			}
			return ""
		}
		say("Jaeger v2 running: HTTP API %s (a module build has no web UI; deploy/compose runs the image with it)", jaegerUI)
	}

	// Fake channels on loopback.
	ups := map[string]*upstream.Server{}
	urls := map[string]string{}
	for _, ch := range append(demoChannels, demoVoiceChannels...) {
		u := upstream.New(upstream.Options{Name: ch.id, FrameDelay: 15 * time.Millisecond})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		srv := &http.Server{Handler: u, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { u.Close(); _ = srv.Close() }()
		ups[ch.id] = u
		urls[ch.id] = "http://" + ln.Addr().String() + "/v1"
	}
	cfgText := fmt.Sprintf(demoConfig, *listen, *adminListen, urls["cheap-eu"], urls["mid-us"], urls["premium-eu"],
		urls["tts-eu"], strings.TrimSuffix(urls["eleven-us"], "/v1"), urls["rt-eu"], urls["rt-us"])
	cfg, err := config.Parse([]byte(cfgText), func(k string) (string, bool) {
		return "demo-key", k == "DEMO_ELEVENLABS_KEY" // the fake ElevenLabs takes any key
	})
	if err != nil {
		fmt.Fprintln(stderr, "demo: config:", err)
		return 1
	}
	// The demo's ring keeps healthy traces too, so every step below has a
	// trace view (production rings keep failovers, errors and timeouts).
	tel, err := telemetry.Setup(ctx, telemetry.Options{ServiceVersion: version, Region: cfg.Region, HealthyRatio: 1, Getenv: getenv,
		TraceRing: telemetry.TraceRingOptions{KeepHealthy: true}})
	if err != nil {
		fmt.Fprintln(stderr, "demo: telemetry:", err)
		return 1
	}
	logFile := filepath.Join(os.TempDir(), "hopgate-demo.log")
	lf, err := os.Create(logFile)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer lf.Close()
	g, err := gateway.Start(ctx, cfg, gateway.Options{Version: version, Telemetry: tel, Logger: telemetry.NewLogger(lf, slog.LevelInfo), DrainTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer func() {
		_ = g.Shutdown(context.Background())
		_ = tel.Shutdown(context.Background())
	}()
	base, adminBase := "http://"+g.Addr(), "http://"+g.AdminAddr()
	say("hopgate listening on %s (admin %s); request log: %s", base, "http://"+g.AdminAddr(), logFile)
	say("chain of gpt-4o-mini, cheapest first: cheap-eu (eu-west-1) → mid-us (us-east-1) → premium-eu (eu-west-1)")
	say("")

	failed := 0
	var traceIDs []string
	for i, st := range demoSteps() {
		if st.wait > 0 {
			select {
			case <-time.After(st.wait):
			case <-ctx.Done():
				return 130
			}
		}
		if st.before != nil {
			if err := st.before(ups); err != nil {
				fmt.Fprintln(stderr, "demo:", err)
				return 1
			}
		}
		do := func(ctx context.Context, base, _ string) (demoReply, error) { return demoRequest(ctx, base, st.stream) }
		if st.do != nil {
			do = st.do
		}
		r, err := do(ctx, base, adminBase)
		if err != nil {
			fmt.Fprintln(stderr, "demo: request:", err)
			return 1
		}
		want := http.StatusOK
		if st.status != 0 {
			want = st.status
		}
		ok := r.path == st.want && r.status == want && r.complete
		mark := "ok "
		if !ok {
			mark = "BAD"
			failed++
		}
		kind := "non-stream"
		if st.stream {
			kind = "stream"
		}
		if st.kind != "" {
			kind = st.kind
		}
		say("%2d. [%s] %s", i+1, mark, st.title)
		say("      %s %d  path: %s", kind, r.status, r.path)
		if !ok {
			say("      expected path: %s (complete answer: %v)", st.want, r.complete)
		}
		say("      answer: %q", truncate(r.text, 60))
		// The trace view first: it needs nothing but the gateway.
		say("      trace:  %s/admin/traces/%s", adminBase, r.traceID)
		if jaegerUI != "" {
			say("      jaeger: %s/api/traces/%s", jaegerUI, r.traceID)
		}
		traceIDs = append(traceIDs, r.traceID)
	}
	say("")
	say("on-call views:")
	say("  on-call page:     %s/admin   (breaker tiles, error rates, recent failovers with their traces, chains)", adminBase)
	say("  kept traces:      %s/admin/traces", adminBase)
	say("  status page:      %s/status   (public: success rate per model and window)", base)
	say("  failover log:     %s/admin/failovers", adminBase)
	say("  metrics:          %s/metrics", adminBase)
	say("  Grafana board:    dashboards/generated/failover.json (import it; see docs/dashboards.md)")
	if jaegerUI != "" {
		say("  Jaeger traces:    %s/api/traces?service=hopgate-demo&limit=20", jaegerUI)
	}

	if *oneshot {
		if missing := verifyTraceViews(ctx, adminBase, traceIDs); missing > 0 {
			say("%d trace view(s) did not load from %s/admin/traces/", missing, adminBase)
			failed += missing
		} else {
			say("every /admin/traces link above loads")
		}
		if jaegerUI != "" {
			_ = tel.TracerProvider.ForceFlush(ctx)
			missing := verifyTraces(ctx, jaegerUI, traceIDs)
			if missing > 0 {
				say("%d trace(s) did not resolve in Jaeger", missing)
				failed += missing
			} else {
				say("every trace URL above resolves in Jaeger")
			}
		}
		if failed > 0 {
			say("demo: %d step(s) did not behave as scripted", failed)
			return 1
		}
		say("demo: every step behaved as scripted")
		return 0
	}
	say("")
	say("the gateway keeps running for you to explore; Ctrl-C to stop")
	select {
	case <-ctx.Done():
	case err := <-g.Errors():
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	return 0
}

type demoReply struct {
	status   int
	path     string
	traceID  string
	text     string
	complete bool
}

// demoRequest sends one chat completion the way a client would.
func demoRequest(ctx context.Context, base string, stream bool) (demoReply, error) {
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%v,"messages":[{"role":"user","content":"Say something reassuring about failover."}]}`, stream)
	resp, r, err := demoPost(ctx, base+"/v1/chat/completions", body)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return r, err
		}
		r.text = jsonField(string(b), `"content":"`)
		r.complete = strings.Contains(string(b), `"finish_reason":"stop"`)
		return r, nil
	}
	sc := bufio.NewScanner(resp.Body)
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			r.complete = true
		}
		text.WriteString(jsonField(line, `"content":"`))
	}
	r.text = text.String()
	return r, sc.Err()
}

// demoPost posts a JSON body as a client would; the reply holds what
// hopgate's headers say (status, path, trace id).
func demoPost(ctx context.Context, url, body string) (*http.Response, demoReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, demoReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, demoReply{}, err
	}
	return resp, demoReply{status: resp.StatusCode, path: resp.Header.Get("X-Hopgate-Path"), traceID: resp.Header.Get("X-Request-Id")}, nil
}

func jsonField(s, key string) string {
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	rest := s[i+len(key):]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// jaegerProc is a Jaeger v2 child process on loopback.
type jaegerProc struct {
	cmd      *exec.Cmd
	ui       string
	otlpHTTP string
}

func startJaeger(ctx context.Context, bin, cfgPath string, stderr io.Writer) (*jaegerProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("binary %s: %w (run `make jaeger`)", bin, err)
	}
	if _, err := os.Stat(cfgPath); err != nil {
		return nil, fmt.Errorf("config %s: %w (run from the repository root)", cfgPath, err)
	}
	grpcAddr, httpAddr, queryAddr := envOr("JAEGER_OTLP_GRPC", "127.0.0.1:4317"), envOr("JAEGER_OTLP_HTTP", "127.0.0.1:4318"), envOr("JAEGER_QUERY_HTTP", "127.0.0.1:16686")
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Env = append(os.Environ(), "JAEGER_OTLP_GRPC="+grpcAddr, "JAEGER_OTLP_HTTP="+httpAddr, "JAEGER_QUERY_HTTP="+queryAddr)
	logPath := filepath.Join(os.TempDir(), "hopgate-demo-jaeger.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	j := &jaegerProc{cmd: cmd, ui: "http://" + queryAddr, otlpHTTP: "http://" + httpAddr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(j.ui + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return j, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			j.stop()
			return nil, fmt.Errorf("jaeger did not become ready on %s (log: %s)", j.ui, logPath)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (j *jaegerProc) stop() {
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = j.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = j.cmd.Process.Kill()
		<-done
	}
}

// verifyTraceViews loads every step's trace view from the admin listener;
// it returns how many did not answer 200 with their trace.
func verifyTraceViews(ctx context.Context, admin string, ids []string) int {
	missing := 0
	for _, id := range ids {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/admin/traces/"+id, nil)
		if err != nil {
			return len(ids)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			missing++
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), id) {
			missing++
		}
	}
	return missing
}

// verifyTraces fetches every trace from Jaeger's HTTP API; it returns how
// many could not be found within a bounded wait (export is asynchronous).
func verifyTraces(ctx context.Context, ui string, ids []string) int {
	missing := 0
	for _, id := range ids {
		found := false
		for attempt := 0; attempt < 50 && !found; attempt++ {
			resp, err := http.Get(ui + "/api/traces/" + id)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				found = resp.StatusCode == 200 && strings.Contains(string(b), id)
			}
			if !found {
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
					return missing + 1
				}
			}
		}
		if !found {
			missing++
		}
	}
	return missing
}

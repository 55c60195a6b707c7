package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof" // the gateway role serves /debug/pprof on its pprof listener
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"
)

// Environment of a child process. The harness re-executes its own binary
// with envRole set; the other variables say where the world is.
const (
	envRole     = "HOPBENCH_ROLE"
	envUpstream = "HOPBENCH_UPSTREAM" // host:port of the fast upstream (the proxy's: its base URL, https:// for TLS)
	envOTLP     = "HOPBENCH_OTLP"     // base URL of the OTLP sink
	// envTracing selects the gateway's tracing: "" exports every trace,
	// tracingHealthy10 keeps 10 % of healthy traces, tracingOff samples none.
	envTracing = "HOPBENCH_TRACING"
)

// Roles a child process can take.
const (
	roleUpstream = "upstream"
	roleProxy    = "proxy"
	roleGateway  = "gateway"
)

// benchKey is the client credential: hopgate runs with auth.mode keys, as
// deployed, so the per-request key check is part of what is measured. The
// other targets ignore it.
const benchKey = "sk-hopbench-0123456789"

// Models the gateway serves (DESIGN.md §1 chains):
//
//	bench  [up]               the plain path
//	skip   [dead, up]         dead is open (L1): skipped before anything is sent
//	fail1  [flaky, up]        flaky answers 503: one failed hop, then up
//	stall  [stall]            the idle-stream test
//	bench-anthropic [claude]  the translating paths: an Anthropic channel (chat and responses)
//	bench-h1 [up-h1]          the plain path over HTTPS, HTTP/1.1 (tls.go)
//	bench-h2 [up-h2]          the plain path over HTTPS, HTTP/2
const (
	modelBench     = "bench"
	modelSkip      = "skip"
	modelFail1     = "fail1"
	modelStall     = "stall"
	modelAnthropic = "bench-anthropic"
	modelH1        = "bench-h1"
	modelH2        = "bench-h2"
)

// gatewayYAML is the gateway's config. dead opens at its first failure and
// stays open for the whole run; flaky never opens (a rate breaker whose
// threshold is 100 %: the rate must exceed it), so every fail1 request pays
// exactly one failed hop. (A count breaker with a huge failures value would
// also never open, but its ring is allocated at that size.) claude is the
// same fast upstream speaking Anthropic Messages at /v1/messages. The TLS
// channels exist when their upstreams do (h1, h2: host:port, or "").
func gatewayYAML(up, h1, h2, rt string, adminPort int) string {
	sum := sha256.Sum256([]byte(benchKey))
	var tlsChannels, tlsModels strings.Builder
	for _, t := range []struct{ id, addr, model string }{{"up-h1", h1, modelH1}, {"up-h2", h2, modelH2}} {
		if t.addr == "" {
			continue
		}
		fmt.Fprintf(&tlsChannels, "  - {id: %s, base_url: \"https://%s/v1\", api_key_env: BENCH_CHANNEL_KEY, region: bench-1}\n", t.id, t.addr)
		fmt.Fprintf(&tlsModels, "  - name: %s\n    chain:\n      - {channel: %s, upstream_model: bench, price: {input: 1, output: 1}}\n", t.model, t.id)
	}
	if rt != "" { // the realtime row's echo (realtime.go)
		fmt.Fprintf(&tlsChannels, "  - {id: rt, base_url: \"http://%s/v1\", api_key_env: BENCH_CHANNEL_KEY, region: bench-1}\n", rt)
		fmt.Fprintf(&tlsModels, "  - name: %s\n    operations: [realtime]\n    chain:\n      - {channel: rt, upstream_model: gpt-realtime}\n", modelRealtime)
	}
	return fmt.Sprintf(`
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:%[7]d
region: bench-1
auth:
  mode: keys
  keys:
    - {id: bench, sha256: %[1]s}
telemetry: {healthy_sample_ratio: 1}
channels:
  - {id: up, base_url: "http://%[2]s/v1", api_key_env: BENCH_CHANNEL_KEY, region: bench-1}
  - {id: dead, base_url: "http://%[2]s/s503/v1", api_key_env: BENCH_CHANNEL_KEY, region: bench-1,
     breaker: {mode: count, failures: 1, cooldown: 24h}}
  - {id: flaky, base_url: "http://%[2]s/s503/v1", api_key_env: BENCH_CHANNEL_KEY, region: bench-1,
     breaker: {mode: rate, threshold: 1}}
  - {id: stall, base_url: "http://%[2]s/stall/v1", api_key_env: BENCH_CHANNEL_KEY, region: bench-1}
  - {id: claude, provider: anthropic, base_url: "http://%[2]s", api_key_env: BENCH_CHANNEL_KEY, region: bench-1}
%[9]smodels:
  - name: %[3]s
    operations: [chat, responses] # responses: the passthrough-responses row
    chain:
      - {channel: up, upstream_model: bench, price: {input: 1, output: 1}}
  - name: %[4]s
    chain:
      - {channel: dead, upstream_model: bench, price: {input: 0.5, output: 0.5}}
      - {channel: up, upstream_model: bench, price: {input: 1, output: 1}}
  - name: %[5]s
    chain:
      - {channel: flaky, upstream_model: bench, price: {input: 0.5, output: 0.5}}
      - {channel: up, upstream_model: bench, price: {input: 1, output: 1}}
  - name: %[6]s
    chain:
      - {channel: stall, upstream_model: bench, price: {input: 1, output: 1}}
  - name: %[8]s
    max_tokens_default: 256
    operations: [chat, responses]
    chain:
      - {channel: claude, upstream_model: bench, price: {input: 1, output: 1}}
%[10]s`, hex.EncodeToString(sum[:]), up, modelBench, modelSkip, modelFail1, modelStall, adminPort, modelAnthropic,
		tlsChannels.String(), tlsModels.String())
}

// runRole runs this process as a child: it announces its listeners on out
// ("listen NAME ADDR" lines, then "ready") and serves until in reaches EOF
// (the harness closed the pipe or died), then shuts down cleanly.
func runRole(role string, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	announce := func(name, addr string) { fmt.Fprintf(out, "listen %s %s\n", name, addr) }
	var stop func()
	switch role {
	case roleUpstream:
		fast := newFastUpstream()
		s1, a1, err := serveLoopback(fast)
		if err != nil {
			return err
		}
		// The feature-rich fake, for the calibration row.
		fu := upstream.New(upstream.Options{Name: "fakeupstream"})
		s2, a2, err := serveLoopback(fu)
		if err != nil {
			return err
		}
		s3, a3, err := serveLoopback(rtEcho()) // realtime.go
		if err != nil {
			return err
		}
		announce("upstream", a1)
		announce("fakeupstream", a2)
		announce("realtime", a3)
		stop = func() { s1.Close(); s2.Close(); fu.Close(); s3.Close() }
		if certFile := os.Getenv(envTLSCert); certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, os.Getenv(envTLSKey))
			if err != nil {
				return err
			}
			h1, a3, err := serveTLSLoopback(fast.counting(&fast.tls.h1), cert, false, func() { fast.tls.h1.conns.Add(1) })
			if err != nil {
				return err
			}
			h2, a4, err := serveTLSLoopback(fast.counting(&fast.tls.h2), cert, true, func() { fast.tls.h2.conns.Add(1) })
			if err != nil {
				return err
			}
			announce("upstream-h1", a3)
			announce("upstream-h2", a4)
			plain := stop
			stop = func() { plain(); h1.Close(); h2.Close() }
		}
	case roleProxy:
		u, err := upstreamURL(os.Getenv(envUpstream))
		if err != nil {
			return err
		}
		// The baseline: the standard library proxy with hopgate's own
		// upstream transport, so pools and timeouts are not the difference.
		rp := &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = u.Host },
			Transport: dispatch.NewTransport(),
			ErrorLog:  log.New(os.Stderr, "proxy: ", 0),
		}
		s, a, err := serveLoopback(rp)
		if err != nil {
			return err
		}
		ps, pa, err := serveLoopback(http.DefaultServeMux) // -only streams -profile profiles the proxy too
		if err != nil {
			return err
		}
		announce("main", a)
		announce("pprof", pa)
		stop = func() { s.Close(); ps.Close() }
	case roleRTRelay:
		s, a, err := serveLoopback(rtRelayHandler(os.Getenv(envRealtime)))
		if err != nil {
			return err
		}
		ps, pa, err := serveLoopback(http.DefaultServeMux) // /debug/rtstats (only.go)
		if err != nil {
			return err
		}
		announce("main", a)
		announce("pprof", pa)
		stop = func() { s.Close(); ps.Close() }
	case roleGateway:
		g, tel, pprofSrv, err := startGateway(ctx)
		if err != nil {
			return err
		}
		announce("main", g.Addr())
		announce("admin", g.AdminAddr())
		announce("pprof", pprofSrv.Addr)
		stop = func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = g.Shutdown(sctx)
			_ = tel.Shutdown(sctx)
			_ = pprofSrv.Close()
		}
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	fmt.Fprintln(out, "ready")
	_, _ = io.Copy(io.Discard, in)
	stop()
	return nil
}

// Values of envTracing, also the suffixes of the targets' names.
const (
	tracingHealthy10 = "healthy10"
	tracingOff       = "off"
	// tracingBatch128 exports every trace like the measured gateway, in
	// batches of 128 spans from a queue of 8192 (the SDK's defaults are 512
	// and 2048): the parent sets the standard OTEL_BSP_* variables.
	tracingBatch128 = "batch128"
	// tracingGOGC200 exports every trace like the measured gateway, with
	// the garbage collector's GOGC at 200 instead of 100.
	tracingGOGC200 = "gogc200"
	// tracingSDKExport exports every trace like the measured gateway,
	// through the OpenTelemetry SDK's OTLP/HTTP exporter (otlptracehttp)
	// instead of hopgate's otlpwire: what the encoder saves, measured.
	tracingSDKExport = "sdkexport"
)

// gogc200Env is what makes a gateway the tracingGOGC200 variant.
const gogc200Env = "GOGC=200"

// batch128Env is what makes a gateway the tracingBatch128 variant.
var batch128Env = []string{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE=128", "OTEL_BSP_MAX_QUEUE_SIZE=8192"}

// startGateway starts hopgate the way `hopgate serve` does, with its
// telemetry configured by OTEL_* variables pointing at the sink: 100 % of
// traces exported over OTLP/HTTP, metrics recorded and served on admin.
func startGateway(ctx context.Context) (*gateway.Gateway, *telemetry.Telemetry, *http.Server, error) {
	// The config refuses two ":0" listeners; admin gets a reserved port.
	adminPort, err := freePort()
	if err != nil {
		return nil, nil, nil, err
	}
	yml := gatewayYAML(os.Getenv(envUpstream), os.Getenv(envUpstreamH1), os.Getenv(envUpstreamH2), os.Getenv(envRealtime), adminPort) + limitsYAML(os.Getenv(envLimits))
	cfg, err := config.Parse([]byte(yml), func(k string) (string, bool) {
		if k == "BENCH_CHANNEL_KEY" {
			return "sk-channel-bench", true
		}
		if k == envRedisURL {
			return os.Getenv(envRedisURL), true
		}
		return "", false
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("gateway config: %w", err)
	}
	otlp := os.Getenv(envOTLP)
	ratio, sampler := cfg.Telemetry.HealthySampleRatio, ""
	var override sdktrace.SpanExporter
	switch v := os.Getenv(envTracing); v {
	case "":
	case tracingHealthy10:
		ratio = 0.1
	case tracingOff:
		sampler = "always_off"
	case tracingBatch128, tracingGOGC200:
		// Every trace, as the measured gateway; the SDK reads OTEL_BSP_*,
		// the runtime GOGC.
	case tracingSDKExport:
		// The SDK's exporter goes through the same batch processor and
		// tail sampler (Options.SpanExporter replaces only the exporter).
		override, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(otlp+"/v1/traces"))
		if err != nil {
			return nil, nil, nil, err
		}
	default:
		return nil, nil, nil, fmt.Errorf("%s=%q: want %q, %q, %q, %q or %q", envTracing, v, tracingHealthy10, tracingOff, tracingBatch128, tracingGOGC200, tracingSDKExport)
	}
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		ServiceVersion: "hopbench",
		Region:         cfg.Region,
		HealthyRatio:   ratio,
		SpanExporter:   override,
		Getenv: func(k string) string {
			switch k {
			case "OTEL_EXPORTER_OTLP_ENDPOINT":
				return otlp
			case "OTEL_TRACES_SAMPLER":
				return sampler
			}
			return ""
		},
	})
	if err != nil {
		return nil, nil, nil, err
	}
	// Logs are formatted as in production (JSON with trace ids) and written
	// to /dev/null: the formatting and the write syscall are paid, no disk.
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	logger := telemetry.NewLogger(devnull, slog.LevelInfo)
	g, err := gateway.Start(ctx, cfg, gateway.Options{
		Version: "hopbench", Logger: logger, Telemetry: tel, DrainTimeout: 2 * time.Second,
	})
	if err != nil {
		return nil, nil, nil, errors.Join(err, tel.Shutdown(ctx))
	}
	ps, _, err := serveLoopback(http.DefaultServeMux) // net/http/pprof registers there
	if err != nil {
		return nil, nil, nil, err
	}
	return g, tel, ps, nil
}

// serveLoopback serves h on an ephemeral loopback port.
func serveLoopback(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	s := &http.Server{Handler: h, Addr: ln.Addr().String(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: discardLog}
	go func() { _ = s.Serve(ln) }()
	return s, ln.Addr().String(), nil
}

// discardLog silences the servers' own logs (a client that leaves early).
var discardLog = log.New(io.Discard, "", 0)

// upstreamURL is the proxy's upstream: a base URL, or host:port for
// plain HTTP.
func upstreamURL(v string) (*url.URL, error) {
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	return url.Parse(v)
}

// parseListen reads one "listen NAME ADDR" line.
func parseListen(line string) (name, addr string, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "listen" {
		return "", "", false
	}
	return f[1], f[2], true
}

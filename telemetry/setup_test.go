package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// The exporter follows the standard OTEL_* variables, read through the
// injected Getenv, never the process environment.
func TestSpanExporterFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string // why the case exists
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"nothing configured: no exporter, spans still created", nil, exporterNone, false},
		{"endpoint alone: http/protobuf is the spec default",
			map[string]string{envEndpoint: "http://127.0.0.1:4318"}, exporterHTTP, false},
		{"traces endpoint alone counts too",
			map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, exporterHTTP, false},
		{"grpc protocol",
			map[string]string{envEndpoint: "http://127.0.0.1:4317", envProtocol: "grpc"}, exporterGRPC, false},
		{"grpc with a bare host:port",
			map[string]string{envEndpoint: "127.0.0.1:4317", envProtocol: "grpc"}, exporterGRPC, false},
		{"signal protocol overrides the generic one",
			map[string]string{envEndpoint: "http://127.0.0.1:4317", envProtocol: "http/protobuf", envTracesProtocol: "grpc"}, exporterGRPC, false},
		{"explicit otlp without endpoint uses the spec default",
			map[string]string{envTracesExporter: "otlp"}, exporterHTTP, false},
		{"none wins over an endpoint",
			map[string]string{envTracesExporter: "none", envEndpoint: "http://127.0.0.1:4318"}, exporterNone, false},
		{"console", map[string]string{envTracesExporter: "console"}, exporterConsole, false},
		{"sdk disabled", map[string]string{envSDKDisabled: "TRUE", envEndpoint: "http://127.0.0.1:4318"}, exporterDisabled, false},
		{"http/json is not supported: say so",
			map[string]string{envEndpoint: "http://127.0.0.1:4318", envProtocol: "http/json"}, "", true},
		{"unknown exporter is an error, not silence",
			map[string]string{envTracesExporter: "zipkin"}, "", true},
		{"exporter lists are rejected", map[string]string{envTracesExporter: "otlp,console"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, kind, err := spanExporterFromEnv(context.Background(), envOf(tc.env), "hopgate/test", nil)
			if exp != nil {
				defer exp.Shutdown(context.Background())
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if kind != tc.want {
				t.Fatalf("kind = %q, want %q", kind, tc.want)
			}
			if (exp != nil) != (kind == exporterHTTP || kind == exporterGRPC || kind == exporterConsole) {
				t.Fatalf("kind %q with exporter %T", kind, exp)
			}
		})
	}
}

// End to end over http/protobuf: the generic endpoint gets /v1/traces
// appended, the signal endpoint is used as is, and a kept trace arrives.
func TestSetupExportsOverHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, key, suffix, wantPath string
	}{
		{"generic endpoint", envEndpoint, "", "/v1/traces"},
		{"traces endpoint", envTracesEndpoint, "/custom/traces", "/custom/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				mu.Lock()
				paths = append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
				mu.Unlock()
				w.Header().Set("Content-Type", "application/x-protobuf")
			}))
			defer srv.Close()
			tel, err := Setup(context.Background(), Options{
				HealthyRatio: 1,
				Getenv:       envOf(map[string]string{tc.key: srv.URL + tc.suffix}),
			})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tel.Tracer.Start(context.Background(), SpanServer)
			span.End()
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := "POST " + tc.wantPath + " application/x-protobuf"; len(paths) != 1 || paths[0] != want {
				t.Fatalf("collector saw %q, want [%q]", paths, want)
			}
		})
	}
}

// Through Setup, the tail sampler sits in front of the batch processor: a
// healthy trace is dropped at ratio 0 while a failover trace is exported.
func TestSetupTailSamplingWithOverride(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Options{HealthyRatio: 0, SpanExporter: exp, Getenv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	for _, attrs := range [][]attribute.KeyValue{healthyAttrs, failoverAttrs} {
		ctx, root := tel.Tracer.Start(context.Background(), SpanServer)
		_, hop := tel.Tracer.Start(ctx, "chat m")
		hop.End()
		root.SetAttributes(attrs...)
		root.End()
	}
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("exported %d spans, want the 2 of the failover trace", len(spans))
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
			t.Fatal("spans of two traces exported")
		}
	}
	body := scrape(t, tel, "")
	for _, want := range []string{
		`hopgate_trace_decisions_total{decision="kept_interesting",region=""} 1`,
		`hopgate_trace_decisions_total{decision="dropped_healthy",region=""} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s:\n%s", want, grep(body, "hopgate_trace_decisions"))
		}
	}
}

// OTEL_SDK_DISABLED still yields trace ids (X-Request-Id, failover log) but
// records nothing.
func TestSetupSDKDisabled(t *testing.T) {
	tel, err := Setup(context.Background(), Options{Getenv: envOf(map[string]string{envSDKDisabled: "true"})})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, span := tel.Tracer.Start(context.Background(), SpanServer)
	defer span.End()
	if !span.SpanContext().TraceID().IsValid() || span.IsRecording() {
		t.Fatalf("want a valid, non-recording span; got valid=%v recording=%v",
			span.SpanContext().TraceID().IsValid(), span.IsRecording())
	}
}

func TestSamplerFromEnv(t *testing.T) {
	// A head sampler decides before the request happened, so it must not be
	// able to drop a failover trace: ratios move to the tail (healthy only).
	const tail = "ParentBased{root:AlwaysOnSampler,remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOnSampler"
	for _, tc := range []struct {
		name, sampler, arg, want string
		ratio                    float64
		wantErr                  bool
	}{
		{"default: every trace reaches the tail decision, even under an unsampled remote parent", "", "", tail, 1, false},
		{"ratio thins healthy traces at the tail", "traceidratio", "0.25", tail, 0.25, false},
		{"parent based ratio thins healthy traces at the tail", "parentbased_traceidratio", "0.5", tail, 0.5, false},
		{"ratio without arg is 1", "traceidratio", "", tail, 1, false},
		{"always_off is an explicit opt-out", "always_off", "", "AlwaysOffSampler", 0, false},
		{"bad ratio is loud", "traceidratio", "2", "", 0, true},
		{"unknown sampler is loud", "jaeger_remote", "", "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r, err := samplerFromEnv(envOf(map[string]string{envTracesSampler: tc.sampler, envTracesSamplerArg: tc.arg}))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if !strings.HasPrefix(s.Description(), tc.want) || r != tc.ratio {
				t.Fatalf("sampler %s ratio %v, want prefix %s ratio %v", s.Description(), r, tc.want, tc.ratio)
			}
		})
	}
}

// OTEL_SERVICE_NAME beats service.name in OTEL_RESOURCE_ATTRIBUTES (spec),
// values are percent-decoded, and the config's region wins for cloud.region.
func TestResourceAttrs(t *testing.T) {
	kvs, err := resourceAttrs(envOf(map[string]string{
		envResourceAttrs: "service.name=x,deployment.environment=prod%20eu,cloud.region=ignored",
		envServiceName:   "gw",
	}), Options{Region: "eu-west-1", ServiceVersion: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	got := attribute.NewSet(kvs...)
	for k, want := range map[string]string{
		"service.name": "gw", "deployment.environment": "prod eu", "cloud.region": "eu-west-1", "service.version": "1.2.3",
	} {
		if v, _ := got.Value(attribute.Key(k)); v.AsString() != want {
			t.Errorf("%s = %q, want %q", k, v.AsString(), want)
		}
	}
	if _, err := resourceAttrs(envOf(map[string]string{envResourceAttrs: "novalue"}), Options{}); err == nil {
		t.Error("malformed OTEL_RESOURCE_ATTRIBUTES accepted")
	}
}

// Noop works without any setup and shuts down cleanly.
func TestNoop(t *testing.T) {
	tel := Noop()
	ctx, span := tel.Tracer.Start(context.Background(), "x")
	tel.Metrics.Request(ctx, "m", OperationChat, OutcomeOK)
	span.End()
	if !span.SpanContext().IsSampled() || tel.Failovers == nil || tel.Propagator == nil {
		t.Fatal("Noop telemetry incomplete")
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The console exporter prints one JSON line per span.
func TestConsoleExporter(t *testing.T) {
	var b strings.Builder
	exp := newConsoleExporter(&b)
	spans := tracetest.SpanStubs{{Name: "dispatch gpt", Attributes: []attribute.KeyValue{attribute.String(AttrModel, "gpt")}}}
	if err := exp.ExportSpans(context.Background(), spans.Snapshots()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"name":"dispatch gpt"`) || !strings.Contains(b.String(), `"hopgate.model":"gpt"`) {
		t.Fatalf("console output %s", b.String())
	}
}

var _ sdktrace.SpanExporter = (*consoleExporter)(nil)

// Options.Clock reaches the tail sampler: a trace whose root never ends is
// exported once the given clock says it is older than the maximum age, not
// when the wall clock does.
func TestSetupClockAgesHeldTraces(t *testing.T) {
	clock := clockwork.NewFakeClock()
	exp := tracetest.NewInMemoryExporter()
	tel, err := Setup(context.Background(), Options{HealthyRatio: 0, SpanExporter: exp, Getenv: envOf(nil), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	ctx, root := tel.Tracer.Start(context.Background(), SpanServer)
	defer root.End()
	_, child := tel.Tracer.Start(ctx, "chat m")
	child.End()
	flushed := func() int {
		if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		return len(exp.GetSpans())
	}
	if n := flushed(); n != 0 {
		t.Fatalf("%d spans exported while the root is open, want 0 (held for the decision)", n)
	}
	clock.Advance(defaultMaxTraceAge + time.Second)
	if n := flushed(); n != 1 {
		t.Fatalf("%d spans exported after the maximum age on the given clock, want 1", n)
	}
}

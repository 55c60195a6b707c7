package telemetry

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// serverPair is the same handler behind ServerHandler and behind otelhttp's
// handler, configured as hopgate configured otelhttp before ServerHandler
// replaced it, each recording its spans.
type serverPair struct {
	ours, theirs   http.Handler
	oursR, theirsR *tracetest.SpanRecorder
}

func newServerPair(t testing.TB, h http.HandlerFunc, public bool) *serverPair {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p := &serverPair{oursR: tracetest.NewSpanRecorder(), theirsR: tracetest.NewSpanRecorder()}
	ours := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.oursR))
	theirs := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.theirsR))
	t.Cleanup(func() { _ = ours.Shutdown(context.Background()); _ = theirs.Shutdown(context.Background()) })
	tel := &Telemetry{Tracer: ours.Tracer(ScopeName), Propagator: prop}
	p.ours = tel.ServerHandler(h, func() bool { return public })
	p.theirs = otelhttp.NewHandler(h, "POST /v1/chat/completions",
		otelhttp.WithTracerProvider(theirs),
		otelhttp.WithMeterProvider(noop.NewMeterProvider()),
		otelhttp.WithPropagators(prop),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return public }))
	return p
}

// spanView is what a SERVER span shows a trace backend, minus the
// instrumentation scope (hopgate's now, otelhttp's before).
type spanView struct {
	Name   string
	Kind   trace.SpanKind
	Parent trace.SpanContext
	Links  []trace.SpanContext
	Status sdktrace.Status
	Attrs  []string
	Events int
}

func viewOf(t *testing.T, r *tracetest.SpanRecorder) spanView {
	t.Helper()
	ended := r.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	s := ended[0]
	v := spanView{Name: s.Name(), Kind: s.SpanKind(), Parent: s.Parent(), Status: s.Status(), Events: len(s.Events())}
	for _, l := range s.Links() {
		v.Links = append(v.Links, l.SpanContext)
	}
	for _, kv := range s.Attributes() {
		v.Attrs = append(v.Attrs, string(kv.Key)+"="+kv.Value.Emit())
	}
	slices.Sort(v.Attrs)
	return v
}

func sameSpan(t *testing.T, p *serverPair, ours, theirs spanView) {
	t.Helper()
	if ours.Name != theirs.Name || ours.Kind != theirs.Kind || !ours.Parent.Equal(theirs.Parent) ||
		ours.Status != theirs.Status || ours.Events != theirs.Events ||
		!slices.EqualFunc(ours.Links, theirs.Links, trace.SpanContext.Equal) || !slices.Equal(ours.Attrs, theirs.Attrs) {
		t.Errorf("SERVER spans differ\n ours:   %+v\n otelhttp: %+v", ours, theirs)
	}
}

// TestServerSpanMatchesOtelhttp holds ServerHandler's SERVER span to the
// one otelhttp's handler (the version in go.mod) makes of the same
// request: name, kind, parent, links, status and every attribute, over
// loopback (a real connection, the mux's route pattern) and for requests
// made by hand (TLS, IPv6 peers, HTTP/2, odd methods and ports).
func TestServerSpanMatchesOtelhttp(t *testing.T) {
	const remote = "00f067aa0ba902b7"
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + remote + "-01"
	handlers := map[string]http.HandlerFunc{
		"ok": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		},
		"bad gateway": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("no"))
		},
		"internal error": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
		},
		// A flush before any header commits a 200; the later code is not sent.
		"flush first": func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush()
			w.WriteHeader(http.StatusServiceUnavailable)
		},
		"silent": func(http.ResponseWriter, *http.Request) {},
		"early hints": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusTooManyRequests)
		},
		"flushed stream": func(w http.ResponseWriter, r *http.Request) {
			if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("read deadline through the wrapper: %v", err)
			}
			_, _ = io.Copy(io.Discard, r.Body)
			for range 3 {
				_, _ = w.Write([]byte("data: {}\n\n"))
				w.(http.Flusher).Flush()
			}
		},
		"invalid status": func(w http.ResponseWriter, r *http.Request) {
			defer func() { _ = recover() }() // net/http panics on it
			w.WriteHeader(999)
		},
	}
	type request struct {
		method, path, body string
		header             http.Header
	}
	requests := []request{
		{method: http.MethodPost, path: "/v1/chat/completions", body: `{"model":"m"}`,
			header: http.Header{"User-Agent": {"OpenAI/Go 1.12.0"}, "Content-Type": {"application/json"}}},
		{method: http.MethodPost, path: "/v1/chat/completions", body: `{}`,
			header: http.Header{"X-Forwarded-For": {"203.0.113.7, 10.0.0.1"}, "Traceparent": {traceparent}}},
		{method: http.MethodGet, path: "/v1/models"},
		{method: "post", path: "/v1/chat/completions", body: "x"},
		{method: "PURGE", path: "/cache"},
	}
	for hname, h := range handlers {
		for _, public := range []bool{false, true} {
			p := newServerPair(t, h, public)
			mux := http.NewServeMux()
			mux.Handle("/v1/chat/completions", routeTo(p))
			mux.Handle("/", routeTo(p))
			srv := httptest.NewServer(mux)
			for _, rq := range requests {
				p.oursR.Reset()
				p.theirsR.Reset()
				for _, which := range []string{"ours", "theirs"} {
					req, err := http.NewRequest(rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
					if err != nil {
						t.Fatal(err)
					}
					copyHeader(req.Header, rq.header)
					req.Header.Set("X-Which", which)
					resp, err := srv.Client().Do(req)
					if err != nil {
						t.Fatalf("%s %s %s: %v", hname, rq.method, rq.path, err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				t.Run(hname+"/"+rq.method+rq.path, func(t *testing.T) {
					ours, theirs := viewOf(t, p.oursR), viewOf(t, p.theirsR)
					// The two requests came from different client ports.
					ours.Attrs = dropKey(ours.Attrs, "network.peer.port")
					theirs.Attrs = dropKey(theirs.Attrs, "network.peer.port")
					sameSpan(t, p, ours, theirs)
					if rq.header.Get("Traceparent") != "" {
						linked := len(ours.Links) == 1 && ours.Links[0].SpanID().String() == remote
						parented := ours.Parent.SpanID().String() == remote
						if linked != public || parented == public {
							t.Errorf("public %v: linked %v, parented %v", public, linked, parented)
						}
					}
				})
			}
			srv.Close()
		}
	}

	// Requests no loopback client sends: TLS, IPv6 peers and hosts, HTTP/2,
	// explicit default ports, a proto without a version.
	crafted := []func(*http.Request){
		func(r *http.Request) {
			r.TLS = &tls.ConnectionState{}
			r.Host = "api.example.com:443"
			r.RemoteAddr = "[2001:db8::1]:4431"
		},
		func(r *http.Request) { r.TLS = &tls.ConnectionState{}; r.Host = "api.example.com:8443" },
		func(r *http.Request) { r.Host = "api.example.com:80"; r.RemoteAddr = "[::1]" },
		func(r *http.Request) { r.Host = "[2001:db8::2]:8080"; r.Proto = "HTTP/2.0" },
		func(r *http.Request) { r.Host = "[2001:db8::2]"; r.Proto = "SPDY/3" },
		func(r *http.Request) { r.Host = "bad:port:x"; r.RemoteAddr = "pipe"; r.Proto = "QUIC" },
		func(r *http.Request) { r.Method = ""; r.Pattern = "" },
		func(r *http.Request) { r.Method = "get"; r.Header.Set("X-Forwarded-For", ",") },
	}
	for i, mod := range crafted {
		p := newServerPair(t, handlers["ok"], false)
		for _, h := range []http.Handler{p.ours, p.theirs} {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
			r.Pattern = "POST /v1/chat/completions"
			mod(r)
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		ours, theirs := viewOf(t, p.oursR), viewOf(t, p.theirsR)
		if len(ours.Attrs) < 3 {
			t.Errorf("crafted %d: only %v", i, ours.Attrs)
		}
		sameSpan(t, p, ours, theirs)
	}
}

// TestServerSpanEndsOnAbort: a handler that aborts the response (as a cut
// binary body does) still ends its SERVER span, and the request body is
// handed back to net/http as it came.
func TestServerSpanEndsOnAbort(t *testing.T) {
	var seen io.ReadCloser
	p := newServerPair(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("part"))
		panic(http.ErrAbortHandler)
	}, false)
	r := httptest.NewRequest(http.MethodPost, "/v1/audio/speech", strings.NewReader("{}"))
	seen = r.Body
	func() {
		defer func() {
			if v := recover(); !errors.Is(v.(error), http.ErrAbortHandler) {
				t.Errorf("recovered %v", v)
			}
		}()
		p.ours.ServeHTTP(httptest.NewRecorder(), r)
	}()
	if r.Body != seen {
		t.Errorf("request body not restored: %T", r.Body)
	}
	v := viewOf(t, p.oursR)
	if slices.ContainsFunc(v.Attrs, func(a string) bool { return strings.HasPrefix(a, "http.response.status_code") }) {
		t.Errorf("an aborted handler's span has a status code: %v", v.Attrs)
	}
}

// TestServerSpanNotRecording: with tracing off the handler still passes
// the request through, with a writer that commits, flushes and unwraps.
func TestServerSpanNotRecording(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	tel := &Telemetry{Tracer: tp.Tracer(ScopeName), Propagator: propagation.TraceContext{}}
	h := tel.ServerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if trace.SpanFromContext(r.Context()).IsRecording() {
			t.Error("recording")
		}
		if _, ok := w.(interface{ Unwrap() http.ResponseWriter }); !ok {
			t.Error("no Unwrap")
		}
		_, _ = w.Write([]byte("hi"))
		w.(http.Flusher).Flush()
	}), nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "hi" || !rec.Flushed {
		t.Errorf("got %d %q flushed %v", rec.Code, rec.Body.String(), rec.Flushed)
	}
}

// routeTo sends a request to the handler its X-Which header names.
func routeTo(p *serverPair) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Which") == "ours" {
			p.ours.ServeHTTP(w, r)
			return
		}
		p.theirs.ServeHTTP(w, r)
	})
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

func dropKey(attrs []string, key string) []string {
	return slices.DeleteFunc(slices.Clone(attrs), func(a string) bool { return strings.HasPrefix(a, key+"=") })
}

// BenchmarkServerSpan is one request through the SERVER span's handler,
// the span kept (sampled) or not (tracing off): ServerHandler against
// otelhttp's handler as hopgate configured it (no-op meter, public
// endpoint function). The handler reads the body and writes 1 KB.
func BenchmarkServerSpan(b *testing.B) {
	body := strings.Repeat("x", 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(body))
	})
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	for _, sampled := range []bool{true, false} {
		sampler := sdktrace.NeverSample()
		mode := "off"
		if sampled {
			sampler, mode = sdktrace.AlwaysSample(), "sampled"
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
		tel := &Telemetry{Tracer: tp.Tracer(ScopeName), Propagator: prop}
		public := func() bool { return true }
		for _, c := range []struct {
			name string
			h    http.Handler
		}{
			{"hopgate", tel.ServerHandler(h, public)},
			{"otelhttp", otelhttp.NewHandler(h, "POST /v1/chat/completions", otelhttp.WithTracerProvider(tp),
				otelhttp.WithMeterProvider(noop.NewMeterProvider()), otelhttp.WithPropagators(prop),
				otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return public() }))},
		} {
			b.Run(mode+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
				r.Pattern = "POST /v1/chat/completions"
				r.Header.Set("User-Agent", "OpenAI/Go 1.12.0")
				w := &discardWriter{h: http.Header{}}
				rd := strings.NewReader("{}")
				for b.Loop() {
					rd.Reset(`{"model":"m"}`)
					r.Body = io.NopCloser(rd)
					c.h.ServeHTTP(w, r)
				}
			})
		}
		_ = tp.Shutdown(context.Background())
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

package dispatch_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// quiet is the benchmarks' gateway logger: a request log line written to
// memory would be measured too.
var quiet = slog.New(slog.DiscardHandler)

// ttfb posts body to url and returns the time to the first response byte
// and to the first content frame, then drains the stream.
func ttfb(b testing.TB, client *http.Client, url, body string) (firstByte, firstContent time.Duration) {
	b.Helper()
	start := time.Now()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+channelKey)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	rd := sse.NewReader(&firstRead{r: resp.Body, at: &firstByte, start: start}, 0)
	for {
		f, err := rd.Next()
		if err != nil {
			b.Fatalf("no content frame: %v", err)
		}
		if bytes.Contains(f.Data, []byte(`"content":"tok`)) {
			firstContent = time.Since(start)
			break
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return firstByte, firstContent
}

// firstRead records when the first byte was read.
type firstRead struct {
	r     io.Reader
	at    *time.Duration
	start time.Time
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && *f.at == 0 {
		*f.at = time.Since(f.start)
	}
	return n, err
}

// BenchmarkGateTTFB compares time to first byte and to first content frame
// of the same provider read directly and through the gateway, whose gate
// holds the role-only opener until the first content frame (decisive). The
// gate may add at most one frame of delay to the first byte and nothing but
// proxying to the first content frame. frame-delay is the provider's pause
// between frames (real clock).
func BenchmarkGateTTFB(b *testing.B) {
	for _, delay := range []string{"", "2ms", "10ms"} {
		model := "m|tokens=2"
		if delay != "" {
			model += "|frame-delay=" + delay
		}
		h := gwtest.NewWith(b, gwtest.Options{UpstreamClock: clockwork.NewRealClock(), Logger: quiet},
			twoChannels(model, "m", ""), "a", "b")
		direct := h.Config.Channel("a").BaseURL + "/chat/completions"
		directBody := `{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		paths := []struct{ name, url, body string }{
			{"direct", direct, directBody},
			{"gateway", h.URL + "/v1/chat/completions", chat(true)},
		}
		if delay == "" {
			// Only here: with pauses between frames the bare proxy's
			// request-body race fails streams (docs/performance.md).
			paths = append(paths[:1], append([]struct{ name, url, body string }{
				{"proxy", bareProxy(b, h.Config.Channel("a").BaseURL), directBody}}, paths[1:]...)...)
		}
		for _, path := range paths {
			b.Run("frame-delay="+delay+"/"+path.name, func(b *testing.B) {
				var fb, fc time.Duration
				for i := 0; i < b.N; i++ {
					x, y := ttfb(b, h.Client, path.url, path.body)
					fb += x
					fc += y
				}
				b.ReportMetric(float64(fb.Microseconds())/float64(b.N), "µs-first-byte")
				b.ReportMetric(float64(fc.Microseconds())/float64(b.N), "µs-first-content")
			})
		}
	}
}

// idleStreams is an upstream that sends a role chunk and one content frame,
// then holds every stream open until release is closed.
type idleStreams struct{ release chan struct{} }

func (u *idleStreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"))
	_, _ = w.Write(chunkFrame("tok1 ", false))
	_ = http.NewResponseController(w).Flush()
	select {
	case <-u.release:
	case <-r.Context().Done():
		return
	}
	_, _ = w.Write(chunkFrame("", true))
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

// BenchmarkIdleStreamMemory holds 1,000 committed, idle streams open at once
// and reports heap and goroutines per stream, read directly from the
// provider, through a bare reverse proxy and through the gateway; the
// differences are what each costs per open stream (the whole test process
// is measured: client, gateway and provider sides of every connection).
// The proxy's heap includes the 32 KiB copy buffer ReverseProxy allocates
// per request, which RSS mostly does not see (its pages stay untouched).
func BenchmarkIdleStreamMemory(b *testing.B) {
	const n = 1000
	for _, via := range []string{"direct", "proxy", "gateway"} {
		b.Run(via, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				up := &idleStreams{release: make(chan struct{})}
				h := gwtest.NewWith(b, gwtest.Options{Custom: map[string]http.Handler{"a": up}, Logger: quiet}, twoChannels("m", "m", ""), "b")
				url := h.URL + "/v1/chat/completions"
				switch via {
				case "direct":
					url = h.Config.Channel("a").BaseURL + "/chat/completions"
				case "proxy":
					url = bareProxy(b, h.Config.Channel("a").BaseURL)
				}
				before, stack0 := heapNow()
				g0 := runtime.NumGoroutine()
				resps := openIdle(b, h.Client, url, chat(true), n)
				after, stack1 := heapNow()
				g1 := runtime.NumGoroutine()
				b.ReportMetric(float64(after-before)/n, "heap-B/stream")
				b.ReportMetric(float64(stack1-stack0)/n, "stack-B/stream")
				b.ReportMetric(float64(g1-g0)/n, "goroutines/stream")
				close(up.release)
				closeAll(resps)
			}
		})
	}
}

// processCPU is the user plus system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapNow is the heap and goroutine stack memory in use after two GCs (the
// second one shrinks stacks the first found oversized).
func heapNow() (heap, stack uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.StackInuse
}

// BenchmarkStreamAllocs is the allocation cost of one complete 8-token
// stream, direct and through the gateway (gate, classification, telemetry).
func BenchmarkStreamAllocs(b *testing.B) {
	h := gwtest.NewWith(b, gwtest.Options{Logger: quiet}, twoChannels("m", "m", ""), "a", "b")
	for _, path := range []struct{ name, url, body string }{
		{"direct", h.Config.Channel("a").BaseURL + "/chat/completions", chat(true)},
		{"gateway", h.URL + "/v1/chat/completions", chat(true)},
	} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, path.url, strings.NewReader(path.body))
				req.Header.Set("Authorization", "Bearer "+channelKey)
				resp, err := h.Client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkStreamThroughput is streams per second at 8 concurrent clients,
// each a complete 50-token stream, direct and through the gateway: the
// per-frame cost of the after-commit path (read, classify, write, flush)
// dominates it, as in hopbench's stream-50-frames workload.
func BenchmarkStreamThroughput(b *testing.B) {
	h := gwtest.NewWith(b, gwtest.Options{Logger: quiet}, twoChannels("m|tokens=50", "m|tokens=50", ""), "a", "b")
	direct := `{"model":"m|tokens=50","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []struct{ name, url, body string }{
		{"direct", h.Config.Channel("b").BaseURL + "/chat/completions", direct},
		{"gateway", h.URL + "/v1/chat/completions", chat(true)},
	} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU() // the whole process: client, gateway and provider
			defer func() { b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
			b.SetParallelism(4) // 8 clients on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, path.url, strings.NewReader(path.body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+channelKey)
					resp, err := h.Client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n < 50*50 {
						b.Errorf("status %d, %d bytes", resp.StatusCode, n)
						return
					}
				}
			})
		})
	}
}

// completion1KB is a realistic non-streaming answer: OpenAI's shape, usage
// included, about 1 KB (hopbench's completion-1KB workload).
var completion1KB = fmt.Appendf(nil, `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,`+
	`"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":%q},`+
	`"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":200,"total_tokens":224}}`,
	strings.Repeat("lorem ipsum dolor sit amet ", 30)[:800])

// fastCompletion answers every request with completion1KB at once, so the
// upstream costs as little as possible next to what is measured.
type fastCompletion struct{}

func (fastCompletion) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(completion1KB)))
	_, _ = w.Write(completion1KB)
}

// otlpSink accepts OTLP/HTTP trace exports and discards them.
type otlpSink struct{ exports atomic.Int64 }

func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.exports.Add(1)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// bareProxy is a bare httputil.ReverseProxy (hopgate's upstream transport)
// in front of base+"/chat/completions": the floor hopgate is compared with.
func bareProxy(b testing.TB, base string) string {
	upURL, _ := url.Parse(base)
	tr := dispatch.NewTransport()
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(upURL); r.Out.URL.Path = upURL.Path + "/chat/completions" },
		Transport: tr,
	})
	b.Cleanup(func() { proxy.Close(); tr.CloseIdleConnections() })
	return proxy.URL
}

// BenchmarkCompletionThroughput is 1 KB completions at 32 concurrent
// clients: direct, through a bare httputil.ReverseProxy (hopgate's upstream
// transport) and through the gateway on the real clock with 100 % of traces
// exported over OTLP/HTTP, as in hopbench's completion-1KB workload. The
// gateway / proxy ratio of ns/op is the issue 8 throughput target, and a
// CPU profile of the gateway case shows where the request path spends.
func BenchmarkCompletionThroughput(b *testing.B) { benchCompletion(b, 16) }

// BenchmarkCompletionLatency is the same with one client sending requests
// one after the other: ns/op is the round trip, and the gateway minus
// direct is the latency the gateway adds to an idle request (steadier than
// the 32-client run on a shared machine).
func BenchmarkCompletionLatency(b *testing.B) { benchCompletion(b, 0) }

// benchCompletion runs the completion benchmarks with parallelism×GOMAXPROCS
// clients, or one sequential client when parallelism is 0.
func benchCompletion(b *testing.B, parallelism int) {
	sink := &otlpSink{}
	sinkSrv := httptest.NewServer(sink)
	b.Cleanup(sinkSrv.Close)
	gw := func(plain bool, extra string) *gwtest.Gateway {
		return gwtest.NewWith(b, gwtest.Options{
			Custom:     map[string]http.Handler{"a": fastCompletion{}, "b": fastCompletion{}},
			Clock:      clockwork.NewRealClock(),
			OTELEnv:    map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sinkSrv.URL},
			Logger:     quiet,
			PlainSpans: plain,
		}, twoChannels("m", "m", extra))
	}
	h := gw(false, "")
	// The same gateway keeping 10 % of healthy traces, and both with every
	// span an SDK span from its start (how hopgate recorded spans before
	// compact records): same-process ratios of what tracing costs.
	healthy10 := "telemetry: {healthy_sample_ratio: 0.1}\n"
	h10, plain, plain10 := gw(false, healthy10), gw(true, ""), gw(true, healthy10)
	proxyURL := bareProxy(b, h.Config.Channel("b").BaseURL)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	body := chat(false)
	for _, path := range []struct{ name, url string }{
		{"direct", h.Config.Channel("b").BaseURL + "/chat/completions"},
		{"proxy", proxyURL},
		{"gateway", h.URL + "/v1/chat/completions"},
		{"gateway-healthy10", h10.URL + "/v1/chat/completions"},
		{"gateway-sdkspans", plain.URL + "/v1/chat/completions"},
		{"gateway-sdkspans-healthy10", plain10.URL + "/v1/chat/completions"},
	} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			// CPU time per request of the whole process (client, proxy or
			// gateway, upstream): on a shared machine it is steadier than
			// wall time, and the gateway-minus-proxy difference is what
			// each adds.
			cpu0 := processCPU()
			defer func() { b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
			do := func() bool { return postDrain(b, client, path.url, body, len(completion1KB)) }
			if parallelism == 0 {
				for i := 0; i < b.N && do(); i++ {
				}
				return
			}
			b.SetParallelism(parallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() && do() {
				}
			})
		})
	}
}

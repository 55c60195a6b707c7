package dispatch_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// benchFrames is hopbench's chat stream: a role chunk, 50 content chunks,
// the finish chunk and [DONE], in OpenAI's shape.
func benchFrames() [][]byte {
	chunk := func(delta, finish string) []byte {
		return fmt.Appendf(nil, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,`+
			`"model":"bench","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	frames := [][]byte{chunk(`{"role":"assistant","content":""}`, "null")}
	for i := 1; i <= 50; i++ {
		frames = append(frames, chunk(fmt.Sprintf(`{"content":"tok%d "}`, i), "null"))
	}
	return append(frames, chunk(`{}`, `"stop"`), []byte("data: [DONE]\n\n"))
}

// streamUpstream answers every request with the bench stream: all of it in
// one write and one flush (burst), or a write and a flush per frame.
type streamUpstream struct {
	frames [][]byte
	burst  bool
}

func (u streamUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	if u.burst {
		_, _ = w.Write(bytes.Join(u.frames, nil))
		_ = rc.Flush()
		return
	}
	for _, f := range u.frames {
		if _, err := w.Write(f); err != nil {
			return
		}
		_ = rc.Flush()
	}
}

// postDrain posts body to url as a bench client and reads the whole
// answer; false (after reporting it) unless it is a 200 of want bytes.
func postDrain(b *testing.B, client *http.Client, url, body string, want int) bool {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+channelKey)
	resp, err := client.Do(req)
	if err != nil {
		b.Error(err)
		return false
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || n != int64(want) {
		b.Errorf("status %d, %d bytes (want %d)", resp.StatusCode, n, want)
		return false
	}
	return true
}

// BenchmarkBurstStream is hopbench's stream-50-frames-burst and
// stream-50-frames workloads in one process: the same 52-frame chat stream,
// written by the upstream at once (burst) or frame by frame, read directly,
// through a bare httputil.ReverseProxy and through the gateway (real clock,
// spans to a discarding OTLP sink), 16 clients per core. cpu-µs/op is the
// whole process's CPU per stream; gateway minus proxy is what hopgate adds
// per stream (docs/performance.md, issue 34).
func BenchmarkBurstStream(b *testing.B) {
	sink := httptest.NewServer(&otlpSink{})
	b.Cleanup(sink.Close)
	frames := benchFrames()
	want := len(bytes.Join(frames, nil))
	for _, burst := range []bool{true, false} {
		up := streamUpstream{frames: frames, burst: burst}
		h := gwtest.NewWith(b, gwtest.Options{
			Custom:  map[string]http.Handler{"a": up, "b": up},
			Clock:   clockwork.NewRealClock(),
			OTELEnv: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": sink.URL},
			Logger:  quiet,
		}, twoChannels("m", "m", ""))
		proxyURL := bareProxy(b, h.Config.Channel("b").BaseURL)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.Cleanup(client.CloseIdleConnections)
		body := chat(true)
		shape := "burst"
		if !burst {
			shape = "per-frame"
		}
		for _, path := range []struct{ name, url string }{
			{"direct", h.Config.Channel("b").BaseURL + "/chat/completions"},
			{"proxy", proxyURL},
			{"gateway", h.URL + "/v1/chat/completions"},
		} {
			b.Run(shape+"/"+path.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := processCPU()
				defer func() { b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if !postDrain(b, client, path.url, body, want) {
							return
						}
					}
				})
			})
		}
	}
}

// burstTransport answers every hop with the bench stream from memory, in
// reads of at most 4 KiB (what net/http's transport hands over from its
// buffer), so BenchmarkPumpBurst measures the gateway's own work per
// stream without sockets or other goroutines.
type burstTransport struct{ stream []byte }

func (t burstTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(&pieces{b: t.stream, n: 4096}), Request: r}, nil
}

// pieces reads b in reads of at most n bytes.
type pieces struct {
	b []byte
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), p.n)], p.b)
	p.b = p.b[k:]
	return k, nil
}

// discardWriter is a client that takes every byte at once.
type discardWriter struct {
	h       http.Header
	n       int
	flushes int
	keep    *bytes.Buffer // when set, what was written
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(int)     {}
func (w *discardWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	if w.keep != nil {
		w.keep.Write(b)
	}
	return len(b), nil
}
func (w *discardWriter) Flush() { w.flushes++ }

// BenchmarkPumpBurst is one burst stream through the engine alone (Start,
// Pump, End) from an in-memory upstream to a discarding client: the
// gateway's own CPU per burst stream, steadier on a shared machine than
// the end-to-end BenchmarkBurstStream.
func BenchmarkPumpBurst(b *testing.B) {
	stream := bytes.Join(benchFrames(), nil)
	m := newMemChat(b, burstTransport{stream: stream})
	b.ReportAllocs()
	var flushes int
	for b.Loop() {
		w := &discardWriter{h: http.Header{}}
		res := m.stream(w).End()
		if res.Outcome != dispatch.OutcomeOK || w.n != len(stream) {
			b.Fatalf("outcome %q, %d bytes of %d", res.Outcome, w.n, len(stream))
		}
		flushes += w.flushes
	}
	b.ReportMetric(float64(flushes)/float64(b.N), "flushes/op")
}

// memChat is an engine with one chat model whose one channel is rt (no
// sockets) and the streamed chat request Start is given.
type memChat struct {
	e      *dispatch.Engine
	cfg    *config.Config
	body   []byte
	fields reqbody.Fields
}

func newMemChat(tb testing.TB, rt http.RoundTripper) *memChat {
	tb.Helper()
	cfg, err := config.Parse([]byte(`
auth: {mode: none}
channels:
  - {id: a, base_url: "http://127.0.0.1:9/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: m}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	fields, err := reqbody.Parse(body)
	if err != nil {
		tb.Fatal(err)
	}
	return &memChat{e: dispatch.New(dispatch.Options{Transport: rt}), cfg: cfg, body: body, fields: fields}
}

// stream starts the streamed chat request, answered on w.
func (m *memChat) stream(w http.ResponseWriter) *dispatch.Answer {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	return m.e.Start(w, r, &dispatch.Request{Config: m.cfg, Model: m.cfg.Model("m"), Operation: config.OpChat,
		Path: "/chat/completions", Body: m.body, Fields: m.fields, Stream: true})
}

package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// endpointCase is one OpenAI endpoint as a client calls it.
type endpointCase struct {
	name   string
	path   string
	genai  string // gen_ai.operation.name of its hop spans
	ct     string
	body   func(model string) []byte // the client body for a model name
	stream bool                      // the answer is SSE
}

const uploadBoundary = "hopgate-test-boundary-7MA4YWxkTrZu0gW"

// audioUpload is a file with every byte value, CRLFs and a boundary
// lookalike: an upload that must reach the upstream untouched.
var audioUpload = func() []byte {
	b := []byte("ID3\x04\x00\x00\x00\x00\x00\x00")
	for i := 0; i < 4096; i++ {
		b = append(b, byte(i), byte(i*7))
	}
	return append(b, "\r\n--"+uploadBoundary+"x\r\n\r\n"...)
}()

// transcriptionBody is what the OpenAI SDK sends: the file, then fields.
func transcriptionBody(model string) []byte {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	_ = w.SetBoundary(uploadBoundary)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="hello.mp3"`)
	h.Set("Content-Type", "audio/mpeg")
	p, _ := w.CreatePart(h)
	_, _ = p.Write(audioUpload)
	_ = w.WriteField("model", model)
	_ = w.WriteField("response_format", "json")
	_ = w.Close()
	return buf.Bytes()
}

func jsonBody(format string) func(string) []byte {
	return func(model string) []byte { return []byte(strings.Replace(format, "MODEL", model, 1)) }
}

// endpoints are every proxied route. Streaming clients ask for usage
// themselves, so the gateway has nothing to add and the answer must be
// the upstream's bytes exactly.
var endpoints = []endpointCase{
	{name: "chat", path: "/v1/chat/completions", genai: "chat", ct: "application/json",
		body: jsonBody(`{"model":"MODEL", "messages":[{"role":"user","content":"hé"}],"temperature":0.2}`)},
	{name: "chat stream", path: "/v1/chat/completions", genai: "chat", ct: "application/json", stream: true,
		body: jsonBody(`{"model":"MODEL","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)},
	{name: "completions", path: "/v1/completions", genai: "text_completion", ct: "application/json",
		body: jsonBody(`{"model":"MODEL","prompt":"Say hi","max_tokens":16}`)},
	{name: "completions stream", path: "/v1/completions", genai: "text_completion", ct: "application/json", stream: true,
		body: jsonBody(`{"model":"MODEL","prompt":"Say hi","stream":true,"stream_options":{"include_usage":true}}`)},
	{name: "responses", path: "/v1/responses", genai: "chat", ct: "application/json",
		body: jsonBody(`{"model":"MODEL","input":"Say hi"}`)},
	{name: "responses stream", path: "/v1/responses", genai: "chat", ct: "application/json", stream: true,
		body: jsonBody(`{"model":"MODEL","input":[{"role":"user","content":"Say hi"}],"stream":true}`)},
	{name: "embeddings", path: "/v1/embeddings", genai: "embeddings", ct: "application/json",
		body: jsonBody(`{"model":"MODEL","input":["one","two"],"dimensions":4}`)},
	{name: "images", path: "/v1/images/generations", genai: "generate_content", ct: "application/json",
		body: jsonBody(`{"model":"MODEL","prompt":"a lighthouse","n":2,"size":"256x256","response_format":"b64_json"}`)},
	{name: "speech", path: "/v1/audio/speech", genai: "generate_content", ct: "application/json",
		body: jsonBody(`{"model":"MODEL","input":"Hello there","voice":"alloy","response_format":"mp3"}`)},
	{name: "transcriptions", path: "/v1/audio/transcriptions", genai: "generate_content",
		ct: "multipart/form-data; boundary=" + uploadBoundary, body: transcriptionBody},
}

// tap records the bytes a fake provider wrote, per request, so a test can
// compare them with what the client received.
type tap struct {
	up http.Handler // the fake provider
	mu sync.Mutex
	// replies in arrival order; a reply grows while its handler writes.
	replies []*bytes.Buffer
}

func (tp *tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := &bytes.Buffer{}
	tp.mu.Lock()
	tp.replies = append(tp.replies, buf)
	tp.mu.Unlock()
	tp.up.ServeHTTP(&tapWriter{ResponseWriter: w, tap: tp, buf: buf}, r)
}

func (tp *tap) last() string {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.replies) == 0 {
		return ""
	}
	return tp.replies[len(tp.replies)-1].String()
}

type tapWriter struct {
	http.ResponseWriter
	tap *tap
	buf *bytes.Buffer
}

func (w *tapWriter) Write(b []byte) (int, error) {
	w.tap.mu.Lock()
	w.buf.Write(b)
	w.tap.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack (the fake's
// reset fault hijacks the connection).
func (w *tapWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// endpointConfig serves public model m as upstream model up-m on a cheap
// channel a and a dearer b, for every operation.
const endpointConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: m
    operations: [chat, completions, responses, embeddings, images, audio_speech, audio_transcriptions]
    policy: {header_timeout: 10s}
    chain:
      - {channel: b, upstream_model: up-m, price: {input: 2, output: 2}}
      - {channel: a, upstream_model: up-m, price: {input: 1, output: 1}}
`

// newEndpointHarness is a harness whose providers are tapped.
func newEndpointHarness(t *testing.T) (*gwtest.Gateway, map[string]*tap) {
	t.Helper()
	taps := map[string]*tap{}
	wrap := map[string]func(http.Handler) http.Handler{}
	for _, id := range []string{"a", "b"} {
		taps[id] = &tap{}
		wrap[id] = func(fake http.Handler) http.Handler { taps[id].up = fake; return taps[id] }
	}
	return gwtest.NewWith(t, gwtest.Options{Wrap: wrap}, endpointConfig, "a", "b"), taps
}

func mustCall(t *testing.T, h *gwtest.Gateway, ec endpointCase) gwtest.Reply {
	t.Helper()
	r, err := h.Call(context.Background(), ec.path, ec.ct, ec.body("m"))
	if err != nil {
		t.Fatalf("%s: %v", ec.path, err)
	}
	return r
}

// TestEndpointsPassThrough: every endpoint answers with the upstream's
// bytes exactly (binary audio included), sends the upstream the client's
// body with only the model changed, and names its hop span after the
// GenAI operation and the upstream model.
func TestEndpointsPassThrough(t *testing.T) {
	for _, ec := range endpoints {
		t.Run(ec.name, func(t *testing.T) {
			h, taps := newEndpointHarness(t)
			r := mustCall(t, h, ec)
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
				t.Fatalf("status %d path %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			if r.Body != taps["a"].last() || len(r.Body) == 0 {
				t.Fatalf("answer differs from the upstream's bytes:\n got %.200q\nwant %.200q", r.Body, taps["a"].last())
			}
			log := h.Ups["a"].Log()
			if len(log) != 1 {
				t.Fatalf("upstream a saw %d requests, want 1", len(log))
			}
			if !bytes.Equal(log[0].Body, ec.body("up-m")) {
				t.Fatalf("upstream body: only the model may change\n got %.300q\nwant %.300q", log[0].Body, ec.body("up-m"))
			}
			if got := log[0].Header.Get("Content-Type"); got != ec.ct {
				t.Fatalf("upstream Content-Type %q, want %q", got, ec.ct)
			}
			switch ec.name {
			case "speech":
				if r.Header.Get("Content-Type") != "audio/mpeg" || r.Body != string(upstream.SpeechAudio("Hello there", upstream.DefaultTokens)) {
					t.Fatalf("audio: %q, %d bytes", r.Header.Get("Content-Type"), len(r.Body))
				}
			case "transcriptions":
				if !strings.Contains(r.Body, upstream.FileDigest(audioUpload)) {
					t.Fatalf("the upload did not reach the upstream intact: %s", r.Body)
				}
			}
			if ec.stream != strings.HasPrefix(r.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("Content-Type %q for stream=%v", r.Header.Get("Content-Type"), ec.stream)
			}
			var hop bool
			for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
				if s.SpanKind != trace.SpanKindClient {
					continue
				}
				hop = true
				if s.Name != ec.genai+" up-m" || spanAttr(s.Attributes, telemetry.AttrGenAIOperation) != ec.genai {
					t.Fatalf("hop span %q, %s=%q; want %q", s.Name, telemetry.AttrGenAIOperation, spanAttr(s.Attributes, telemetry.AttrGenAIOperation), ec.genai+" up-m")
				}
			}
			if !hop {
				t.Fatal("no hop span")
			}
		})
	}
}

// TestEndpointsFailOverOn503: a 503 from the cheapest channel moves to the
// next one, which receives the very same bytes (multipart upload included)
// and whose answer the client gets unchanged.
func TestEndpointsFailOverOn503(t *testing.T) {
	for _, ec := range endpoints {
		t.Run(ec.name, func(t *testing.T) {
			h, taps := newEndpointHarness(t)
			if err := h.Ups["a"].SetFault("up-m", "503"); err != nil {
				t.Fatal(err)
			}
			r := mustCall(t, h, ec)
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:503 -> b:ok" {
				t.Fatalf("status %d path %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			if r.Body != taps["b"].last() {
				t.Fatalf("answer differs from the serving upstream's bytes")
			}
			la, lb := h.Ups["a"].Log(), h.Ups["b"].Log()
			if len(la) != 1 || len(lb) != 1 || !bytes.Equal(la[0].Body, lb[0].Body) || la[0].Header.Get("Content-Type") != lb[0].Header.Get("Content-Type") {
				t.Fatalf("the replayed request differs from the first hop's (%d, %d requests)", len(la), len(lb))
			}
		})
	}
}

// TestEndpointsFinal400: a client error from the upstream comes back after
// exactly one attempt, unchanged; no other channel is asked.
func TestEndpointsFinal400(t *testing.T) {
	for _, ec := range endpoints {
		t.Run(ec.name, func(t *testing.T) {
			h, taps := newEndpointHarness(t)
			if err := h.Ups["a"].SetFault("up-m", "400"); err != nil {
				t.Fatal(err)
			}
			r := mustCall(t, h, ec)
			if r.Status != 400 || r.Body != taps["a"].last() || r.Header.Get("X-Hopgate-Attempts") != "1" {
				t.Fatalf("status %d attempts %s: %s", r.Status, r.Header.Get("X-Hopgate-Attempts"), r.Body)
			}
			if n := len(h.Ups["b"].Log()); n != 0 {
				t.Fatalf("b saw %d requests after a final error", n)
			}
		})
	}
}

// TestEndpointsHeaderTimeout: an upstream that never answers costs the
// model's header_timeout (on the gateway clock), then the next channel
// serves, on every endpoint.
func TestEndpointsHeaderTimeout(t *testing.T) {
	for _, ec := range endpoints {
		t.Run(ec.name, func(t *testing.T) {
			h, taps := newEndpointHarness(t)
			if err := h.Ups["a"].SetFault("up-m", "no-headers"); err != nil {
				t.Fatal(err)
			}
			done := h.AsyncCall(ec.path, ec.ct, ec.body("m"))
			h.WaitAttempts("a", "up-m", 1)
			h.WaitTimers(1)
			h.Clock.Advance(10 * time.Second)
			r := testkit.Recv(t, done, "the reply")
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:header_timeout -> b:ok" || r.Body != taps["b"].last() {
				t.Fatalf("status %d path %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
		})
	}
}

// TestStreamingEndpointsGate: on every streaming endpoint an error inside
// a 200 stream is caught by the gate before commit and fails over.
func TestStreamingEndpointsGate(t *testing.T) {
	for _, ec := range endpoints {
		if !ec.stream {
			continue
		}
		for _, fault := range []string{"stream-error", "stream-error-event"} {
			t.Run(ec.name+"/"+fault, func(t *testing.T) {
				h, taps := newEndpointHarness(t)
				if err := h.Ups["a"].SetFault("up-m", fault); err != nil {
					t.Fatal(err)
				}
				r := mustCall(t, h, ec)
				if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:stream_error -> b:ok" || r.Body != taps["b"].last() {
					t.Fatalf("status %d path %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
				}
			})
		}
	}
}

// TestSpeechFailures: a speech request answered with a JSON error or an
// HTML page under 200 is a failed hop (nothing was committed); a binary
// body cut after commit cannot fail over, so the client's transfer breaks
// instead of ending cleanly, with or without a Content-Length.
func TestSpeechFailures(t *testing.T) {
	speech := endpoints[8]
	if speech.name != "speech" {
		t.Fatal("endpoints table changed")
	}
	for _, fault := range []string{"error-body", "bad-json"} {
		t.Run(fault, func(t *testing.T) {
			h, taps := newEndpointHarness(t)
			if err := h.Ups["a"].SetFault("up-m", fault); err != nil {
				t.Fatal(err)
			}
			r := mustCall(t, h, speech)
			if r.Status != 200 || !strings.HasPrefix(r.Header.Get("X-Hopgate-Path"), "a:") || !strings.HasSuffix(r.Header.Get("X-Hopgate-Path"), " -> b:ok") || r.Body != taps["b"].last() {
				t.Fatalf("status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
			}
		})
	}
	t.Run("cut with Content-Length", func(t *testing.T) {
		h, _ := newEndpointHarness(t)
		if err := h.Ups["a"].SetFault("up-m", "cut=4"); err != nil {
			t.Fatal(err)
		}
		r, err := h.Call(context.Background(), speech.path, speech.ct, speech.body("m"))
		if !errors.Is(err, io.ErrUnexpectedEOF) || r.Status != 200 || len(r.Body) == 0 {
			t.Fatalf("a cut audio body must reach the client as a broken transfer: status %d, %d bytes, err %v", r.Status, len(r.Body), err)
		}
		if n := len(h.Ups["b"].Log()); n != 0 {
			t.Fatalf("failover after commit: b saw %d requests", n)
		}
	})
	// A body that stalls past stream_idle_timeout after commit is cut the
	// same way: the bytes received, then a broken transfer, no failover.
	t.Run("stall past stream_idle_timeout", func(t *testing.T) {
		cfg := strings.Replace(endpointConfig, "policy: {header_timeout: 10s}", "policy: {header_timeout: 10s, stream_idle_timeout: 5s}", 1)
		h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{
			"a": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "audio/mpeg")
				w.Header().Set("Content-Length", "16384")
				_, _ = w.Write(bytes.Repeat([]byte{0xff, 0xfb}, 4096))
				http.NewResponseController(w).Flush()
				<-r.Context().Done() // then nothing, until the gateway gives up
			}),
		}}, cfg, "b")
		req, _ := http.NewRequest(http.MethodPost, h.URL+speech.path, bytes.NewReader(speech.body("m")))
		req.Header.Set("Content-Type", speech.ct)
		resp, err := h.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Hopgate-Path") != "a:ok" {
			t.Fatalf("status %d path %q", resp.StatusCode, resp.Header.Get("X-Hopgate-Path"))
		}
		h.WaitTimers(1) // headers are in, so the header timer is stopped: this is the idle timer
		// The bytes sent arrive before the stall is judged: advancing the
		// clock first could cut the body while the gateway still copies it.
		sent := make([]byte, 8192)
		if n, err := io.ReadFull(resp.Body, sent); err != nil {
			t.Fatalf("%d of the 8192 bytes sent arrived before the stall: %v", n, err)
		}
		h.Clock.Advance(5 * time.Second)
		b, err := io.ReadAll(resp.Body)
		if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 0 {
			t.Fatalf("%d more bytes, err %v: want the 8192 bytes sent, then a broken transfer", len(b), err)
		}
		if n := len(h.Ups["b"].Log()); n != 0 {
			t.Fatalf("failover after commit: b saw %d requests", n)
		}
		h.WantArmed(5*time.Second, 10*time.Second) // the idle timer; the header timeout
	})
	t.Run("chunked, then html", func(t *testing.T) {
		h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{
			// a: 200 text/html from a load balancer, a failed hop.
			"a": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/html")
				_, _ = io.WriteString(w, "<html>502 Bad Gateway</html>")
			}),
			// b: audio without a Content-Length that dies mid-body.
			"b": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "audio/mpeg")
				_, _ = w.Write(bytes.Repeat([]byte{0xff, 0xfb}, 4096))
				http.NewResponseController(w).Flush()
				panic(http.ErrAbortHandler)
			}),
		}}, endpointConfig)
		r, err := h.Call(context.Background(), speech.path, speech.ct, speech.body("m"))
		if err == nil || r.Status != 200 || len(r.Body) != 8192 || r.Header.Get("X-Hopgate-Path") != "a:bad_json -> b:ok" {
			t.Fatalf("status %d, %d bytes, path %q, err %v: want a broken transfer after the bytes received", r.Status, len(r.Body), r.Header.Get("X-Hopgate-Path"), err)
		}
	})
}

func spanAttr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

package dispatch_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/reqbody"
)

// streamsTransport answers each hop with the next of its streams, in reads
// of at most 4 KiB.
type streamsTransport struct{ streams [][]byte }

func (t *streamsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s := t.streams[0]
	t.streams = t.streams[1:]
	return burstTransport{stream: s}.RoundTrip(r)
}

// TestStreamsKeepTheirOwnBytes: the SSE reader and its buffer are recycled
// from one stream to the next (sse.Get, released at the stream's end), so
// each client must get exactly its own stream's bytes: a burst that filled
// a 16 KiB buffer, then a short stream read into that buffer again, then a
// burst of other bytes.
func TestStreamsKeepTheirOwnBytes(t *testing.T) {
	stream := func(tok string, n int) []byte {
		var b bytes.Buffer
		for i := range n {
			fmt.Fprintf(&b, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"%s%d "},"finish_reason":null}]}`+"\n\n", tok, i)
		}
		b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		return b.Bytes()
	}
	streams := [][]byte{stream("alpha", 120), stream("b", 2), stream("gamma", 90), stream("d", 1)}
	cfg, err := config.Parse([]byte(`
auth: {mode: none}
channels:
  - {id: a, base_url: "http://127.0.0.1:9/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: m}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	fields, err := reqbody.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	e := dispatch.New(dispatch.Options{Transport: &streamsTransport{streams: streams}})
	for i, want := range streams {
		w := &recordingWriter{h: http.Header{}}
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		a := e.Start(w, r, &dispatch.Request{Config: cfg, Model: cfg.Model("m"), Operation: config.OpChat, Path: "/chat/completions", Body: body, Fields: fields, Stream: true})
		if res := a.End(); res.Outcome != dispatch.OutcomeOK {
			t.Fatalf("stream %d: outcome %q", i, res.Outcome)
		}
		if !bytes.Equal(w.b.Bytes(), want) {
			t.Fatalf("stream %d: got %d bytes, want its own %d:\n%.300q", i, w.b.Len(), len(want), w.b.Bytes())
		}
	}
}

// recordingWriter is a client that keeps every byte.
type recordingWriter struct {
	h http.Header
	b bytes.Buffer
}

func (w *recordingWriter) Header() http.Header         { return w.h }
func (w *recordingWriter) WriteHeader(int)             {}
func (w *recordingWriter) Write(b []byte) (int, error) { return w.b.Write(b) }
func (w *recordingWriter) Flush()                      {}

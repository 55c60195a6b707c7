package dispatch_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
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
	m := newMemChat(t, &streamsTransport{streams: streams})
	for i, want := range streams {
		var got bytes.Buffer
		if res := m.stream(&discardWriter{h: http.Header{}, keep: &got}).End(); res.Outcome != dispatch.OutcomeOK {
			t.Fatalf("stream %d: outcome %q", i, res.Outcome)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("stream %d: got %d bytes, want its own %d:\n%.300q", i, got.Len(), len(want), got.Bytes())
		}
	}
}

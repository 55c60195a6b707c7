//go:build !race

// (The race detector's instrumentation changes frame sizes.)

package dispatch

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"testing"

	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
)

const feedStackChild = "HOPGATE_TEST_FEED_STACK_CHILD"

// growStack makes the calling goroutine's stack at least n bytes deep
// once, so it does not grow again below that (the collector, which would
// shrink it, is off in the child).
//
//go:noinline
func growStack(n int) byte {
	var pad [1024]byte
	if n <= len(pad) {
		return pad[0]
	}
	return growStack(n-len(pad)) + pad[n%len(pad)]
}

// The gate's reader goroutine only reads: the codec's inspection of each
// frame runs on the gate's goroutine (frameFeed.judge). A goroutine starts
// on a 2 KiB stack; its read through net/http's chunked body takes it to
// 4 KiB, and inspecting a chat chunk on it as well took it to 8 KiB in
// every stream's first frame (docs/performance.md). The child process
// caps every stack at 4 KiB while feeds read a role chunk and a content
// chunk from an HTTP response body: a reader goroutine that inspects
// frames again crashes it.
func TestFrameFeedReaderStackStaysSmall(t *testing.T) {
	if !InStackChild(t, feedStackChild, "no reader grew past 4 KiB", "the gate's reader goroutine grew its stack past 4 KiB") {
		return
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	// hopbench's chunks (burst_bench_test.go's benchFrames), on which the
	// growth was seen.
	const role = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench",` +
		`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	const content = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench",` +
		`"choices":[{"index":0,"delta":{"content":"tok"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	const streams = 8
	// The upstream writes both frames with its headers and holds the
	// response open: the transport has them buffered when the response is
	// returned, so the reader goroutines read them through net/http's body
	// (the path a stream's reads take) without waiting on the socket.
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, role+content)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer up.Close()
	defer close(release)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	// Readers and their buffers from the free lists, as a busy gateway's
	// streams get them: a buffer the heap must find takes the runtime's
	// allocator deeper than the read itself.
	var warm []*sse.Reader
	for range streams {
		rd := sse.Get(bytes.NewReader([]byte(role+role)), 0)
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, rd)
	}
	for _, rd := range warm {
		rd.Release()
	}
	type stream struct {
		body io.ReadCloser
		feed *frameFeed
		k    codec
	}
	var ss []stream
	for range streams {
		resp, err := client.Get(up.URL)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, stream{body: resp.Body, k: &chatCodec{}})
	}
	growStack(64 << 10) // the gate's side (this goroutine) may inspect as deep as it likes
	old := debug.SetMaxStack(4 << 10)
	for i := range ss {
		ss[i].feed = startFrames(sse.Get(ss[i].body, 0))
	}
	for _, s := range ss {
		for i, fr := range []string{role, content} {
			<-s.feed.ready
			s.feed.judge(s.k, true)
			it := s.feed.cur
			if want := []gate.Kind{gate.Hold, gate.Content}[i]; it.err != nil || it.info.Kind != want || string(it.raw) != fr {
				t.Fatalf("frame %d: kind %v, err %v, raw %q; want kind %v and the frame", i, it.info.Kind, it.err, it.raw, want)
			}
			if i == 0 {
				s.feed.next <- true
			}
		}
		if string(s.feed.cur.text) != "tok" {
			t.Fatalf("kept text %q, want tok", s.feed.cur.text)
		}
		s.feed.handOver()
	}
	debug.SetMaxStack(old)
	for _, s := range ss {
		_ = s.body.Close()
	}
	t.Log("no reader grew past 4 KiB")
}

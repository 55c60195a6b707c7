package dispatch_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// An open stream keeps no copy of a large prompt: neither the client body
// (no hop can need it after commit without mid_stream: resume) nor the body
// sent upstream (the transport holds the request until the response body
// is closed). With either copy kept, every stream below would hold at
// least promptSize more bytes. Bodies up to smallBody (3 KiB) are sent as
// an in-memory reader, which the request keeps: that bounded copy is the
// price of one write per hop, and this test does not see it.
func TestOpenStreamHoldsNoPrompt(t *testing.T) {
	const (
		streams    = 16
		promptSize = 256 << 10
	)
	up := &idleStreams{release: make(chan struct{})}
	h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": up}}, twoChannels("m", "m", ""), "b")
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", promptSize) + `"}]}`

	before, _ := heapNow()
	resps := openIdle(t, h.Client, h.URL+"/v1/chat/completions", body, streams)
	after, _ := heapNow()
	close(up.release)
	closeAll(resps)
	if t.Failed() {
		return
	}
	per := int64(after-before) / streams
	t.Logf("heap per open stream with a %d KiB prompt: %d KiB", promptSize>>10, per>>10)
	if per >= promptSize/2 {
		t.Fatalf("each open stream holds %d KiB of heap with a %d KiB prompt: a copy of the prompt is kept", per>>10, promptSize>>10)
	}
}

// openIdle opens n streams at once and returns when each has delivered its
// first content frame ("tok1", see idleStreams): committed and idle. A
// stream that failed is nil (and reported with tb.Error); the caller
// closes the rest with closeAll.
func openIdle(tb testing.TB, client *http.Client, url, body string, n int) []*http.Response {
	resps := make([]*http.Response, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+channelKey)
			resp, err := client.Do(req)
			if err != nil {
				tb.Error(err)
				return
			}
			resps[k] = resp // closed by closeAll, whatever happens next
			rd := sse.NewReader(resp.Body, 0)
			for {
				f, err := rd.Next()
				if err != nil {
					tb.Error(err)
					return
				}
				if bytes.Contains(f.Data, []byte("tok1")) {
					return
				}
			}
		})
	}
	wg.Wait()
	return resps
}

// closeAll drains and closes the responses of openIdle.
func closeAll(resps []*http.Response) {
	for _, r := range resps {
		if r != nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
}

// stackChild marks the child process of TestStreamStackStaysSmall.
const stackChild = "HOPGATE_TEST_STACK_CHILD"

// A streamed request never grows its goroutine's stack past 8 KiB, the
// size the bare proxy's handler keeps: the walk returns before the stream
// is passed on (Engine.Start), and the paths under it are kept shallow
// enough (docs/performance.md, memory per idle stream). A stack that grew
// to 16 KiB would be kept by every idle stream.
//
// The check is the runtime's own: debug.SetMaxStack makes a goroutine that
// would grow past the limit crash the process, with the traceback of the
// path that did. So the requests run in a child process, with the garbage
// collector off (its sweeping and assists run on the allocating goroutine
// and would make the depth depend on timing) and without the race
// detector, whose instrumentation makes every frame larger: make test runs
// this test in a build without it.
func TestStreamStackStaysSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("frame sizes under the race detector are not the shipped ones; make test runs this test without -race")
	}
	if !dispatch.InStackChild(t, stackChild, "no goroutine grew past 8 KiB", "a streamed request grew a goroutine's stack past 8 KiB") {
		return
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.MemProfileRate = 0
	up := &idleStreams{release: make(chan struct{})}
	h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": up}, Logger: quiet}, twoChannels("m", "m", ""), "b")
	url := h.URL + "/v1/chat/completions"
	warm := openIdle(t, h.Client, url, chat(true), 4) // first-use allocations, connection pools
	old := debug.SetMaxStack(8 << 10)
	open := openIdle(t, h.Client, url, chat(true), 4)
	debug.SetMaxStack(old)
	close(up.release)
	closeAll(warm)
	closeAll(open)
	if !t.Failed() {
		t.Log("no goroutine grew past 8 KiB")
	}
}

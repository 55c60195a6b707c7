package dispatch_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

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

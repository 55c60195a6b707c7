package gwtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/sse"
)

// Reply is a whole answer of the gateway.
type Reply struct {
	Status int // -1: no answer (Body holds the client's error)
	Header http.Header
	Body   string
}

// ChatBody is a one-message chat completion request for model.
func ChatBody(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
}

// Post sends a chat completion body through the gateway and reads the
// whole reply.
func (g *Gateway) Post(body string) Reply {
	g.tb.Helper()
	return g.PostCtx(context.Background(), body, nil)
}

// PostCtx is Post with a context and request headers ("Host" sets the
// request's Host). A read error fails the test unless ctx ended.
func (g *Gateway) PostCtx(ctx context.Context, body string, hdr map[string]string) Reply {
	g.tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		g.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if strings.EqualFold(k, "Host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := g.Client.Do(req)
	if err != nil {
		g.tb.Fatalf("gateway request: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && ctx.Err() == nil {
		g.tb.Fatalf("reading gateway reply: %v", err)
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// Async posts body in a goroutine, for tests that must move the clock
// while the request waits; the reply arrives on the channel (Status -1
// when the request failed).
//
// The request is cancelled when the test ends, before the gateway is
// closed: a test that fails while the request waits on a fake clock fails
// at once instead of hanging the package until its -timeout.
func (g *Gateway) Async(body string) <-chan Reply {
	return g.AsyncCall("/v1/chat/completions", "application/json", []byte(body))
}

// AsyncCall is Async for any endpoint.
func (g *Gateway) AsyncCall(path, ct string, body []byte) <-chan Reply {
	ch := make(chan Reply, 1)
	go func() {
		r, err := g.Call(g.ctx, path, ct, body)
		if r.Status < 0 {
			r.Body = err.Error()
		}
		ch <- r
	}()
	return ch
}

// Call posts body to path with Content-Type ct and reads the whole
// answer. The error is the client's or the read's (a broken transfer):
// the reply holds what arrived until then.
func (g *Gateway) Call(ctx context.Context, path, ct string, body []byte) (Reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, bytes.NewReader(body))
	if err != nil {
		return Reply{Status: -1}, err
	}
	req.Header.Set("Content-Type", ct)
	resp, err := g.Client.Do(req)
	if err != nil {
		return Reply{Status: -1}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, err
}

// Do sends req with the test's client and reads the whole answer; a
// request that failed is Status -1 with the error as Body.
func (g *Gateway) Do(req *http.Request) Reply {
	resp, err := g.Client.Do(req)
	if err != nil {
		return Reply{Status: -1, Body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
}

// Open posts a chat body and returns as soon as the response headers
// arrived, for tests that read a stream as it flows. The caller closes
// the body.
func (g *Gateway) Open(ctx context.Context, body string) *http.Response {
	g.tb.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.Client.Do(req)
	if err != nil {
		g.tb.Fatalf("gateway request: %v", err)
	}
	return resp
}

// SSEData returns the data payloads of an SSE body, in order.
func SSEData(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// StreamText concatenates the delta contents of an SSE chat stream.
func StreamText(body string) string {
	var b strings.Builder
	for _, d := range SSEData(body) {
		i := strings.Index(d, `"content":"`)
		if i < 0 {
			continue
		}
		rest := d[i+len(`"content":"`):]
		j := strings.IndexByte(rest, '"')
		b.WriteString(rest[:j])
	}
	return b.String()
}

// ReadTokens reads frames from rd until n content tokens (the fake's
// "tok1 ", "tok2 ", …) arrived.
func ReadTokens(tb testing.TB, rd *sse.Reader, n int) {
	tb.Helper()
	got := 0
	for got < n {
		f, err := rd.Next()
		if err != nil {
			tb.Fatalf("after %d tokens: %v", got, err)
		}
		if bytes.Contains(f.Data, []byte(`"content":"tok`)) {
			got++
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

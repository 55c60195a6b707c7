package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// epoch is the fake clock's start: created fields are deterministic.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	fake   *Server
	ts     *httptest.Server
	clock  *clockwork.FakeClock
	client *http.Client
	seen   chan Request // every request, as OnRequest saw it
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	fx := &fixture{clock: clockwork.NewFakeClockAt(epoch), seen: make(chan Request, 64)}
	if opts.Clock == nil {
		opts.Clock = fx.clock
	}
	opts.OnRequest = func(r Request) {
		select {
		case fx.seen <- r:
		default:
		}
	}
	fx.fake = New(opts)
	fx.ts = httptest.NewServer(fx.fake)
	fx.client = fx.ts.Client()
	t.Cleanup(func() {
		fx.fake.Close()
		fx.ts.Close()
	})
	return fx
}

// post sends a JSON body to path; extra fields are merged into the body.
func (fx *fixture) post(ctx context.Context, path string, body map[string]any) (*http.Response, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fx.ts.URL+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-channel")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	return fx.client.Do(req)
}

func chatBody(model string, stream bool) map[string]any {
	return map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []map[string]any{{"role": "user", "content": "say something"}},
	}
}

// chat posts a chat completion and fails the test on a transport error.
func (fx *fixture) chat(t *testing.T, model string, stream bool) *http.Response {
	t.Helper()
	resp, err := fx.post(t.Context(), "/v1/chat/completions", chatBody(model, stream))
	if err != nil {
		t.Fatalf("POST %s: %v", model, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// frames reads SSE frames (blank-line separated, without the separator)
// until the body ends; err is the read error, nil on a clean end.
func frames(r io.Reader) (out []string, err error) {
	br := bufio.NewReader(r)
	var cur strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" && cur.Len() == 0 {
				return out, nil
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // a partial frame
			}
			return out, err
		}
		if line == "\n" {
			out = append(out, strings.TrimSuffix(cur.String(), "\n"))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
}

// readFrames reads n frames from br.
func readFrames(t *testing.T, br *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	var cur strings.Builder
	for len(out) < n {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d frames: %v", len(out), err)
		}
		if line == "\n" {
			out = append(out, strings.TrimSuffix(cur.String(), "\n"))
			cur.Reset()
			continue
		}
		cur.WriteString(line)
	}
	return out
}

// deltaText is the content of a chat chunk frame ("" for role-only or
// finish chunks).
func deltaText(t *testing.T, frame string) string {
	t.Helper()
	var c struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(frame, "data: ")), &c); err != nil {
		t.Fatalf("frame %q: %v", frame, err)
	}
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Delta.Content
}

func contentOf(t *testing.T, frames []string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range frames {
		if strings.HasPrefix(f, "data: {") {
			b.WriteString(deltaText(t, f))
		}
	}
	return b.String()
}

func decode(t *testing.T, r io.Reader, v any) {
	t.Helper()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		t.Fatalf("decode: %v", err)
	}
}

// errorCode reads an OpenAI error body and returns error.code.
func errorCode(t *testing.T, r io.Reader) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	decode(t, r, &e)
	return e.Error.Code
}

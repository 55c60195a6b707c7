package tokens

import (
	"errors"
	"net/http"
	"testing"
)

// failingTransport fails the test on any HTTP request.
type failingTransport struct{ t *testing.T }

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("the tokenizer went to the network: %s", r.URL)
	return nil, errors.New("no network")
}

// TestNoNetwork: the BPE ranks come from the binary. tiktoken-go's default
// loader fetches them with net/http's default client; with every request
// of that client failing the test, the first count still works.
func TestNoNetwork(t *testing.T) {
	old := http.DefaultTransport
	http.DefaultTransport = failingTransport{t}
	defer func() { http.DefaultTransport = old }()
	n, err := Text("hello world")
	if err != nil || n != 2 {
		t.Fatalf("Text = %d, %v; want o200k_base's 2 tokens", n, err)
	}
}

// TestMessages: every part of a request counts, with the format's overhead.
func TestMessages(t *testing.T) {
	cases := []struct {
		name string
		body string
		want int64
	}{
		// 3 per message + "user" (1) + "hello world" (2) + 3 priming.
		{"one message", `{"model":"m","messages":[{"role":"user","content":"hello world"}]}`, 3 + 1 + 2 + 3},
		// The system prompt is a message of its own; blocks count like strings.
		{"system blocks", `{"system":[{"type":"text","text":"hello world"}],"messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}]}`, 3 + 2 + 3 + 1 + 2 + 3},
		// An image counts a fixed amount.
		{"image", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}`, 3 + 1 + perMedia + 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := Messages([]byte(c.body))
			if err != nil || n != c.want {
				t.Fatalf("Messages = %d, %v; want %d", n, err, c.want)
			}
		})
	}
	if _, err := Messages([]byte(`[1]`)); !errors.Is(err, ErrBody) {
		t.Fatalf("an array: %v, want ErrBody", err)
	}
}

// FuzzMessages: any bytes count or fail cleanly, never panic.
func FuzzMessages(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}]}`))
	f.Add([]byte(`{"system":"s","tools":[{"name":"t"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := Messages(b); err == nil && n < replyPriming {
			t.Fatalf("count %d below the priming", n)
		}
	})
}

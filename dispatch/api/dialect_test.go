package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// errorShape is "anthropic" or "openai": which client could read the body.
func errorShape(t *testing.T, b []byte) string {
	t.Helper()
	var m struct {
		Type  string         `json:"type"`
		Error map[string]any `json:"error"`
		ID    string         `json:"request_id"`
	}
	if err := json.Unmarshal(b, &m); err != nil || m.Error == nil || m.ID == "" {
		t.Fatalf("%q is not an error body with a request id", b)
	}
	switch {
	case m.Type == "error" && m.Error["type"] != nil && m.Error["code"] == nil:
		return "anthropic"
	case m.Type == "" && m.Error["code"] != nil:
		return "openai"
	}
	t.Fatalf("%s has neither shape", b)
	return ""
}

// TestErrorsInTheClientsDialect (DESIGN.md §14): every hopgate error on
// /v1/messages* or on a request carrying anthropic-version is
// Anthropic-shaped, an unknown path and every refusal of the front door
// included (an Anthropic SDK shows raw JSON for an OpenAI body); every
// other error stays OpenAI-shaped.
func TestErrorsInTheClientsDialect(t *testing.T) {
	gw, up := front(t)
	key := "Bearer " + clientKey
	av := "2023-06-01"
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	cases := []struct {
		name, method, path, auth, version, body string
		status                                  int
		shape                                   string
	}{
		{"unknown path under messages", "POST", "/v1/messages/batches", key, "", "{}", 404, "anthropic"},
		{"unknown path with anthropic-version", "GET", "/v1/files", key, av, "", 404, "anthropic"},
		{"unknown path, OpenAI client", "GET", "/v1/files", key, "", "", 404, "openai"},
		{"no key on messages, no version", "POST", "/v1/messages", "", "", chat, 401, "anthropic"},
		{"no key on models with anthropic-version", "GET", "/v1/models", "", av, "", 401, "anthropic"},
		{"no key on models, OpenAI client", "GET", "/v1/models", "", "", "", 401, "openai"},
		{"wrong method on messages", "GET", "/v1/messages", key, "", "", 405, "anthropic"},
		{"count_tokens, unknown model", "POST", "/v1/messages/count_tokens?beta=true", key, av, `{"model":"nope","messages":[]}`, 404, "anthropic"},
		{"chat route with anthropic-version, unknown model", "POST", "/v1/chat/completions", key, av, `{"model":"nope"}`, 404, "anthropic"},
		{"chat route, unknown model", "POST", "/v1/chat/completions", key, "", `{"model":"nope"}`, 404, "openai"},
		{"too large with anthropic-version", "POST", "/v1/chat/completions", key, av, big, 413, "anthropic"},
		{"too large, OpenAI client", "POST", "/v1/chat/completions", key, "", big, 413, "openai"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": "application/json"}
			if c.auth != "" {
				h["Authorization"] = c.auth
			}
			if c.version != "" {
				h["Anthropic-Version"] = c.version
			}
			resp, b := send(t, gw, c.method, c.path, h, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, b, c.status)
			}
			if got := errorShape(t, b); got != c.shape {
				t.Fatalf("%s shape, want %s: %s", got, c.shape, b)
			}
		})
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
}

// TestShedInTheClientsDialect: overload protection's 503 (shed before the
// body is read) is Anthropic-shaped for an Anthropic client too.
func TestShedInTheClientsDialect(t *testing.T) {
	gw := gwtest.NewWith(t, gwtest.Options{Budget: overload.NewBudget(8)}, `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}"}
models:
  - {name: m, chain: [{channel: a, upstream_model: m}]}
`, "a")
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for path, shape := range map[string]string{"/v1/messages": "anthropic", "/v1/chat/completions": "openai"} {
		resp, b := send(t, gw, "POST", path, map[string]string{"Content-Type": "application/json"}, body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Hopgate-Shed") == "" {
			t.Fatalf("%s: %d %s, want a shed 503", path, resp.StatusCode, b)
		}
		if got := errorShape(t, b); got != shape {
			t.Fatalf("%s: %s shape, want %s: %s", path, got, shape, b)
		}
	}
}

package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// doAnthropic sends a request as an Anthropic client does (x-api-key,
// anthropic-version) and decodes the JSON answer.
func doAnthropic(t *testing.T, gw *gwtest.Gateway, method, path string, h map[string]string, body string) (*http.Response, map[string]any) {
	t.Helper()
	hdr := map[string]string{"Anthropic-Version": "2023-06-01"}
	for k, v := range h {
		hdr[http.CanonicalHeaderKey(k)] = v // the caller's win
	}
	resp, b := send(t, gw, method, path, hdr, body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON", method, path, resp.StatusCode, b)
	}
	return resp, m
}

// TestMessagesFrontDoor: POST /v1/messages refuses in Anthropic's error
// shape with Anthropic's error type (the Anthropic SDKs switch on it),
// hopgate's code leading the message, and accepts the key in x-api-key
// (what Anthropic clients send) as well as in Authorization.
func TestMessagesFrontDoor(t *testing.T) {
	gw, up := front(t)
	xKey := map[string]string{"x-api-key": clientKey}
	ok := `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	big := `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	cases := []struct {
		name   string
		h      map[string]string
		body   string
		status int
		typ    string
		code   string
	}{
		{"missing key", nil, ok, 401, "authentication_error", "invalid_api_key"},
		{"wrong x-api-key", map[string]string{"x-api-key": "hg-wrong"}, ok, 401, "authentication_error", "invalid_api_key"},
		{"invalid JSON", xKey, `{"model":`, 400, "invalid_request_error", "invalid_request"},
		{"unknown model", xKey, `{"model":"nope","max_tokens":16,"messages":[]}`, 404, "not_found_error", "model_not_found"},
		{"body over the limit", xKey, big, 413, "request_too_large", "request_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, m := doAnthropic(t, gw, "POST", "/v1/messages", c.h, c.body)
			e, _ := m["error"].(map[string]any)
			if resp.StatusCode != c.status || m["type"] != "error" || e == nil || e["type"] != c.typ {
				t.Fatalf("%d %v, want %d and an Anthropic error of type %s", resp.StatusCode, m, c.status, c.typ)
			}
			if msg, _ := e["message"].(string); !strings.HasPrefix(msg, c.code+": ") {
				t.Fatalf("message %q does not lead with %s", msg, c.code)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || m["request_id"] != id {
				t.Fatalf("request id header %q body %v", id, m["request_id"])
			}
		})
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
	for _, h := range []map[string]string{xKey, {"Authorization": "Bearer " + clientKey}} {
		if resp, m := doAnthropic(t, gw, "POST", "/v1/messages", h, ok); resp.StatusCode != 200 || m["type"] != "message" {
			t.Fatalf("%v: %d %v", h, resp.StatusCode, m)
		}
	}
	// A wrong Authorization is not rescued by a right x-api-key.
	both := map[string]string{"Authorization": "Bearer hg-wrong", "x-api-key": clientKey}
	if resp, _ := doAnthropic(t, gw, "POST", "/v1/messages", both, ok); resp.StatusCode != 401 {
		t.Fatalf("wrong bearer, right x-api-key: %d", resp.StatusCode)
	}
}

// TestModelsListAnthropic: an Anthropic client (anthropic-version) lists
// the models in Anthropic's shape, only those POST /v1/messages serves
// (chat), sorted, with the page's first and last ids.
func TestModelsListAnthropic(t *testing.T) {
	gw, _ := front(t)
	resp, m := doAnthropic(t, gw, "GET", "/v1/models", map[string]string{"x-api-key": clientKey}, "")
	if resp.StatusCode != 200 || m["has_more"] != false || m["first_id"] != "all" || m["last_id"] != "m" {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	data, _ := m["data"].([]any)
	var ids []string
	for _, d := range data {
		d := d.(map[string]any)
		if d["type"] != "model" || d["display_name"] != d["id"] || d["created_at"] == "" {
			t.Fatalf("model entry %v", d)
		}
		ids = append(ids, d["id"].(string))
	}
	if strings.Join(ids, ",") != "all,m" {
		t.Fatalf("models %v, want the chat models all,m", ids)
	}
	if resp, m := doAnthropic(t, gw, "GET", "/v1/models", nil, ""); resp.StatusCode != 401 || m["type"] != "error" {
		t.Fatalf("models without a key: %d %v (an Anthropic client's errors are Anthropic-shaped, DESIGN.md §14)", resp.StatusCode, m)
	}
}

package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

const (
	clientKey  = "hg-client-key-team-a"
	channelKey = "sk-channel-only-upstream-sees-this"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// front starts a fake provider and a gateway with key auth and a small
// body limit, through real listeners.
func front(t *testing.T) (gw *gwtest.Gateway, up *upstream.Server) {
	t.Helper()
	yaml := `
max_body_bytes: 4096
auth:
  keys:
    - {id: team-a, sha256: ` + sha(clientKey) + `}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CH_KEY}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: up-m, price: {input: 1, output: 1}}
  - name: embed-only
    operations: [embeddings]
    chain:
      - {channel: a, upstream_model: up-e, price: {input: 1, output: 1}}
  - name: all
    operations: [chat, completions, responses, embeddings, images, audio_speech, audio_transcriptions]
    chain:
      - {channel: a, upstream_model: up-all, price: {input: 1, output: 1}}
`
	gw = gwtest.NewWith(t, gwtest.Options{APIKey: channelKey, Env: map[string]string{"CH_KEY": channelKey}}, yaml, "a")
	return gw, gw.Ups["a"]
}

func do(t *testing.T, gw *gwtest.Gateway, method, path, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	h := map[string]string{}
	if key != "" {
		h["Authorization"] = "Bearer " + key
	}
	resp, b := send(t, gw, method, path, h, body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp, m
}

// send sends a request with headers h and returns the answer and its body.
func send(t *testing.T, gw *gwtest.Gateway, method, path string, h map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, gw.URL+path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp, b
}

// TestBadInputNeverReachesUpstream: every front-door rejection has its
// status and OpenAI-shaped code, a request id, and costs zero upstream attempts.
func TestBadInputNeverReachesUpstream(t *testing.T) {
	gw, up := front(t)
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`
	cases := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"invalid JSON", "POST", "/v1/chat/completions", clientKey, `{"model":"m",`, 400, "invalid_request"},
		{"not an object", "POST", "/v1/chat/completions", clientKey, `["m"]`, 400, "invalid_request"},
		{"missing model", "POST", "/v1/chat/completions", clientKey, `{"messages":[]}`, 400, "invalid_request"},
		{"unknown model", "POST", "/v1/chat/completions", clientKey, `{"model":"nope","messages":[]}`, 404, "model_not_found"},
		{"operation not served", "POST", "/v1/chat/completions", clientKey, `{"model":"embed-only","messages":[]}`, 400, "operation_not_supported"},
		{"body over the limit", "POST", "/v1/chat/completions", clientKey, big, 413, "request_too_large"},
		{"wrong method", "GET", "/v1/chat/completions", clientKey, ``, 405, "method_not_allowed"},
		{"wrong method on models", "POST", "/v1/models", clientKey, `{}`, 405, "method_not_allowed"},
		{"missing key", "POST", "/v1/chat/completions", "", `{"model":"m","messages":[]}`, 401, "invalid_api_key"},
		{"wrong key", "POST", "/v1/chat/completions", "hg-wrong", `{"model":"m","messages":[]}`, 401, "invalid_api_key"},
		{"unknown route", "POST", "/v1/nothing", clientKey, `{}`, 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, m := do(t, gw, c.method, c.path, c.key, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, c.status, m)
			}
			e, _ := m["error"].(map[string]any)
			if e == nil || e["code"] != c.code || e["message"] == "" {
				t.Fatalf("error body %v, want code %s", m, c.code)
			}
			if _, ok := e["param"]; !ok {
				t.Fatalf("param missing from the OpenAI error shape: %v", m)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || m["request_id"] != id {
				t.Fatalf("request id header %q body %v", id, m["request_id"])
			}
			// A 405 names the one method the route takes (RFC 9110 §15.5.6).
			if want := map[string]string{"/v1/models": "GET"}[c.path]; c.status == 405 {
				if want == "" {
					want = "POST"
				}
				if got := resp.Header.Get("Allow"); got != want {
					t.Fatalf("Allow %q, want %q", got, want)
				}
			}
		})
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("bad input reached the upstream %d times", n)
	}
}

// TestCredentials: the upstream sees the channel credential and never the
// client's key; the body reaches it with only model rewritten.
func TestCredentials(t *testing.T) {
	gw, up := front(t)
	body := `{"model":"m", "messages":[{"role":"user","content":"hé \u00e9"}],"temperature":0.2}`
	resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %v", resp.StatusCode, m)
	}
	log := up.Log()
	if len(log) != 1 {
		t.Fatalf("upstream saw %d requests", len(log))
	}
	got := log[0]
	if a := got.Header.Get("Authorization"); a != "Bearer "+channelKey {
		t.Fatalf("upstream Authorization = %q", a)
	}
	for k, vs := range got.Header {
		for _, v := range vs {
			if strings.Contains(v, clientKey) {
				t.Fatalf("client key leaked upstream in header %s", k)
			}
		}
	}
	want := `{"model":"up-m", "messages":[{"role":"user","content":"hé \u00e9"}],"temperature":0.2}`
	if string(got.Body) != want {
		t.Fatalf("upstream body\n got %s\nwant %s", got.Body, want)
	}
}

// TestModelsList: GET /v1/models lists public names only, with operations.
func TestModelsList(t *testing.T) {
	gw, _ := front(t)
	resp, m := do(t, gw, "GET", "/v1/models", clientKey, "")
	if resp.StatusCode != 200 || m["object"] != "list" {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
	data := m["data"].([]any)
	if len(data) != 3 || data[0].(map[string]any)["id"] != "all" || data[1].(map[string]any)["id"] != "embed-only" || data[2].(map[string]any)["id"] != "m" {
		t.Fatalf("models %v", data)
	}
	if resp, _ := do(t, gw, "GET", "/v1/models", "", ""); resp.StatusCode != 401 {
		t.Fatalf("models without a key: %d", resp.StatusCode)
	}
}

// TestBearerCaseInsensitive: RFC 6750 scheme names are case-insensitive.
func TestBearerCaseInsensitive(t *testing.T) {
	gw, _ := front(t)
	req, _ := http.NewRequest("GET", gw.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

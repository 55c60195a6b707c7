package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// limited starts a gateway whose tenant team-a (the key's id) has the
// limits in tenants, in front of one fake provider.
func limited(t *testing.T, tenants string) *gwtest.Gateway {
	t.Helper()
	return limitedAs(t, "up-m", tenants)
}

// limitedAs is limited with model m served as upstream model up (the
// fake provider's faults are named in it).
func limitedAs(t *testing.T, up, tenants string) *gwtest.Gateway {
	t.Helper()
	yaml := `
auth:
  keys:
    - {id: team-a, sha256: ` + sha(clientKey) + `}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CH_KEY}
models:
  - name: m
    chain: [{channel: a, upstream_model: "` + up + `", price: {input: 1, output: 1}}]
  - name: n
    chain: [{channel: a, upstream_model: up-n, price: {input: 1, output: 1}}]
rate_limits:
  tenants:
` + tenants
	return gwtest.NewWith(t, gwtest.Options{APIKey: channelKey, Env: map[string]string{"CH_KEY": channelKey}}, yaml, "a")
}

func scrapeMetrics(t *testing.T, gw *gwtest.Gateway) string {
	t.Helper()
	rec := httptest.NewRecorder()
	gw.Tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// Why: over its rpm a tenant gets OpenAI's 429 rate_limit_exceeded (type
// requests) with Retry-After and the x-ratelimit-* headers OpenAI clients
// back off on, nothing reaches the upstream, and the span and
// hopgate_requests_total say rate_limited; once the window drains the
// tenant is served again.
func TestTenantRPMLimit(t *testing.T) {
	gw := limited(t, "    - {tenant: team-a, rpm: 2}\n")
	body := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for i := 0; i < 2; i++ {
		if resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, m)
		}
	}
	resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body)
	e, _ := m["error"].(map[string]any)
	if resp.StatusCode != 429 || e == nil || e["code"] != "rate_limit_exceeded" || e["type"] != "requests" {
		t.Fatalf("third: %d %v", resp.StatusCode, m)
	}
	for h, want := range map[string]string{
		"Retry-After":                    "30", // two requests of 2 per minute: the first drains in 30 s
		"X-Ratelimit-Limit-Requests":     "2",
		"X-Ratelimit-Remaining-Requests": "0",
		"X-Ratelimit-Reset-Requests":     "1m0s",
		"X-Hopgate-Attempts":             "0",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if msg, _ := e["message"].(string); !strings.Contains(msg, "limit 2 requests per minute") {
		t.Errorf("message %q", msg)
	}
	if n := len(gw.Ups["a"].Log()); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", n)
	}
	// The SERVER span says the refusal (outcome, code, tenant) and the
	// window that refused it (the event).
	attrs, event := map[string]string{}, map[string]string{}
	for _, s := range gw.Trace(resp.Header.Get("X-Request-Id")) {
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		for _, ev := range s.Events {
			if ev.Name == telemetry.EventRateLimited {
				for _, a := range ev.Attributes {
					event[string(a.Key)] = a.Value.Emit()
				}
			}
		}
	}
	if attrs[telemetry.AttrOutcome] != telemetry.OutcomeRateLimited || attrs[telemetry.AttrErrorCode] != "rate_limit_exceeded" || attrs[telemetry.AttrTenant] != "team-a" {
		t.Errorf("span attributes %v", attrs)
	}
	if event[telemetry.AttrRateLimitKind] != "requests" || event[telemetry.AttrRateLimitScope] != "team-a" ||
		event[telemetry.AttrRateLimitLimit] != "2" || event[telemetry.AttrRateLimitRetryMS] != "30000" {
		t.Errorf("event %s: %v", telemetry.EventRateLimited, event)
	}
	metrics := scrapeMetrics(t, gw)
	for _, want := range []string{
		`hopgate_requests_total{model="m",operation="chat",outcome="rate_limited",region=""} 1`,
		`hopgate_tenant_ratelimited_total{kind="requests",model="m",region=""} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	gw.Clock.Advance(30 * time.Second)
	if resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body); resp.StatusCode != 200 {
		t.Fatalf("after the window drained: %d %v", resp.StatusCode, m)
	}
}

// Why: a stream cut without a usage report settles TPM with the wallet's
// estimate, the input from the body's size and the output from what was
// delivered. The engine lets go of the body once the stream commits, so
// the settle must not read it then: it counted no input at all.
func TestTenantTPMCutStreamSettlesTheInputEstimate(t *testing.T) {
	gw := limitedAs(t, "m|tokens=60|cut=40", "    - {tenant: team-a, tpm: 10000}\n")
	body := `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("x", 800) + `"}]}`
	resp, b := send(t, gw, "POST", "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + clientKey}, body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "upstream_stream_interrupted") {
		t.Fatalf("want a cut stream: %d %s", resp.StatusCode, b)
	}
	in, out := (len(body)+3)/4, (len(gwtest.StreamText(string(b)))+3)/4
	probe := `{"model":"m","max_tokens":9990,"messages":[{"role":"user","content":"hi"}]}`
	resp, _ = do(t, gw, "POST", "/v1/chat/completions", clientKey, probe)
	if want := strconv.Itoa(10000 - in - out); resp.StatusCode != 429 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != want {
		t.Fatalf("probe %d: remaining %q, want %s (input estimate %d, output estimate %d)",
			resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), want, in, out)
	}
}

// Why: TPM reserves the estimate (body/4 plus max_tokens) and settles
// with the reported usage, so a small answer leaves the window for the
// next requests; a request whose estimate alone exceeds the limit is
// told so.
func TestTenantTPMLimitSettles(t *testing.T) {
	gw := limited(t, "    - {tenant: team-a, tpm: 1000}\n")
	body := `{"model":"m","max_tokens":600,"messages":[{"role":"user","content":"hi"}]}`
	// Each reserves about 620 tokens and uses a few: without the settle
	// the second would not fit in 1000.
	for i := 0; i < 3; i++ {
		if resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %v", i+1, resp.StatusCode, m)
		}
	}
	// The window holds exactly the usage reported: not the estimates
	// (settled down) and not nothing (Release is for refusals).
	resp, m := do(t, gw, "POST", "/v1/chat/completions", clientKey, body)
	u, _ := m["usage"].(map[string]any)
	total, _ := u["total_tokens"].(float64)
	if resp.StatusCode != 200 || total <= 0 {
		t.Fatalf("fourth: %d %v", resp.StatusCode, m)
	}
	probe := `{"model":"m","max_tokens":970,"messages":[{"role":"user","content":"hi"}]}`
	resp, _ = do(t, gw, "POST", "/v1/chat/completions", clientKey, probe)
	if want := strconv.Itoa(1000 - 4*int(total)); resp.StatusCode != 429 || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != want {
		t.Fatalf("probe %d: remaining %q, want %s (four answers of %v tokens)", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining-Tokens"), want, total)
	}
	big := `{"model":"m","max_tokens":5000,"messages":[{"role":"user","content":"hi"}]}`
	resp, m = do(t, gw, "POST", "/v1/chat/completions", clientKey, big)
	e, _ := m["error"].(map[string]any)
	if resp.StatusCode != 429 || e == nil || e["type"] != "tokens" || !strings.Contains(e["message"].(string), "larger than the limit") {
		t.Fatalf("too large: %d %v", resp.StatusCode, m)
	}
	if resp.Header.Get("X-Ratelimit-Limit-Tokens") != "1000" || resp.Header.Get("X-Ratelimit-Limit-Requests") != "" ||
		resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("headers %v", resp.Header)
	}
	// A request that only has to wait may be retried.
	if resp, _ := do(t, gw, "POST", "/v1/chat/completions", clientKey, probe); resp.StatusCode != 429 || resp.Header.Get("X-Should-Retry") != "" {
		t.Fatalf("probe again: %d %v", resp.StatusCode, resp.Header)
	}
}

// Why: a per-model limit holds that model only; limits answer on
// /v1/messages in Anthropic's error shape (rate_limit_error), which the
// Anthropic SDKs retry on.
func TestTenantModelLimitAnthropicShape(t *testing.T) {
	gw := limited(t, "    - {tenant: team-a, model: m, rpm: 1}\n")
	msg := func(model string) string {
		return `{"model":"` + model + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	}
	xKey := map[string]string{"x-api-key": clientKey}
	if resp, m := doAnthropic(t, gw, "POST", "/v1/messages", xKey, msg("m")); resp.StatusCode != 200 {
		t.Fatalf("first: %d %v", resp.StatusCode, m)
	}
	resp, m := doAnthropic(t, gw, "POST", "/v1/messages", xKey, msg("m"))
	e, _ := m["error"].(map[string]any)
	if resp.StatusCode != 429 || m["type"] != "error" || e == nil || e["type"] != "rate_limit_error" ||
		!strings.HasPrefix(e["message"].(string), "rate_limit_exceeded: ") || resp.Header.Get("Retry-After") != "60" {
		b, _ := json.Marshal(m)
		t.Fatalf("second: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	if resp, m := doAnthropic(t, gw, "POST", "/v1/messages", xKey, msg("n")); resp.StatusCode != 200 {
		t.Fatalf("model n is not limited: %d %v", resp.StatusCode, m)
	}
}

package dispatch_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestPersistent503 is the acceptance story of L1+L2: the cheapest channel
// fails persistently; callers never notice; the channel sees exactly 3
// attempts, then nothing for the cooldown, then one trial; once it
// recovers, one successful trial brings traffic back.
func TestPersistent503(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	if err := h.Ups["a"].SetFault("m", "503"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		r := h.Post(chat(false))
		if r.Status != 200 {
			t.Fatalf("request %d: status %d %s", i, r.Status, r.Body)
		}
		if got := r.Header.Get("X-Hopgate-Model"); got != "m" {
			t.Fatalf("X-Hopgate-Model = %q", got)
		}
	}
	if got := h.Attempts("a", "m"); got != 3 {
		t.Fatalf("failing channel saw %d attempts, want exactly 3 before opening", got)
	}
	r := h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" {
		t.Fatalf("path while open = %q", p)
	}
	if r.Header.Get("X-Hopgate-Attempts") != "1" {
		t.Fatalf("a skip must cost no upstream attempt; attempts=%s", r.Header.Get("X-Hopgate-Attempts"))
	}

	// Cooldown over: exactly one trial, which fails and re-opens.
	h.Clock.Advance(60 * time.Second)
	for i := 0; i < 3; i++ {
		if r := h.Post(chat(false)); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
	}
	if got := h.Attempts("a", "m"); got != 4 {
		t.Fatalf("after cooldown the channel saw %d attempts, want 4 (one trial)", got)
	}

	// The channel recovers; after the next cooldown one trial closes it.
	if err := h.Ups["a"].SetFault("m", ""); err != nil {
		t.Fatal(err)
	}
	h.Clock.Advance(60 * time.Second)
	for i := 0; i < 3; i++ {
		r := h.Post(chat(false))
		if p := r.Header.Get("X-Hopgate-Path"); p != "a:ok" {
			t.Fatalf("request %d after recovery: path %q, want a:ok", i, p)
		}
	}
	if got := h.Ups["b"].Attempts("m"); got != 10 {
		t.Fatalf("fallback channel served %d, want 10", got)
	}
}

// TestFlappingChannel: a channel down for 45 s under a steady stream of
// requests (one every 5 s): every request is answered, and the cheapest
// channel carries traffic again within one cooldown of recovering.
func TestFlappingChannel(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|flap=45s", "m", ""), "a", "b")
	recoveredAt := 45 * time.Second
	var backOnA time.Duration = -1
	for elapsed := time.Duration(0); elapsed <= 3*time.Minute; elapsed += 5 * time.Second {
		r := h.Post(chat(false))
		if r.Status != 200 {
			t.Fatalf("t=%v: status %d %s", elapsed, r.Status, r.Body)
		}
		if strings.HasSuffix(r.Header.Get("X-Hopgate-Path"), "a:ok") && elapsed >= recoveredAt && backOnA < 0 {
			backOnA = elapsed
		}
		h.Clock.Advance(5 * time.Second)
		h.UpClock.Advance(5 * time.Second)
	}
	if backOnA < 0 || backOnA-recoveredAt > 60*time.Second+5*time.Second {
		t.Fatalf("cheapest channel back at %v, recovered at %v: want within one cooldown", backOnA, recoveredAt)
	}
}

// TestFinalErrorsComeBackAtOnce: a client's 400 (and a content filter) is
// returned after exactly one attempt, unchanged, with no breaker effect.
func TestFinalErrorsComeBackAtOnce(t *testing.T) {
	for _, fault := range []string{"m|400", "m|content-filter", "m|422", "m|context-length"} {
		t.Run(fault, func(t *testing.T) {
			h := gwtest.New(t, twoChannels(fault, "m", ""), "a", "b")
			for i := 0; i < 5; i++ {
				r := h.Post(chat(false))
				want := 400
				if fault == "m|422" {
					want = 422
				}
				if r.Status != want {
					t.Fatalf("status %d, want %d: %s", r.Status, want, r.Body)
				}
				if !strings.Contains(r.Body, `"error"`) {
					t.Fatalf("upstream body not passed through: %s", r.Body)
				}
			}
			if got := h.Attempts("a", fault); got != 5 {
				t.Fatalf("a saw %d attempts, want 5 (one per request, breaker untouched)", got)
			}
			if got := h.Attempts("b", "m"); got != 0 {
				t.Fatalf("b saw %d attempts, want 0", got)
			}
		})
	}
}

// TestRetryableFailuresMoveOn: every retryable kind of DESIGN.md §3 moves to
// the next channel within the same request, named by its label on the
// failover path, and counts as a breaker failure.
func TestRetryableFailuresMoveOn(t *testing.T) {
	for fault, label := range map[string]string{
		"m|reset": "reset", "m|401": "401", "m|402": "402", "m|403": "403", "m|429": "429", "m|500": "500",
		"m|502": "502", "m|504": "504", "m|529": "529", "m|error-body": "error_body", "m|bad-json": "bad_json",
		"m|short-body": "short_body", "m|redirect": "302",
	} {
		t.Run(fault, func(t *testing.T) {
			h := gwtest.New(t, twoChannels(fault, "m", ""), "a", "b")
			for i := 0; i < 4; i++ {
				r := h.Post(chat(false))
				if r.Status != 200 || !strings.Contains(r.Body, upstream.Answer(upstream.DefaultTokens)) {
					t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
				}
				if p, want := r.Header.Get("X-Hopgate-Path"), "a:"+label+" -> b:ok"; i < 3 && p != want {
					t.Fatalf("request %d: path %q, want %q", i, p, want)
				}
			}
			// Three failures open the breaker: the fourth request skipped a.
			if got := h.Attempts("a", fault); got != 3 {
				t.Fatalf("a saw %d attempts, want 3", got)
			}
		})
	}
}

// TestRetryAfterKeepsChannelOut: a 429 with Retry-After keeps the channel
// out of chains for that long even below the failure threshold.
func TestRetryAfterKeepsChannelOut(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|429:ra=7-once", "m", ""), "a", "b")
	r := h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:429 -> b:ok" {
		t.Fatalf("first: %d %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
	r = h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" {
		t.Fatalf("within Retry-After: path %q, want a skipped", p)
	}
	h.Clock.Advance(7 * time.Second)
	r = h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:ok" {
		t.Fatalf("after Retry-After: path %q, want a:ok", p)
	}
}

// TestSameChannelRetryHonoursRetryAfter: with retries, a channel that
// says when to come back is retried after its Retry-After when that is
// within retry_after_max (5 s by default); one that asks for longer is not
// waited for: the next entry answers at once (DESIGN.md §2 L2).
func TestSameChannelRetryHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name, fault string
		wait        time.Duration // 0: no retry expected
		path        string
	}{
		{"within retry_after_max", "m|429:ra=3-once", 3 * time.Second, "a:429 -> a:ok"},
		{"beyond retry_after_max", "m|429:ra=7-once", 0, "a:429 -> b:ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(twoChannels(tc.fault, "m", ""),
				"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 1}", 1)
			h := gwtest.New(t, cfg, "a", "b")
			done := h.Async(chat(false))
			if tc.wait > 0 {
				h.WaitSpanEnd(telemetry.SpanAwaitHeaders, 1) // a's 429 arrived
				h.WaitTimers(1)                              // the backoff
				h.Clock.Advance(tc.wait)
			}
			r := testkit.Recv(t, done, "the reply")
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != tc.path {
				t.Fatalf("status %d path %q, want %q", r.Status, r.Header.Get("X-Hopgate-Path"), tc.path)
			}
			// The backoff is the Retry-After exactly (none when too long),
			// besides the default header timeout of each hop.
			if tc.wait > 0 {
				h.WantArmed(tc.wait, 240*time.Second)
			} else {
				h.WantArmed(240 * time.Second)
			}
		})
	}
}

// TestExhaustion: when every channel fails the client gets the documented
// code; a status shared by every hop is passed on (429 everywhere → 429).
func TestExhaustion(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|503", "m|500", ""), "a", "b")
	r := h.Post(chat(false))
	if r.Status != 502 || !strings.Contains(r.Body, `"all_channels_failed"`) {
		t.Fatalf("mixed failures: %d %s", r.Status, r.Body)
	}
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:503 -> b:500" {
		t.Fatalf("path %q", p)
	}
	h2 := gwtest.New(t, twoChannels("m|429", "m|429", ""), "a", "b")
	r = h2.Post(chat(false))
	if r.Status != 429 || !strings.Contains(r.Body, `"all_channels_failed"`) {
		t.Fatalf("shared 429: %d %s", r.Status, r.Body)
	}
	var e struct {
		Error     struct{ Code, Type, Message string }
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(r.Body), &e); err != nil || e.RequestID == "" || e.RequestID != r.Header.Get("X-Request-Id") {
		t.Fatalf("error shape / request id: %v %s", err, r.Body)
	}
	// A status shared by every hop is passed on only when it is an error:
	// a redirect everywhere is no answer to pass on.
	h3 := gwtest.New(t, twoChannels("m|redirect", "m|redirect", ""), "a", "b")
	if r = h3.Post(chat(false)); r.Status != 502 || !strings.Contains(r.Body, `"all_channels_failed"`) {
		t.Fatalf("shared redirect: %d %s", r.Status, r.Body)
	}
}

// TestFullyOpenChainStillTries: when every channel is open the request
// still tries the one whose cooldown ends first, and says so.
func TestFullyOpenChainStillTries(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	for _, id := range []string{"a", "b"} {
		if err := h.Ups[id].SetFault("m", "503"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		h.Post(chat(false))
		h.Clock.Advance(time.Second)
	}
	// Both open now; a opened first, so its cooldown ends first.
	if err := h.Ups["a"].SetFault("m", ""); err != nil {
		t.Fatal(err)
	}
	r := h.Post(chat(false))
	if r.Status != 200 {
		t.Fatalf("fully open chain: %d %s", r.Status, r.Body)
	}
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:open -> b:open -> a:forced -> a:ok" {
		t.Fatalf("path %q", p)
	}
}

// TestClientCancelDoesNotCount: a client that leaves while the upstream is
// working cancels the upstream call and never counts as a breaker failure.
func TestClientCancelDoesNotCount(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|no-headers", "m", ""), "a", "b")
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/v1/chat/completions", strings.NewReader(chat(false)))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
		}()
		h.WaitAttempts("a", "m|no-headers", i+1) // the upstream holds the request
		cancel()
		testkit.Recv(t, done, "the request's end")
		h.WaitNoTimers()
	}
	if got := h.Attempts("a", "m|no-headers"); got != 4 {
		t.Fatalf("a saw %d attempts, want 4 (cancellations never open the breaker)", got)
	}
	if got := h.Attempts("b", "m"); got != 0 {
		t.Fatalf("b saw %d attempts: a cancelled request must not fail over", got)
	}
}

// TestHeaderTimeoutFailsOver: an upstream that never sends headers costs
// header_timeout (a real timer on the gateway clock), then the next channel
// answers; the channel is never retried after a header timeout.
func TestHeaderTimeoutFailsOver(t *testing.T) {
	cfg := strings.Replace(twoChannels("m|no-headers", "m", "    policy: {header_timeout: 10s}\n"),
		"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 2}", 1)
	h := gwtest.New(t, cfg, "a", "b")
	done := h.Async(chat(true))
	h.WaitAttempts("a", "m|no-headers", 1)
	h.WaitTimers(1)
	h.Clock.Advance(9 * time.Second)
	select {
	case r := <-done:
		t.Fatalf("answered before the header timeout: %d %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	default:
	}
	h.Clock.Advance(time.Second)
	r := testkit.Recv(t, done, "the reply")
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:header_timeout -> b:ok" {
		t.Fatalf("status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
	if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
		t.Fatalf("answer %q", got)
	}
	if got := h.Attempts("a", "m|no-headers"); got != 1 {
		t.Fatalf("a saw %d attempts: no same-channel retry after a header timeout", got)
	}
	h.WantArmed(10*time.Second, 30*time.Second) // the header timeout (a, b); b's gate
	// hopgate_header_timeouts_total feeds the failover board's tile.
	rec := httptest.NewRecorder()
	h.Tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !regexp.MustCompile(`(?m)^hopgate_header_timeouts_total\{[^}]*channel="a"[^}]*\} 1$`).MatchString(rec.Body.String()) {
		t.Fatalf("no header timeout counted for a:\n%s", rec.Body.String())
	}
}

// TestOpenChainWithFallbackSendsNothing: while an opt-in fallback model can
// answer, an open channel gets no forced trial (the breaker sheds load), and
// the answer names the model that served it.
func TestOpenChainWithFallbackSendsNothing(t *testing.T) {
	h := gwtest.New(t, `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    fallback_models: [m2]
    chain:
      - {channel: a, upstream_model: "m|503", price: {input: 1, output: 1}}
  - name: m2
    chain:
      - {channel: b, upstream_model: m2, price: {input: 1, output: 1}}
`, "a", "b")
	for i := 0; i < 3; i++ {
		if r := h.Post(chat(false)); r.Status != 200 || r.Header.Get("X-Hopgate-Model") != "m2" {
			t.Fatalf("request %d: %d model %q", i, r.Status, r.Header.Get("X-Hopgate-Model"))
		}
	}
	r := h.Post(chat(false))
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "1" {
		t.Fatalf("path %q attempts %s: an open channel must get nothing while a fallback answers", p, r.Header.Get("X-Hopgate-Attempts"))
	}
	if r.Header.Get("X-Hopgate-Model") != "m2" || !strings.Contains(r.Body, `"model":"m2"`) {
		t.Fatalf("served model not visible: %q %s", r.Header.Get("X-Hopgate-Model"), r.Body)
	}
	if got := h.Attempts("a", "m|503"); got != 3 {
		t.Fatalf("open channel saw %d attempts, want 3", got)
	}
}

// TestExhaustionPassesRetryAfter: when every hop answered 429 with
// Retry-After, the client gets the shared 429 with the soonest Retry-After,
// so an SDK that honours it waits as long as the providers asked.
func TestExhaustionPassesRetryAfter(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|429:ra=9", "m|429:ra=7", ""), "a", "b")
	r := h.Post(chat(false))
	if r.Status != 429 || r.Header.Get("Retry-After") != "7" {
		t.Fatalf("status %d Retry-After %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
}

// TestGenAIMetricsPerHop: the GenAI client metrics count every operation
// against a provider — the failed hop with error.type, the serving hop
// without — so GenAI error rates per provider are not zero during an incident.
func TestGenAIMetricsPerHop(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|503", "m", ""), "a", "b")
	if r := h.Post(chat(false)); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	rec := httptest.NewRecorder()
	h.Tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var failed, served bool
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if !strings.HasPrefix(line, telemetry.PromGenAIDuration+"_count{") {
			continue
		}
		switch {
		case strings.Contains(line, `error_type="503"`) && strings.Contains(line, `gen_ai_request_model="m|503"`):
			failed = true
		case !strings.Contains(line, "error_type") && strings.Contains(line, `gen_ai_request_model="m"`):
			served = true
		}
	}
	if !failed || !served {
		t.Fatalf("failed hop recorded %v, serving hop recorded %v:\n%s", failed, served, rec.Body.String())
	}
}

// quotesKey refuses the credential it was sent and quotes it back, as
// some providers do ("Incorrect API key provided: sk-…").
// quotesKey refuses the key and quotes it back, after pad bytes of prose:
// with a pad near provider.ErrorDetail's 300-byte cut, the key straddles it.
type quotesKey struct{ pad int }

func (q quotesKey) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"error":{"message":"` + strings.Repeat("x", q.pad) + `Incorrect API key provided: ` + key + `","type":"invalid_request_error","code":"invalid_api_key"}}`))
}

// TestRefusedCredentialIsRedacted: the provider's words about a refused
// credential go on the hop's span (so on-call sees why), but never the
// credential itself (DESIGN.md §5: never record credentials).
func TestRefusedCredentialIsRedacted(t *testing.T) {
	// pad 0: the whole key is quoted. A pad that puts the key across the
	// detail's 300-byte cut: no part of it may survive the cut either.
	straddle := 300 - len("Incorrect API key provided: ") - len(channelKey)/2
	for _, pad := range []int{0, straddle} {
		refusedCredentialIsRedacted(t, pad, pad == 0)
	}
}

func refusedCredentialIsRedacted(t *testing.T, pad int, whole bool) {
	h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": quotesKey{pad: pad}}}, twoChannels("m", "m", ""), "b")
	r := h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:401 -> b:ok" {
		t.Fatalf("%d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
	}
	half := channelKey[:len(channelKey)/2]
	var sawDetail bool
	for _, sp := range h.Trace(r.Header.Get("X-Request-Id")) {
		texts := []string{sp.Status.Description}
		for _, kv := range sp.Attributes {
			texts = append(texts, kv.Value.Emit())
		}
		for _, ev := range sp.Events {
			for _, kv := range ev.Attributes {
				texts = append(texts, kv.Value.Emit())
			}
		}
		for _, s := range texts {
			if strings.Contains(s, half) {
				t.Fatalf("pad %d: span %q records (part of) the credential: %q", pad, sp.Name, s)
			}
			sawDetail = sawDetail || strings.Contains(s, "Incorrect API key provided: [redacted]") ||
				(!whole && strings.Contains(s, "Incorrect API key provided: "))
		}
	}
	if !sawDetail {
		t.Fatal("the provider's refusal is not on the hop's span")
	}
	if strings.Contains(h.Logs.String(), channelKey) {
		t.Fatal("the request log records the credential")
	}
}

// TestFallbackServesTheOperation: an opt-in fallback model that does not
// serve the request's operation is passed over, as the front door would
// refuse it if asked by name: a chat request never reaches an embeddings
// model's channels. (A fallback serving none of the model's operations
// does not load; this one serves the model's embeddings.)
func TestFallbackServesTheOperation(t *testing.T) {
	h := gwtest.New(t, `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY}
  - {id: c, base_url: "{{url:c}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    operations: [chat, embeddings]
    fallback_models: [emb, m2]
    chain:
      - {channel: a, upstream_model: "m|503"}
  - name: emb
    operations: [embeddings]
    chain:
      - {channel: b, upstream_model: emb}
  - name: m2
    chain:
      - {channel: c, upstream_model: m2}
`, "a", "b", "c")
	r := h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Model") != "m2" || r.Header.Get("X-Hopgate-Path") != "a:503 -> c:ok" {
		t.Fatalf("status %d model %q path %q", r.Status, r.Header.Get("X-Hopgate-Model"), r.Header.Get("X-Hopgate-Path"))
	}
	if n := h.Attempts("b", "emb"); n != 0 {
		t.Fatalf("the embeddings model's channel got %d chat requests", n)
	}
}

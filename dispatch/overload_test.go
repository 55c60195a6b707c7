package dispatch_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// keepAlives answers a stream with n SSE comments (held by the gate: not
// decisive) before its answer: a gate that must buffer.
type keepAlives struct{ n int }

func (k keepAlives) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i := 0; i < k.n; i++ {
		_, _ = w.Write([]byte(": keep-alive\n\n"))
	}
	_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"))
}

// TestBufferBudgetFailsTheHopOver: a hop whose buffer would cross the
// process's budget (a huge non-streaming answer, a gate holding too many
// frames) fails as retryable with its own label, and the next channel,
// which fits, answers; nothing stays held afterwards.
func TestBufferBudgetFailsTheHopOver(t *testing.T) {
	budget := overload.NewBudget(4 << 10)
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget}, twoChannels("m|tokens=3000", "m|tokens=5", ""), "a", "b")
	r := h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:buffer_budget -> b:ok" {
		t.Fatalf("status %d path %q: %.200s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "the budget back to zero")

	budget = overload.NewBudget(512)
	h = gwtest.NewWith(t, gwtest.Options{Budget: budget, Custom: map[string]http.Handler{"a": keepAlives{n: 60}}},
		twoChannels("m", "m", ""), "b")
	r = h.Post(chat(true))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:buffer_budget -> b:ok" {
		t.Fatalf("gate: status %d path %q: %.200s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "the budget back to zero")
}

// TestBufferBudgetIsNotTheChannels: a hop failed at the buffer budget is
// the gateway's overload, not a verdict on the channel: however often it
// happens, the channel's breaker counts nothing (an overloaded gateway
// would otherwise open every breaker it has).
func TestBufferBudgetIsNotTheChannels(t *testing.T) {
	budget := overload.NewBudget(4 << 10)
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget}, twoChannels("m|tokens=3000", "m|tokens=5", ""), "a", "b")
	for range 4 { // more than the breaker's 3 failures
		if r := h.Post(chat(false)); r.Header.Get("X-Hopgate-Path") != "a:buffer_budget -> b:ok" {
			t.Fatalf("path %q", r.Header.Get("X-Hopgate-Path"))
		}
	}
	for _, br := range h.Engine.Breakers().All() {
		if s := br.Snapshot(); s.Failures != 0 || br.State().String() != "closed" {
			t.Fatalf("breaker %s: %d failures, %s, for hops failed at the buffer budget", s.Name, s.Failures, br.State())
		}
	}
}

// bigFinal answers a final 400 whose error body is 8 KiB.
type bigFinal struct{}

func (bigFinal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(`{"error":{"message":"` + strings.Repeat("x", 8<<10) + `","type":"invalid_request_error","code":null}}`))
}

// TestBufferBudgetFinalAnswer: a final answer the process cannot hold to
// pass on fails the hop as retryable like any other buffer (DESIGN.md
// §13); before, the client got the upstream's 400 with an empty body.
func TestBufferBudgetFinalAnswer(t *testing.T) {
	budget := overload.NewBudget(4 << 10)
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget, Custom: map[string]http.Handler{"a": bigFinal{}}}, twoChannels("m", "m", ""), "b")
	r := h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:buffer_budget -> b:ok" {
		t.Fatalf("status %d path %q: %.200s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "the budget back to zero")
}

// panicky panics instead of sending a request to host boom.invalid.
type panicky struct{ next http.RoundTripper }

func (p panicky) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == "boom.invalid" {
		panic("a bug in the transport")
	}
	return p.next.RoundTrip(r)
}

// TestBudgetReturnsToZero: whatever the path — success, a failed hop, a
// final error, the client leaving mid-stream, a panic — every byte held
// against the budget and every admission slot comes back.
func TestBudgetReturnsToZero(t *testing.T) {
	budget := overload.NewBudget(64 << 20)
	adm := overload.NewAdmission(100, 10)
	held := newHeldStream(t)
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget, Admission: adm, Custom: map[string]http.Handler{"held": held},
		WrapTransport: func(next http.RoundTripper) http.RoundTripper { return panicky{next} }}, `
auth: {mode: none}
channels:
  - {id: held, base_url: "{{url:held}}"}
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY}
  - {id: boom, base_url: "http://boom.invalid/v1"}
models:
  - {name: m, chain: [{channel: held, upstream_model: m}]}
  - {name: ok, chain: [{channel: a, upstream_model: ok}]}
  - name: fail
    chain: [{channel: a, upstream_model: "m|503"}, {channel: b, upstream_model: "m|error-body"}]
  - {name: final, chain: [{channel: a, upstream_model: "m|400"}]}
  - {name: boom, chain: [{channel: boom, upstream_model: boom}]}
`, "a", "b")
	held.releaseAtEnd(t)
	zero := func(what string) {
		t.Helper()
		testkit.Eventually(t, func() bool {
			return budget.Used() == 0 && adm.InFlight() == 0 && adm.Streams() == 0
		}, what+": budget and admission back to zero")
	}
	for _, body := range []string{gwtest.ChatBody("fail", false), gwtest.ChatBody("fail", true), gwtest.ChatBody("final", false), gwtest.ChatBody("final", true)} {
		if r := h.Post(body); r.Status < 400 {
			t.Fatalf("%s: status %d", body, r.Status)
		}
		zero(body)
	}
	for _, stream := range []bool{false, true} {
		if r := h.Post(gwtest.ChatBody("ok", stream)); r.Status != 200 {
			t.Fatalf("success (stream %v): %d %.200s", stream, r.Status, r.Body)
		}
		zero("a success")
	}

	// The client leaves mid-stream.
	ctx, cancel := context.WithCancel(context.Background())
	resp := h.Open(ctx, chat(true))
	testkit.Recv(t, held.opened, "the stream")
	gwtest.ReadTokens(t, sse.NewReader(resp.Body, 0), 0)
	if adm.Streams() != 1 || adm.InFlight() != 1 {
		t.Fatalf("while streaming: %d streams, %d in flight", adm.Streams(), adm.InFlight())
	}
	// Committed: its request body is let go, the gate holds nothing.
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "a committed stream holding nothing of the budget")
	cancel()
	resp.Body.Close()
	zero("a client gone mid-stream")

	// A panic in the request path: net/http recovers it and breaks the
	// connection; the deferred releases still run.
	if r, err := h.Call(context.Background(), "/v1/chat/completions", "application/json", []byte(gwtest.ChatBody("boom", false))); err == nil && r.Status < 500 {
		t.Fatalf("panic: status %d", r.Status)
	}
	zero("a panic")
}

// TestCommittedStreamSurvivesShedding: at the stream bound a new stream is
// shed at once (503 engine_overloaded with Retry-After) and /readyz says
// overloaded, while the committed stream goes on to its end; a request
// that does not stream still passes, and readiness comes back.
func TestCommittedStreamSurvivesShedding(t *testing.T) {
	held := newHeldStream(t)
	h := gwtest.Start(t, gwtest.Options{Custom: map[string]http.Handler{"held": held}}, `
listen: "{{listen}}"
admin_listen: "{{admin}}"
auth: {mode: none}
overload: {max_streams: 1, max_in_flight: 10}
channels:
  - {id: held, base_url: "{{url:held}}"}
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - {name: m, chain: [{channel: held, upstream_model: m}]}
  - {name: quick, chain: [{channel: a, upstream_model: q}]}
`, "a")
	ready := func() (int, string) {
		resp, err := http.Get(h.AdminURL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	resp := h.Open(t.Context(), chat(true)) // committed
	defer resp.Body.Close()
	testkit.Recv(t, held.opened, "the stream")

	r := h.Post(chat(true))
	if r.Status != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Body, `"engine_overloaded"`) {
		t.Fatalf("second stream: %d retry-after %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if got := r.Header.Get("X-Hopgate-Shed"); got != "streams" {
		t.Fatalf("second stream: X-Hopgate-Shed %q, want the reason %q", got, "streams")
	}
	// On-call reads a shed as such, not as the client's mistake.
	var outcome string
	for _, sp := range h.Trace(r.Header.Get("X-Request-Id")) {
		if sp.SpanKind == trace.SpanKindServer {
			for _, kv := range sp.Attributes {
				if kv.Key == telemetry.AttrOutcome {
					outcome = kv.Value.AsString()
				}
			}
		}
	}
	if outcome != telemetry.OutcomeShed {
		t.Errorf("the shed request's trace says outcome %q, want %q", outcome, telemetry.OutcomeShed)
	}
	if !strings.Contains(h.Logs.String(), `"outcome":"shed"`) {
		t.Errorf("no request log line with outcome shed")
	}
	if code, body := ready(); code != 503 || !strings.Contains(body, "overloaded: streams") {
		t.Fatalf("readyz at the bound: %d %q", code, body)
	}
	if r := h.Post(gwtest.ChatBody("quick", false)); r.Status != 200 {
		t.Fatalf("a non-streaming request at the stream bound: %d %s", r.Status, r.Body)
	}
	held.Release()
	rest, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if !strings.Contains(string(rest), `"last"`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the committed stream was not completed: %q", rest)
	}
	testkit.Eventually(t, func() bool { code, _ := ready(); return code == 200 }, "readiness back")
}

// heldStream answers one content chunk at once, then holds the stream
// open until release is closed (or the client leaves), then finishes it:
// a committed stream that stays open as long as the test needs.
type heldStream struct {
	release chan struct{}
	opened  chan struct{}
	once    sync.Once
}

// newHeldStream's streams are released when the test ends at the latest,
// so a failing test does not hang its gateway's shutdown.
func newHeldStream(t *testing.T) *heldStream {
	s := &heldStream{release: make(chan struct{}), opened: make(chan struct{}, 16)}
	t.Cleanup(s.Release)
	return s
}

// releaseAtEnd releases held streams before the gateway's own cleanup
// (registered earlier, run later) waits for their connections.
func (s *heldStream) releaseAtEnd(t *testing.T) { t.Cleanup(s.Release) }

// Release lets every held stream finish.
func (s *heldStream) Release() { s.once.Do(func() { close(s.release) }) }

func (s *heldStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk := func(delta, finish string) {
		_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finish + `}]}` + "\n\n"))
		_ = http.NewResponseController(w).Flush()
	}
	chunk(`{"content":"first "}`, "null")
	s.opened <- struct{}{}
	select {
	case <-s.release:
	case <-r.Context().Done():
		return
	}
	chunk(`{"content":"last"}`, `"stop"`)
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

// heldThenOpen answers a stream with n SSE comments (held by the gate),
// then its first token, and stays open until released or cancelled.
type heldThenOpen struct {
	n       int
	opened  chan struct{}
	release chan struct{}
}

func (s *heldThenOpen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i := 0; i < s.n; i++ {
		_, _ = w.Write([]byte(": keep-alive\n\n"))
	}
	_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"first "},"finish_reason":null}]}` + "\n\n"))
	_ = http.NewResponseController(w).Flush()
	s.opened <- struct{}{}
	select {
	case <-s.release:
	case <-r.Context().Done():
		return
	}
	_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"last"},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"))
}

// TestCommittedStreamReleasesHeldFrames: the frames the gate held before
// its decisive one count against the budget until the commit is written:
// an open stream holds nothing of it, and once the stream ends the budget
// is back to exactly zero (the hold is given back once, not by the gate
// and again by the Answer that took it over).
func TestCommittedStreamReleasesHeldFrames(t *testing.T) {
	budget := overload.NewBudget(64 << 20)
	up := &heldThenOpen{n: 8, opened: make(chan struct{}, 1), release: make(chan struct{})}
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget, Custom: map[string]http.Handler{"a": up}}, twoChannels("m", "m", ""), "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := h.Open(ctx, chat(true))
	defer resp.Body.Close()
	testkit.Recv(t, up.opened, "the stream")
	rd := sse.NewReader(resp.Body, 0)
	for {
		f, err := rd.Next()
		if err != nil {
			t.Fatalf("before the first token: %v", err)
		}
		if strings.Contains(string(f.Data), "first") {
			break
		}
	}
	// The commit is out: neither its held frames nor the request body stay
	// held while the stream is open.
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "an open stream holding nothing of the budget")
	close(up.release)
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("the stream's end: %v %q", err, b)
	}
	// Given back exactly once: a second release would take it below zero.
	testkit.Eventually(t, func() bool { return budget.Used() == 0 }, "the budget back to zero")
}

// TestRefusalReleasesAdmission: a request refused at the front door (a
// body that is not JSON, a model it does not name, a stream over a bad
// body) gives back its admission slot, its open-stream slot and its
// body's bytes (api's exchange.begin releases what it took on a refusal).
func TestRefusalReleasesAdmission(t *testing.T) {
	budget := overload.NewBudget(64 << 20)
	adm := overload.NewAdmission(100, 10)
	h := gwtest.NewWith(t, gwtest.Options{Budget: budget, Admission: adm}, twoChannels("m", "m", ""), "a", "b")
	for _, body := range []string{`{"model":`, `{"stream":true,"messages":[]}`, `{"model":"nope","stream":true,"messages":[]}`} {
		r, err := h.Call(context.Background(), "/v1/chat/completions", "application/json", []byte(body))
		if err != nil || r.Status < 400 || r.Status >= 500 {
			t.Fatalf("%s: %v status %+v", body, err, r)
		}
		testkit.Eventually(t, func() bool {
			return budget.Used() == 0 && adm.InFlight() == 0 && adm.Streams() == 0
		}, body+": budget and admission back to zero")
	}
}

// panicOnce panics on the next request to host once armed.
type panicOnce struct {
	next http.RoundTripper
	host string
	arm  atomic.Bool
}

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host == p.host && p.arm.CompareAndSwap(true, false) {
		panic("a bug in the transport")
	}
	return p.next.RoundTrip(r)
}

// panicOnTrial starts a gateway on cfg whose channel ch is half-open (one
// trial allowed) and whose next request to ch panics once armed.
func panicOnTrial(t *testing.T, cfg, ch string) (*gwtest.Gateway, *panicOnce, *breaker.Breaker) {
	t.Helper()
	po := &panicOnce{}
	h := gwtest.NewWith(t, gwtest.Options{WrapTransport: func(next http.RoundTripper) http.RoundTripper {
		po.next = next
		return po
	}}, cfg, "a", "b")
	u, err := url.Parse(h.URLs[ch])
	if err != nil {
		t.Fatal(err)
	}
	po.host = u.Host
	br := h.Engine.Breakers().Get(ch, dispatch.BreakerPolicy(h.Config.Channel(ch).Breaker))
	br.RetryAfter(time.Second)
	h.Clock.Advance(time.Second) // half-open: one trial
	po.arm.Store(true)
	return h, po, br
}

// Why: a panic in a hop that holds a half-open channel's only trial
// ticket hands the ticket back (excluded). The walk's clean-up released
// the call but not the ticket, so the recovered channel was skipped by
// every request until the breaker's trial timeout.
func TestPanicInATrialHopAnswersTheTrial(t *testing.T) {
	h, _, br := panicOnTrial(t, twoChannels("m", "m", ""), "a")
	if _, err := h.Call(context.Background(), "/v1/chat/completions", "application/json", []byte(chat(false))); err == nil {
		t.Fatal("the panicking hop answered")
	}
	if s := br.Snapshot(); s.TrialInFlight {
		t.Errorf("after the panic a's trial slot is still taken: %+v", s)
	}
	if p := h.Post(chat(false)).Header.Get("X-Hopgate-Path"); p != "a:ok" {
		t.Errorf("the next request's path %q, want a tried (a:ok)", p)
	}
}

// Why: a panic in a mid-stream continuation (mid_stream: resume) hands
// the continuation's ticket back too: the next channel, half-open, was
// asked for its trial by the resume, and a panic there must not leave
// its only trial slot taken.
func TestPanicInAResumeAnswersTheTrial(t *testing.T) {
	h, po, br := panicOnTrial(t, resumeChannels("m|tokens=60|cut=40", "m|tokens=60", false, "    policy: {mid_stream: resume}\n"), "b")
	_, _ = h.Call(context.Background(), "/v1/chat/completions", "application/json", []byte(chat(true)))
	if po.arm.Load() {
		t.Fatal("the resume never reached b")
	}
	if s := br.Snapshot(); s.TrialInFlight {
		t.Errorf("after the panic b's trial slot is still taken: %+v", s)
	}
	h.Post(chat(true))
	if p, _ := failoverPath(t, h); p != "a:cut -> b:replay_ok" {
		t.Errorf("the next request's path %q, want b's replay tried (a:cut -> b:replay_ok)", p)
	}
}

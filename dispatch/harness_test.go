package dispatch_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/telemetry"
)

// harness is a real gateway (real listeners, real HTTP) in front of real
// fake providers, with every gateway timer on a fake clock.
type harness struct {
	t        *testing.T
	tb       testing.TB           // t, or the benchmark's B
	clock    *clockwork.FakeClock // the gateway's clock
	upClock  *clockwork.FakeClock // the providers' clock (flap, slow first token)
	ups      map[string]*upstream.Server
	cfg      *config.Config
	engine   *dispatch.Engine
	gw       *httptest.Server
	spans    *tracetest.InMemoryExporter
	tel      *telemetry.Telemetry
	channels []string
	// transport is the engine's upstream transport and client the test
	// client's: both are closed at cleanup, so goleak sees no idle conns.
	transport *http.Transport
	client    *http.Client
	ended     *spanCounter
	armed     *armedClock // the engine's view of clock: records every timer's duration
}

// harnessOptions tune one harness; the zero value is what newHarness uses.
type harnessOptions struct {
	// maxFrame is dispatch.Options.MaxFrame (0: the default).
	maxFrame int
	// custom serves these channel ids with a hand-written handler instead
	// of a fake provider, for behaviour the fault grammar cannot express.
	custom map[string]http.Handler
	// upstreamClock drives the fake providers (nil: upClock, a fake clock);
	// benchmarks pass a real clock so frame delays really elapse.
	upstreamClock clockwork.Clock
	// gatewayClock replaces the gateway's fake clock (benchmarks: the real
	// clock, whose timers cost what they cost in production).
	gatewayClock clockwork.Clock
	// otlpEndpoint exports spans over OTLP/HTTP to this base URL instead of
	// recording them in memory, as hopbench does.
	otlpEndpoint string
	// providers resolves cloud credentials (bedrock, vertex); a func of
	// the fake providers, whose URLs it may need (the token endpoint).
	providers func(ups map[string]*upstream.Server, urls map[string]string) provider.Options
}

// channelEnv is the credential every fake channel expects.
const channelKey = "sk-channel-secret-0123456789"

// newHarness starts one fake provider per channel id and a gateway whose
// config is cfgYAML with {{url:ID}} replaced by that provider's base URL.
func newHarness(t *testing.T, cfgYAML string, channels ...string) *harness {
	t.Helper()
	return newHarnessWith(t, harnessOptions{}, cfgYAML, channels...)
}

// newHarnessWith is newHarness with options.
func newHarnessWith(t testing.TB, o harnessOptions, cfgYAML string, channels ...string) *harness {
	t.Helper()
	tt, _ := t.(*testing.T)
	h := &harness{
		t:        tt,
		tb:       t,
		clock:    clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
		upClock:  clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
		ups:      map[string]*upstream.Server{},
		channels: channels,
	}
	for id, handler := range o.custom {
		srv := httptest.NewServer(handler)
		t.Cleanup(srv.Close)
		cfgYAML = strings.ReplaceAll(cfgYAML, "{{url:"+id+"}}", srv.URL+"/v1")
	}
	urls := map[string]string{}
	var upClock clockwork.Clock = h.upClock
	if o.upstreamClock != nil {
		upClock = o.upstreamClock
	}
	for _, id := range channels {
		// One key for every dialect: Bearer (openai), api-key (azure),
		// x-api-key (anthropic).
		u := upstream.New(upstream.Options{Clock: upClock, Name: id, APIKey: channelKey, AzureAPIKey: channelKey, AnthropicAPIKey: channelKey})
		srv := httptest.NewServer(u)
		t.Cleanup(func() { u.Close(); srv.Close() })
		h.ups[id] = u
		urls[id] = srv.URL
		cfgYAML = strings.ReplaceAll(cfgYAML, "{{url:"+id+"}}", srv.URL+"/v1")
		cfgYAML = strings.ReplaceAll(cfgYAML, "{{base:"+id+"}}", srv.URL)
	}
	getenv := func(k string) (string, bool) {
		if k == "CHANNEL_KEY" {
			return channelKey, true
		}
		return "", false
	}
	cfg, err := config.Parse([]byte(cfgYAML), getenv)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, cfgYAML)
	}
	h.cfg = cfg
	h.spans = tracetest.NewInMemoryExporter()
	topts := telemetry.Options{
		Region: cfg.Region, HealthyRatio: 1, SpanExporter: h.spans,
		Getenv: func(string) string { return "" },
	}
	if o.otlpEndpoint != "" {
		topts.SpanExporter = nil
		topts.Getenv = func(k string) string {
			if k == "OTEL_EXPORTER_OTLP_ENDPOINT" {
				return o.otlpEndpoint
			}
			return ""
		}
	}
	tel, err := telemetry.Setup(context.Background(), topts)
	if err != nil {
		t.Fatal(err)
	}
	h.tel = tel
	h.ended = &spanCounter{n: map[string]int{}}
	tel.TracerProvider.RegisterSpanProcessor(h.ended)
	h.transport = dispatch.NewTransport()
	h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	h.armed = &armedClock{FakeClock: h.clock}
	var gwClock clockwork.Clock = h.armed
	if o.gatewayClock != nil {
		gwClock = o.gatewayClock
	}
	var prov provider.Options
	if o.providers != nil {
		prov = o.providers(h.ups, urls)
	}
	h.engine = dispatch.New(dispatch.Options{Clock: gwClock, Telemetry: tel, Jitter: func() float64 { return 0 },
		Transport: h.transport, MaxFrame: o.maxFrame, Providers: prov})
	if err := h.engine.CheckChannels(cfg); err != nil {
		t.Fatal(err)
	}
	srv := api.New(cfg, h.engine, tel, slog.New(slog.DiscardHandler))
	h.gw = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		h.gw.Close()
		h.client.CloseIdleConnections()
		h.transport.CloseIdleConnections()
		_ = tel.Shutdown(context.Background())
	})
	return h
}

// armedClock is the gateway's fake clock, recording the duration of every
// timer the engine arms (AfterFunc, NewTimer, Reset). A fake timer fires
// exactly when its duration has passed, so "this timeout cannot fire early"
// is "it was armed with exactly the configured duration": a synchronous
// check, where watching for an early failover after Advance would race with
// the request it is watching.
type armedClock struct {
	*clockwork.FakeClock
	mu        sync.Mutex
	durations []time.Duration
}

func (c *armedClock) record(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.durations = append(c.durations, d)
}

func (c *armedClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	c.record(d)
	return armedTimer{c.FakeClock.AfterFunc(d, f), c}
}

func (c *armedClock) NewTimer(d time.Duration) clockwork.Timer {
	c.record(d)
	return armedTimer{c.FakeClock.NewTimer(d), c}
}

// armedTimer records the durations of Reset too (the idle timer re-arms).
type armedTimer struct {
	clockwork.Timer
	c *armedClock
}

func (t armedTimer) Reset(d time.Duration) bool {
	t.c.record(d)
	return t.Timer.Reset(d)
}

// wantArmed fails unless the engine armed at least one timer of exactly
// want and every timer it armed has one of the configured durations (want
// and others): a timeout armed early, late, halved or off by a millisecond
// shows up here, whichever timer it was.
func (h *harness) wantArmed(want time.Duration, others ...time.Duration) {
	h.tb.Helper()
	h.armed.mu.Lock()
	defer h.armed.mu.Unlock()
	found := false
	for _, d := range h.armed.durations {
		found = found || d == want
		if d != want && !slices.Contains(others, d) {
			h.tb.Fatalf("a timer was armed for %v; configured: %v %v (armed: %v)", d, want, others, h.armed.durations)
		}
	}
	if !found {
		h.tb.Fatalf("no timer armed for %v; armed: %v", want, h.armed.durations)
	}
}

// spanCounter counts ended spans by name, synchronously at End, so a test
// can tell where a request is (e.g. "await headers" ended: the gate runs).
type spanCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *spanCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (s *spanCounter) OnEnd(sp sdktrace.ReadOnlySpan) {
	s.mu.Lock()
	s.n[sp.Name()]++
	s.mu.Unlock()
}
func (s *spanCounter) Shutdown(context.Context) error   { return nil }
func (s *spanCounter) ForceFlush(context.Context) error { return nil }

func (s *spanCounter) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[name]
}

// waitSpanEnd waits until n spans named name have ended.
func (h *harness) waitSpanEnd(name string, n int) {
	h.tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.ended.count(name) < n {
		if time.Now().After(deadline) {
			h.tb.Fatalf("span %q ended %d times, want %d", name, h.ended.count(name), n)
		}
		time.Sleep(time.Millisecond) // polling a condition, not waiting for time to pass
	}
}

// waitInGate waits until hop number hops (1-based) has its response headers
// and the gateway armed its timers: timers is how many the gateway clock
// must hold then (gate timer, plus the chain deadline when set). The header
// timer is stopped before "await headers" ends, so the count is exact.
func (h *harness) waitInGate(hops, timers int) {
	h.tb.Helper()
	h.waitSpanEnd(telemetry.SpanAwaitHeaders, hops)
	h.waitTimers(timers)
}

// twoChannels is the common shape: a cheap channel "a" and a dearer "b".
func twoChannels(upA, upB, extra string) string {
	return fmt.Sprintf(`
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, region: r-a}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY, region: r-b}
models:
  - name: m
    chain:
      - {channel: b, upstream_model: %q, price: {input: 2, output: 2}}
      - {channel: a, upstream_model: %q, price: {input: 1, output: 1}}
%s`, upB, upA, extra)
}

type reply struct {
	status int
	header http.Header
	body   string
}

// post sends a chat completion through the gateway and reads the whole reply.
func (h *harness) post(body string) reply {
	h.t.Helper()
	return h.postCtx(context.Background(), body, nil)
}

func (h *harness) postCtx(ctx context.Context, body string, hdr map[string]string) reply {
	h.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.gw.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("gateway request: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && ctx.Err() == nil {
		h.t.Fatalf("reading gateway reply: %v", err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// recv receives from ch, failing instead of hanging until the package's
// -timeout when nothing comes: a timer armed too long, or a request that
// never ends. The bound is real time, but only a broken gateway waits on it.
func recv[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		tb.Fatalf("%s: nothing within 30s", what)
		var zero T
		return zero
	}
}

// async runs post in a goroutine, for tests that must move the clock while
// the request waits.
//
// The request is cancelled when the test ends (before the gateway is
// closed): a test that fails while the request waits on a fake clock
// fails at once instead of hanging the package until its -timeout.
func (h *harness) async(body string) <-chan reply {
	ch := make(chan reply, 1)
	ctx, cancel := context.WithCancel(context.Background())
	h.tb.Cleanup(cancel)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.client.Do(req)
		if err != nil {
			ch <- reply{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
	return ch
}

// waitTimers blocks until the gateway clock has at least n timers waiting.
func (h *harness) waitTimers(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.clock.BlockUntilContext(ctx, n); err != nil {
		h.t.Fatalf("gateway never armed %d timers", n)
	}
}

func (h *harness) attempts(channel, model string) int { return h.ups[channel].Attempts(model) }

func chat(stream bool) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
}

// sseData returns the data payloads of an SSE body, in order.
func sseData(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// streamText concatenates the delta contents of an SSE chat stream.
func streamText(body string) string {
	var b strings.Builder
	for _, d := range sseData(body) {
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

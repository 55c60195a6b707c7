package dashboards_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// The scenario's names. Three healthy-by-default channels serve the chat
// models in two channel regions; "slowpoke" never answers and exists only
// so the header-timeout and chain-deadline panels have data without
// touching the breakers under test (its breaker cannot open).
const (
	gatewayRegion = "eu-west-1"
	upstreamModel = "gpt-x"

	chCheap = "cheap"    // first of "chat": the one the incident hits
	chMid   = "mid"      // where "chat" fails over to
	chDear  = "dear"     // first of "chat-us"
	chSlow  = "slowpoke" // answers nothing
	chDrift = "drift"    // first of "chat-drift": early warning demotes it

	modelChat     = "chat"
	modelChatUS   = "chat-us"
	modelHang     = "hang"     // header_timeout 300ms on slowpoke: header timeouts, exhausted degraded replies
	modelDeadline = "deadline" // chain_deadline 400ms on slowpoke: chain-deadline hits
	modelDrift    = "chat-drift"

	cooldown = 6 * time.Second // breaker cooldown: short, so recovery fits the test
)

var healthyChannels = []string{chMid, chDear}

const scenarioYAML = `
listen: {{listen}}
admin_listen: {{admin}}
region: ` + gatewayRegion + `
auth: {mode: none}
policy:
  breaker: {mode: count, failures: 3, cooldown: 6s}
channels:
  - {id: cheap, base_url: "{{url:cheap}}", api_key_env: CHANNEL_KEY, region: eu-west-1}
  - {id: mid, base_url: "{{url:mid}}", api_key_env: CHANNEL_KEY, region: eu-west-1}
  - {id: dear, base_url: "{{url:dear}}", api_key_env: CHANNEL_KEY, region: us-east-1}
  - {id: slowpoke, base_url: "{{url:slowpoke}}", api_key_env: CHANNEL_KEY, region: us-east-1, breaker: {failures: 1000}}
  # Half its requests fail (flap): early warning demotes it at once, for
  # longer than the test, while its rate breaker cannot open (it would
  # need 1000 requests in its window).
  - id: drift
    base_url: "{{url:drift}}"
    api_key_env: CHANNEL_KEY
    region: eu-west-1
    breaker: {mode: rate, threshold: 0.9, min_requests: 1000}
    early_warning: {enabled: true, window: 5s, baseline: 10s, for: 0s, min_samples: 5, error_fraction: 0.3, cooldown: 30m}
models:
  - name: chat
    chain:
      - {channel: cheap, upstream_model: gpt-x, price: {input: 0.1, output: 0.2}}
      - {channel: mid, upstream_model: gpt-x, price: {input: 1, output: 2}}
      - {channel: dear, upstream_model: gpt-x, price: {input: 5, output: 10}}
  - name: chat-us
    chain:
      - {channel: dear, upstream_model: gpt-x, price: {input: 0.5, output: 0.5}}
      - {channel: mid, upstream_model: gpt-x, price: {input: 1, output: 2}}
  - name: hang
    policy: {header_timeout: 300ms}
    chain:
      - {channel: slowpoke, upstream_model: "gpt-x|no-headers", price: {input: 1, output: 1}}
  - name: deadline
    policy: {chain_deadline: 400ms}
    chain:
      - {channel: slowpoke, upstream_model: "gpt-x|no-headers", price: {input: 1, output: 1}}
  - name: chat-drift
    chain:
      - {channel: drift, upstream_model: gpt-x, price: {input: 0.1, output: 0.2}}
      - {channel: mid, upstream_model: gpt-x, price: {input: 1, output: 2}}
`

// scenario is a real gateway (gateway.Start, real clock, real listeners) in
// front of one fake provider per channel, and the traffic it served.
type scenario struct {
	g   *gwtest.Gateway
	log *testkit.SyncBuffer // the gateway's warnings, shown on failure

	mu       sync.Mutex
	statuses map[string]map[int]int // model → HTTP status → count
}

func startScenario(t *testing.T) *scenario {
	t.Helper()
	s := &scenario{log: &testkit.SyncBuffer{}, statuses: map[string]map[int]int{}}
	s.g = gwtest.Start(t, gwtest.Options{
		Clock: clockwork.NewRealClock(), UpstreamClock: clockwork.NewRealClock(),
		Logger: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Wrap:   map[string]func(http.Handler) http.Handler{chMid: statesWindows},
	}, scenarioYAML, chCheap, chMid, chDear, chSlow, chDrift)
	if err := s.g.Ups[chDrift].SetFault(upstreamModel, "flap=1s/2s"); err != nil {
		t.Fatal(err)
	}
	return s
}

// midWindows are the rate-limit windows mid's answers state (the board's
// window row): requests 60 % used, tokens 95 %.
var midWindows = map[string]string{
	"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "40", "x-ratelimit-reset-requests": "30s",
	"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "50", "x-ratelimit-reset-tokens": "1m0s",
}

func statesWindows(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range midWindows {
			w.Header().Set(k, v)
		}
		next.ServeHTTP(w, r)
	})
}

// lane is one stream of client requests at a fixed pace.
type lane struct {
	every time.Duration
	model string
	body  string
}

func chatBody(model string, stream bool) string {
	opts := ""
	if stream {
		opts = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]%s}`, model, opts)
}

// drive sends traffic on every lane until the test ends: about 17 requests
// a second, so rate(...[1m]) has fresh points on every 1 s scrape.
func (s *scenario) drive(t *testing.T) {
	lanes := []lane{
		{100 * time.Millisecond, modelChat, chatBody(modelChat, false)},
		{200 * time.Millisecond, modelChat, chatBody(modelChat, true)},
		{300 * time.Millisecond, modelChatUS, chatBody(modelChatUS, false)},
		{300 * time.Millisecond, modelHang, chatBody(modelHang, false)},
		{300 * time.Millisecond, modelDeadline, chatBody(modelDeadline, true)},
		{100 * time.Millisecond, modelDrift, chatBody(modelDrift, true)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(l.every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				// -1 is a transport error (the test ending included).
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				r, err := s.g.Call(rctx, "/v1/chat/completions", "application/json", []byte(l.body))
				rcancel()
				if err != nil {
					r.Status = -1
				}
				s.count(l.model, r.Status)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func (s *scenario) count(model string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.statuses[model] == nil {
		s.statuses[model] = map[int]int{}
	}
	s.statuses[model][status]++
}

// summary is the traffic so far, for logs and failure messages.
func (s *scenario) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	models := make([]string, 0, len(s.statuses))
	for m := range s.statuses {
		models = append(models, m)
	}
	sort.Strings(models)
	var b strings.Builder
	for _, m := range models {
		fmt.Fprintf(&b, "%s %v; ", m, s.statuses[m])
	}
	return b.String()
}

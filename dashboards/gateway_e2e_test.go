package dashboards_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/telemetry"

	"github.com/hopgate/hopgate/internal/testkit"
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
listen: %[1]s
admin_listen: %[2]s
region: ` + gatewayRegion + `
auth: {mode: none}
policy:
  breaker: {mode: count, failures: 3, cooldown: 6s}
channels:
  - {id: cheap, base_url: "%[3]s", region: eu-west-1}
  - {id: mid, base_url: "%[4]s", region: eu-west-1}
  - {id: dear, base_url: "%[5]s", region: us-east-1}
  - {id: slowpoke, base_url: "%[6]s", region: us-east-1, breaker: {failures: 1000}}
  # Half its requests fail (flap): early warning demotes it at once, for
  # longer than the test, while its rate breaker cannot open (it would
  # need 1000 requests in its window).
  - id: drift
    base_url: "%[7]s"
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
// front of one fake provider per channel.
type scenario struct {
	gw    *gateway.Gateway
	fakes map[string]*upstream.Server
	log   *testkit.SyncBuffer // the gateway's slog output, shown on failure

	mu       sync.Mutex
	statuses map[string]map[int]int // model → HTTP status → count
}

func startScenario(t *testing.T) *scenario {
	t.Helper()
	s := &scenario{fakes: map[string]*upstream.Server{}, log: &testkit.SyncBuffer{}, statuses: map[string]map[int]int{}}
	urls := map[string]string{}
	for _, id := range []string{chCheap, chMid, chDear, chSlow, chDrift} {
		u := upstream.New(upstream.Options{Name: id, Models: []string{upstreamModel}})
		srv := httptest.NewServer(u)
		t.Cleanup(func() { u.Close(); srv.Close() })
		s.fakes[id] = u
		urls[id] = srv.URL + "/v1"
	}
	yml := fmt.Sprintf(scenarioYAML, testkit.LoopbackAddr(t), testkit.LoopbackAddr(t), urls[chCheap], urls[chMid], urls[chDear], urls[chSlow], urls[chDrift])
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yml)
	}
	// Own telemetry, isolated from any OTEL_* variables of the machine.
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{
		Region: cfg.Region, HealthyRatio: 1, Getenv: func(string) string { return "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s.gw, err = gateway.Start(context.Background(), cfg, gateway.Options{
		Telemetry: tel, Logger: logger, DrainTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if err := s.fakes[chDrift].SetFault(upstreamModel, "flap=1s/2s"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.gw.Shutdown(ctx); err != nil {
			t.Errorf("gateway shutdown: %v", err)
		}
		_ = tel.Shutdown(ctx)
	})
	return s
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
	client := &http.Client{Timeout: 10 * time.Second}
	url := "http://" + s.gw.Addr() + "/v1/chat/completions"
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
				s.count(l.model, post(ctx, client, url, l.body))
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// post sends one request and reads the whole reply; -1 is a transport error
// (the test ending included).
func post(ctx context.Context, c *http.Client, url, body string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return -1
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return -1
	}
	return resp.StatusCode
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

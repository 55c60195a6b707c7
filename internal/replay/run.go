package replay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/telemetry"
)

// epoch is when every run's virtual time starts.
var epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Options is one run.
type Options struct {
	Scenario Scenario
	// EarlyWarning is the policy under test; nil: breakers alone.
	EarlyWarning *config.EarlyWarning
	// Interval between requests (a steady rate); default 500 ms (2/s).
	Interval time.Duration
	// Warmup of healthy traffic before the incident; default 12 minutes
	// (the default baseline is 10).
	Warmup time.Duration
	// Scale shortens the scenario's scripted part (0 or 1: as written);
	// the short mode of the test uses it.
	Scale float64
	Seed  uint64
}

// Record is one request as its client saw it.
type Record struct {
	At        time.Duration // since the incident began (negative: warm-up)
	FirstByte time.Duration // until the first byte of the answer (a stream's commit) or the error
	Status    int
	Outcome   string
	Path      string // the failover path
}

// Served is the channel that answered ("" when none did).
func (r Record) Served() string {
	steps := strings.Split(r.Path, telemetry.PathArrow)
	ch, res, _ := strings.Cut(steps[len(steps)-1], ":")
	if r.Status == http.StatusOK && res == "ok" {
		return ch
	}
	return ""
}

// Event is a state change of a channel: a breaker opening or a demotion.
type Event struct {
	Channel string
	At      time.Duration // since the incident began
	Until   time.Duration // a demotion's end
	Reason  string
}

// Result is what one run observed.
type Result struct {
	Options   Options
	Records   []Record
	Openings  []Event // breaker transitions to open
	Demotions []Event
	// FullWindows are the cheap provider's rate-limit windows (minutes
	// since the incident began) in which it answered 429 (window-fill).
	FullWindows map[int64]bool
}

const replayConfig = `
region: replay
auth: {mode: none}
policy:
  profile: chat
  early_warning: %s
channels:
  - {id: cheap, base_url: "http://cheap.replay/v1", region: eu}
  - {id: dear, base_url: "http://dear.replay/v1", region: eu}
models:
  - name: gpt
    chain:
      - {channel: cheap, upstream_model: gpt, price: {input: 1, output: 4}}
      - {channel: dear, upstream_model: gpt, price: {input: 3, output: 12}}
`

// Prices of the chain (USD per 1M tokens) and the usage a request is
// costed at in the report.
const (
	nominalInput  = 1000
	nominalOutput = 250
)

// PremiumPerRequest is what one request costs more on the dear channel.
var PremiumPerRequest = (float64(nominalInput)*(3-1) + float64(nominalOutput)*(12-4)) / 1e6

// earlyWarningYAML renders a policy as the config's flow mapping.
func earlyWarningYAML(e *config.EarlyWarning) string {
	if e == nil {
		return "{enabled: false}"
	}
	return fmt.Sprintf("{enabled: true, baseline: %s, window: %s, latency_multiple: %g, for: %s, error_fraction: %g, min_samples: %d, cooldown: %s, probation: %s, ratelimit_utilization: %g}",
		e.Baseline, e.Window, e.LatencyMultiple, e.For, e.ErrorFraction, e.MinSamples, e.Cooldown, e.Probation, e.RateLimitUtilization)
}

// Run plays one scenario. It sets GOMAXPROCS to 1 while it runs (see the
// package doc): nothing else may run in the process meanwhile.
func Run(o Options) (*Result, error) {
	if o.Interval <= 0 {
		o.Interval = 500 * time.Millisecond
	}
	if o.Warmup <= 0 {
		o.Warmup = 12 * time.Minute
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(replayConfig, earlyWarningYAML(o.EarlyWarning))), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("replay config: %w", err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	clock := NewClock(epoch)
	incident := epoch.Add(o.Warmup)
	since := func() time.Duration { return clock.Now().Sub(incident) }
	res := &Result{Options: o}
	var mu sync.Mutex

	// The providers, each behind a shaper that picks every hop's behaviour
	// from the script.
	net := newNetwork()
	sc := newScript(o.Scenario, o.Seed)
	var fakes []*upstream.Server
	var servers []*http.Server
	for _, id := range []string{Cheap, Dear} {
		fake := upstream.New(upstream.Options{Clock: clock, Name: id, Models: []string{"gpt"}})
		srv := &http.Server{Handler: &shaper{fake: fake, channel: id, script: sc, scale: o.Scale, since: since, mu: &mu},
			ErrorLog: nil}
		ln := net.listen(id + ".replay:80")
		go func() { _ = srv.Serve(ln) }()
		fakes, servers = append(fakes, fake), append(servers, srv)
	}

	breakers := breaker.NewSet(breaker.WithClock(clock), breaker.WithOnTransition(func(t breaker.Transition) {
		if t.To == breaker.Open {
			mu.Lock()
			res.Openings = append(res.Openings, Event{Channel: t.Name, At: t.At.Sub(incident), Until: t.ReopenAt.Sub(incident), Reason: t.Reason})
			mu.Unlock()
		}
	}))
	warnings := earlywarning.NewSet(earlywarning.WithClock(clock), earlywarning.WithOnTransition(func(t earlywarning.Transition) {
		if t.To == earlywarning.Demoted {
			mu.Lock()
			res.Demotions = append(res.Demotions, Event{Channel: t.Name, At: t.At.Sub(incident), Until: t.Until.Sub(incident), Reason: t.Reason})
			mu.Unlock()
		}
	}))
	tr := net.transport()
	tel := telemetry.Noop()
	engine := dispatch.New(dispatch.Options{
		Clock: clock, Transport: tr, Breakers: breakers, Warnings: warnings, Telemetry: tel,
		Logger: slog.New(slog.DiscardHandler), Jitter: func() float64 { return 0.5 }, Version: "replay",
	})
	model := cfg.Model("gpt")
	body := []byte(`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"Say the usual."}]}`)
	fields, err := reqbody.Parse(body)
	if err != nil {
		return nil, err
	}

	end := incident.Add(time.Duration(float64(o.Scenario.Length) * o.Scale))
	var wg sync.WaitGroup
	for at := epoch; at.Before(end); at = at.Add(o.Interval) {
		clock.Advance(at)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := newRecorder(clock)
			r, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/chat/completions", nil)
			req := &dispatch.Request{Config: cfg, Model: model, Operation: config.OpChat, Path: "/chat/completions",
				Body: bytes.Clone(body), Fields: fields, Stream: true, Events: dispatch.ChatEvents}
			out := engine.Serve(rec, r, req)
			first := rec.first
			if first.IsZero() {
				first = clock.Now()
			}
			mu.Lock()
			res.Records = append(res.Records, Record{At: rec.start.Sub(incident), FirstByte: first.Sub(rec.start),
				Status: out.Status, Outcome: out.Outcome, Path: out.Path})
			mu.Unlock()
		}()
		Settle()
	}
	// Drain: every request ends within the chain deadline.
	clock.Advance(end.Add(2 * time.Minute))
	for _, f := range fakes {
		f.Close()
	}
	Settle()
	wg.Wait()
	for _, s := range servers {
		_ = s.Close()
	}
	tr.CloseIdleConnections()
	_ = tel.Shutdown(context.Background())
	sort.Slice(res.Records, func(i, j int) bool { return res.Records[i].At < res.Records[j].At })
	res.FullWindows = sc.full
	return res, nil
}

// shaper gives each hop to a provider the script's behaviour for that
// moment, as a fault suffix on the model name.
type shaper struct {
	fake    *upstream.Server
	channel string
	script  *script
	scale   float64
	since   func() time.Duration
	mu      *sync.Mutex
}

var modelField = []byte(`"model":"gpt"`)

func (s *shaper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	s.mu.Lock()
	at := s.since()
	if s.scale != 1 && at > 0 {
		at = time.Duration(float64(at) / s.scale)
	}
	fault := s.script.fault(s.channel, at)
	if st := s.script.stated; s.channel == Cheap && st.set {
		st.header(w.Header(), s.scale)
		s.script.stated = windowState{}
	}
	s.mu.Unlock()
	body = bytes.Replace(body, modelField, []byte(`"model":"gpt|`+fault+`"`), 1)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	s.fake.ServeHTTP(w, r)
}

// recorder is the client's end of one request: when the first byte came.
type recorder struct {
	clock  *Clock
	start  time.Time
	first  time.Time
	status int
	h      http.Header
}

func newRecorder(c *Clock) *recorder { return &recorder{clock: c, start: c.Now(), h: http.Header{}} }

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.first.IsZero() {
		r.first = r.clock.Now()
	}
	return len(b), nil
}
func (r *recorder) Flush() {}

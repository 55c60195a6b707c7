package gwtest

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

// Options tune a gateway; the zero value is a gateway on fake clocks with
// spans in memory, in front of fake providers requiring ChannelKey.
type Options struct {
	// APIKey is the credential every fake provider requires and
	// CHANNEL_KEY holds. Empty: ChannelKey.
	APIKey string
	// Env holds more variables for api_key_env and token_env.
	Env map[string]string
	// Custom serves these ids with a hand-written handler instead of a
	// fake provider, for behaviour the fault grammar cannot express.
	Custom map[string]http.Handler
	// Wrap serves the fake provider of an id through a middleware (a tap,
	// a misbehaving proxy in front); the fake stays in Ups.
	Wrap map[string]func(http.Handler) http.Handler
	// URLs are the base URLs of servers the test started itself (a TLS
	// server nobody signed, a redirect), by {{url:ID}} id.
	URLs map[string]string
	// Clock replaces the gateway's fake clock; Gateway.Clock is then nil.
	// Benchmarks and real-time tests pass the real clock, whose timers
	// cost what they cost in production.
	Clock clockwork.Clock
	// UpstreamClock replaces the providers' fake clock (benchmarks: the
	// real clock, so frame delays really elapse).
	UpstreamClock clockwork.Clock
	// OTELEnv holds the OTEL_* variables the gateway's telemetry reads.
	// Nil: none, and spans are recorded in memory (Gateway.Spans). Set:
	// spans go where the variables say (OTLP export), Spans is nil.
	OTELEnv map[string]string
	// Logger replaces the production JSON logger writing to Gateway.Logs
	// (benchmarks: a discarding one, so logging costs what it did).
	Logger *slog.Logger
	// MaxFrame and MaxResponseBody override the engine's bounds (0: the
	// defaults).
	MaxFrame        int
	MaxResponseBody int64
	// ReadHeaderTimeout and IdleTimeout override the main listener's
	// slow-client limits (Start only).
	ReadHeaderTimeout, IdleTimeout time.Duration
	// OwnTelemetry lets gateway.Start set its telemetry up from the
	// process's OTEL_* variables, as `hopgate serve` does (Start only):
	// Gateway.Tel is then the gateway's, and Spans nil.
	OwnTelemetry bool
	// Budget and Admission are the overload protection of a New gateway
	// (nil: unbounded); a Start gateway builds its own from the config.
	Budget    *overload.Budget
	Admission *overload.Admission
	// WrapTransport wraps the engine's upstream transport (a transport
	// that panics, one that counts).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Providers resolves the cloud credentials of bedrock and vertex
	// channels, given the started fakes (a service-account key whose
	// token_uri is a fake's token endpoint, static AWS keys).
	Providers func(*Fakes) provider.Options
	// DrainTimeout is the drain a Start gateway's Shutdown allows (0: 2 s);
	// a test of what a drain that ran out does passes a nanosecond.
	DrainTimeout time.Duration
	// PlainSpans records the engine's spans as SDK spans from their start
	// (telemetry.Options.PlainSpans), not as compact records: the
	// reference the compact recorder is compared with.
	PlainSpans bool
}

// Gateway is a running gateway under test and the upstreams it runs
// against. Its fields are for the test to read; the harness set them up.
type Gateway struct {
	*Fakes
	// URL is the API listener's base URL (http://127.0.0.1:port).
	URL string
	// AdminURL is the admin listener's base URL (Start only).
	AdminURL string
	// Config is the configuration the gateway started with.
	Config *config.Config
	// Clock is the gateway's fake clock; nil when Options.Clock replaced it.
	Clock *clockwork.FakeClock
	// Armed is Clock as the engine sees it, recording every timer armed.
	Armed *ArmedClock
	// Engine is the gateway's engine.
	Engine *dispatch.Engine
	// Tel is the gateway's telemetry.
	Tel *telemetry.Telemetry
	// Spans records every exported span; nil with Options.OTELEnv or
	// OwnTelemetry.
	Spans *tracetest.InMemoryExporter
	// Logs is what the gateway logged (nil with Options.Logger).
	Logs *testkit.SyncBuffer
	// Client is the test's HTTP client and Transport the engine's upstream
	// transport: both are closed at cleanup, so goleak sees no idle
	// connection.
	Client    *http.Client
	Transport *http.Transport
	// Process is the gateway.Start'ed gateway (Start only).
	Process *gateway.Gateway

	tb       testing.TB
	opts     Options
	watch    *spanWatch
	ctx      context.Context // of every Async request
	cancel   context.CancelFunc
	shutdown sync.Once
	shutErr  error
}

// New starts the fake providers of fakes and a gateway whose config is
// yml with {{url:ID}} replaced: the engine and the api handler on an
// httptest server, with no backoff jitter.
func New(tb testing.TB, yml string, fakes ...string) *Gateway {
	tb.Helper()
	return NewWith(tb, Options{}, yml, fakes...)
}

// NewWith is New with options.
func NewWith(tb testing.TB, o Options, yml string, fakes ...string) *Gateway {
	tb.Helper()
	g := prepare(tb, o, fakes)
	g.Config = g.parse(o, g.Expand(yml))
	g.setupTelemetry(o)
	log := g.logger(o)
	var tr http.RoundTripper = g.Transport
	if o.WrapTransport != nil {
		tr = o.WrapTransport(tr)
	}
	g.Engine = dispatch.New(dispatch.Options{
		Clock: g.clock(o), Telemetry: g.Tel, Logger: log, Jitter: func() float64 { return 0 },
		Transport: tr, MaxFrame: o.MaxFrame, MaxResponseBody: o.MaxResponseBody,
		Providers: g.providers(o), Budget: o.Budget,
	})
	if err := g.Engine.CheckChannels(g.Config); err != nil {
		tb.Fatal(err)
	}
	a := api.New(g.Config, g.Engine, g.Tel, log)
	a.SetAdmission(o.Admission)
	a.SetLimiter(ratelimit.New(ratelimit.Options{Clock: g.clock(o), Telemetry: g.Tel, Logger: log}))
	srv := httptest.NewServer(a.Handler())
	g.URL = srv.URL
	tb.Cleanup(func() {
		g.cancel()
		srv.Close()
		g.closeIdle()
	})
	return g
}

// Start starts the fake providers of fakes and a gateway through
// gateway.Start (the process `hopgate serve` runs) whose config is yml
// with {{listen}} and {{admin}} replaced by free loopback addresses and
// {{url:ID}} by the upstreams' base URLs. The gateway is shut down when
// the test ends.
func Start(tb testing.TB, o Options, yml string, fakes ...string) *Gateway {
	tb.Helper()
	g := prepare(tb, o, fakes)
	yml = strings.ReplaceAll(yml, "{{listen}}", testkit.LoopbackAddr(tb))
	yml = strings.ReplaceAll(yml, "{{admin}}", testkit.LoopbackAddr(tb))
	g.Config = g.parse(o, g.Expand(yml))
	if !o.OwnTelemetry {
		g.setupTelemetry(o)
	}
	drain := 2 * time.Second
	if o.DrainTimeout > 0 {
		drain = o.DrainTimeout
	}
	gw, err := gateway.Start(context.Background(), g.Config, gateway.Options{
		Logger: g.logger(o), Telemetry: g.Tel, Clock: g.clock(o), Transport: g.Transport,
		DrainTimeout:      drain,
		ReadHeaderTimeout: o.ReadHeaderTimeout, IdleTimeout: o.IdleTimeout,
		MaxFrame: o.MaxFrame, MaxResponseBody: o.MaxResponseBody,
		Providers: g.providers(o),
	})
	if err != nil {
		tb.Fatal(err)
	}
	g.Process, g.Engine = gw, gw.Engine()
	if o.OwnTelemetry {
		g.Tel = gw.Telemetry()
		g.watchSpans()
	}
	g.URL, g.AdminURL = "http://"+gw.Addr(), "http://"+gw.AdminAddr()
	tb.Cleanup(func() {
		g.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("gateway shutdown: %v", err)
		}
		g.closeIdle()
	})
	return g
}

// prepare starts the upstreams and sets up what both kinds of gateway
// share: clocks, client, transport, logs.
func prepare(tb testing.TB, o Options, fakes []string) *Gateway {
	tb.Helper()
	g := &Gateway{tb: tb, opts: o, Fakes: StartFakes(tb, o, fakes...)}
	if o.Clock == nil {
		g.Clock = clockwork.NewFakeClockAt(Epoch)
		g.Armed = &ArmedClock{FakeClock: g.Clock}
	}
	if o.Logger == nil {
		g.Logs = &testkit.SyncBuffer{}
	}
	g.Transport = dispatch.NewTransport()
	g.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	tb.Cleanup(func() {
		if tb.Failed() && g.Logs != nil {
			tb.Logf("gateway log (last 20 lines):\n%s", g.Logs.Tail(20))
		}
	})
	return g
}

// parse parses yml with CHANNEL_KEY and Options.Env as the environment.
func (g *Gateway) parse(o Options, yml string) *config.Config {
	g.tb.Helper()
	cfg, err := config.Parse([]byte(yml), func(k string) (string, bool) {
		if v, ok := o.Env[k]; ok {
			return v, true
		}
		if k == "CHANNEL_KEY" {
			return g.APIKey, true
		}
		return "", false
	})
	if err != nil {
		g.tb.Fatalf("config: %v\n%s", err, yml)
	}
	return cfg
}

// setupTelemetry builds telemetry as gateway.Start does from the config
// (region, healthy ratio, failover log size), on the gateway's clock, with
// spans in memory unless o.OTELEnv sends them elsewhere.
func (g *Gateway) setupTelemetry(o Options) {
	g.tb.Helper()
	topts := telemetry.Options{
		Region:          g.Config.Region,
		HealthyRatio:    g.Config.Telemetry.HealthySampleRatio,
		FailoverLogSize: g.Config.Telemetry.FailoverLogSize,
		Getenv:          func(k string) string { return o.OTELEnv[k] },
		Clock:           o.Clock,
		PlainSpans:      o.PlainSpans,
	}
	if g.Clock != nil {
		topts.Clock = g.Clock // not Armed: only the engine's timers are recorded
	}
	if o.OTELEnv == nil {
		g.Spans = tracetest.NewInMemoryExporter()
		topts.SpanExporter = g.Spans
	}
	tel, err := telemetry.Setup(context.Background(), topts)
	if err != nil {
		g.tb.Fatal(err)
	}
	// After the gateway's cleanup (registered later), which ends the
	// requests whose spans this flushes.
	g.tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	g.Tel = tel
	g.watchSpans()
}

// watchSpans registers the span watch behind every processor already
// there (the tail sampler): it sees a root once its trace was decided.
func (g *Gateway) watchSpans() {
	g.watch = newSpanWatch()
	g.Tel.RegisterSpanProcessor(g.watch)
	g.Tel.Spans.Watch(g.watch.spanEnded)
}

// clock is the engine's clock: Armed, or Options.Clock.
func (g *Gateway) clock(o Options) clockwork.Clock {
	if g.Armed != nil {
		return g.Armed
	}
	return o.Clock
}

func (g *Gateway) logger(o Options) *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return telemetry.NewLogger(g.Logs, slog.LevelInfo)
}

func (g *Gateway) closeIdle() {
	g.Client.CloseIdleConnections()
	g.Transport.CloseIdleConnections()
}

// Shutdown drains the gateway.Start'ed gateway once (Start only); the
// cleanup calls it too, so a test may shut down early to observe the drain.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.shutdown.Do(func() { g.shutErr = g.Process.Shutdown(ctx) })
	return g.shutErr
}

// Reparse parses yml as Start did, for a Reload (Start only): the same
// listeners and upstreams.
func (g *Gateway) Reparse(yml string) *config.Config {
	g.tb.Helper()
	cur := g.Process.Config()
	yml = strings.ReplaceAll(yml, "{{listen}}", cur.Listen)
	yml = strings.ReplaceAll(yml, "{{admin}}", cur.AdminListen)
	return g.parse(g.opts, g.Expand(yml))
}

// providers is Options.Providers of the started fakes.
func (g *Gateway) providers(o Options) provider.Options {
	if o.Providers == nil {
		return provider.Options{}
	}
	return o.Providers(g.Fakes)
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/admin"
	"github.com/hopgate/hopgate/dispatch/api"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/dispatch/status"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/telemetry"
)

// Options configure a Gateway; zero values are production defaults.
type Options struct {
	Version string
	Logger  *slog.Logger
	// Providers resolves the cloud credential chains (bedrock, vertex,
	// Entra ID); the zero value uses each SDK's default chain.
	Providers provider.Options
	// Telemetry overrides the OTEL_*-driven setup (tests pass recorders).
	Telemetry *telemetry.Telemetry
	// Clock drives every timer of the request path (tests pass a fake).
	Clock clockwork.Clock
	// Transport overrides the upstream transport.
	Transport http.RoundTripper
	// DrainTimeout bounds the wait for in-flight requests (streams
	// included) on Shutdown. Default 30 s.
	DrainTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout override the main listener's
	// slow-client limits (api.NewHTTPServer: 10 s and 2 min). Zero keeps
	// them; tests shorten them so a slowloris test takes a second.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// MaxFrame, MaxHeld and MaxResponseBody override the engine's
	// per-request memory bounds (dispatch.Options). Zero keeps the defaults.
	MaxFrame, MaxHeld int
	MaxResponseBody   int64
	// StatusStore keeps the status page's history (/status). Nil: the
	// configured store (`store:`; restarts keep it, replicas add up), or
	// without one an in-process memory store.
	StatusStore status.Store
}

// Gateway is a running hopgate: main and admin listeners over one engine.
type Gateway struct {
	opts   Options
	log    *slog.Logger
	tel    *telemetry.Telemetry
	ownTel bool
	engine *dispatch.Engine
	api    *api.Server
	admin  *admin.Server
	status *status.Service
	stopSt context.CancelFunc
	stDone chan struct{}
	main   *http.Server
	adm    *http.Server
	// inFlight counts the API's handlers (Shutdown waits for the cut ones).
	inFlight *overload.Admission
	mainLn   net.Listener
	adminLn  net.Listener
	wg       sync.WaitGroup
	errs     chan error
	// The store and the wallet (wallet.go), nil without a store.
	store  *store.Store
	wallet *wallet.Wallet

	journal *wallet.Journal // billing.journal_dir, opened with the store

	// limits closes the rate-limit counters' client (ratelimit.go).
	limits func()
}

// Start loads nothing itself: it binds the listeners of cfg and serves.
func Start(ctx context.Context, cfg *config.Config, o Options) (*Gateway, error) {
	g := &Gateway{opts: o, log: o.Logger, tel: o.Telemetry, errs: make(chan error, 2)}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.opts.DrainTimeout <= 0 {
		g.opts.DrainTimeout = 30 * time.Second
	}
	clock := o.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if g.tel == nil {
		t, err := telemetry.Setup(ctx, telemetry.Options{
			ServiceVersion:  o.Version,
			Region:          cfg.Region,
			HealthyRatio:    cfg.Telemetry.HealthySampleRatio,
			FailoverLogSize: cfg.Telemetry.FailoverLogSize,
			Clock:           clock,
			TraceRing:       telemetry.TraceRingOptions{MaxTraces: cfg.Telemetry.TraceRingTraces, MaxBytes: cfg.Telemetry.TraceRingBytes},
		})
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		g.tel, g.ownTel = t, true
	}
	if err := g.openStore(ctx, cfg, clock); err != nil {
		g.closeTel(ctx)
		return nil, err
	}
	breakers := breaker.NewSet(breaker.WithClock(clock), breaker.WithOnTransition(g.onTransition))
	// Overload protection (DESIGN.md §13): fixed for the process's life
	// (a reload does not change the budget or the bounds).
	budget := overload.NewBudget(overload.BudgetFor(cfg.Overload.BudgetBytes, cfg.Overload.BudgetFraction))
	maxInFlight, maxStreams := cfg.Overload.MaxInFlight, cfg.Overload.MaxStreams
	if maxInFlight == 0 {
		maxInFlight = overload.DefaultInFlight(budget.Limit())
	}
	if maxStreams == 0 {
		maxStreams = overload.DefaultStreams(budget.Limit())
	}
	adm := overload.NewAdmission(maxInFlight, maxStreams)
	warnings := earlywarning.NewSet(earlywarning.WithClock(clock), earlywarning.WithOnTransition(g.onWarning))
	g.engine = dispatch.New(dispatch.Options{
		Budget: budget,
		Clock:  clock, Transport: o.Transport, Breakers: breakers, Warnings: warnings,
		Telemetry: g.tel, Logger: g.log, Version: o.Version,
		MaxFrame: o.MaxFrame, MaxHeld: o.MaxHeld, MaxResponseBody: o.MaxResponseBody,
		Providers: o.Providers,
	})
	if err := g.engine.CheckChannels(cfg); err != nil {
		g.closeWallet(ctx) // the store is open
		g.closeTel(ctx)
		return nil, fmt.Errorf("channel credentials: %w", err)
	}
	g.api = api.New(cfg, g.engine, g.tel, g.log)
	g.api.SetAdmission(adm)
	g.inFlight = adm
	if err := g.startLimiter(ctx, cfg, clock); err != nil {
		g.closeWallet(ctx)
		g.closeTel(ctx)
		return nil, err
	}
	g.tel.Metrics.ObserveOverload(func() telemetry.OverloadObservation {
		return telemetry.OverloadObservation{BudgetUsed: budget.Used(), BudgetLimit: budget.Limit(),
			InFlight: adm.InFlight(), Streams: adm.Streams()}
	})
	g.log.Info("overload protection", slog.Int64("buffer_budget_bytes", budget.Limit()),
		slog.Int64("max_in_flight", maxInFlight), slog.Int64("max_streams", maxStreams))
	statusSt := o.StatusStore
	if statusSt == nil && g.store != nil {
		// The configured store keeps the history: it survives restarts
		// and replicas add up. Without one it lasts the process.
		statusSt = &statusStore{st: g.store, now: clock.Now}
	}
	g.status = status.New(status.Options{Store: statusSt, Clock: clock, Config: g.api.Config, Logger: g.log})
	g.api.SetStatus(g.status)
	g.tel.Metrics.ObserveBreakers(func() []telemetry.BreakerObservation {
		return g.engine.BreakerObservations(g.api.Config())
	})
	g.tel.Metrics.ObserveEarlyWarning(func() []telemetry.EarlyWarningObservation {
		return g.engine.WarningObservations(g.api.Config())
	})
	g.admin = &admin.Server{Config: g.api.Config, Engine: g.engine, Telemetry: g.tel, Admission: adm}
	g.startWallet(ctx, clock)

	var err error
	if g.mainLn, err = net.Listen("tcp", cfg.Listen); err != nil {
		g.closeWallet(ctx)
		g.closeLimiter()
		g.closeTel(ctx)
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if g.adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
		g.mainLn.Close()
		g.closeWallet(ctx)
		g.closeLimiter()
		g.closeTel(ctx)
		return nil, fmt.Errorf("admin listen %s: %w", cfg.AdminListen, err)
	}
	if cfg.Auth.Mode == config.AuthNone {
		g.log.Warn("auth.mode is none: any client can use this gateway; for local development only")
	}
	g.main = api.NewHTTPServer(cfg.Listen, g.api.Handler(), g.log)
	if o.ReadHeaderTimeout > 0 {
		g.main.ReadHeaderTimeout = o.ReadHeaderTimeout
	}
	if o.IdleTimeout > 0 {
		g.main.IdleTimeout = o.IdleTimeout
	}
	g.adm = &http.Server{Handler: g.admin.Handler(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	stCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stopSt, g.stDone = stop, make(chan struct{})
	go func() { defer close(g.stDone); g.status.Run(stCtx) }()
	g.serve(g.main, g.mainLn)
	g.serve(g.adm, g.adminLn)
	g.admin.SetReady(true)
	g.log.Info("hopgate serving", slog.String("listen", g.mainLn.Addr().String()),
		slog.String("admin_listen", g.adminLn.Addr().String()), slog.String("region", cfg.Region),
		slog.Int("models", len(cfg.Models)), slog.Int("channels", len(cfg.Channels)))
	return g, nil
}

func (g *Gateway) serve(s *http.Server, ln net.Listener) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.errs <- err
		}
	}()
}

// onTransition feeds breaker state changes to metrics and the log.
func (g *Gateway) onTransition(t breaker.Transition) {
	region := ""
	if g.api != nil {
		if ch := g.api.Config().Channel(t.Name); ch != nil {
			region = ch.Region
		}
	}
	g.tel.Metrics.BreakerTransition(context.Background(), t.Name, region, t.From.String(), t.To.String())
	attrs := []any{slog.String("channel", t.Name), slog.String("from", t.From.String()),
		slog.String("to", t.To.String()), slog.String("reason", t.Reason)}
	if !t.ReopenAt.IsZero() {
		attrs = append(attrs, slog.Time("reopen_at", t.ReopenAt))
	}
	g.log.Warn("breaker transition", attrs...)
}

// onWarning feeds early-warning state changes to metrics and the log: a
// demotion is a warning with its evidence, the way back is information.
func (g *Gateway) onWarning(t earlywarning.Transition) {
	region := ""
	if g.api != nil {
		if ch := g.api.Config().Channel(t.Name); ch != nil {
			region = ch.Region
		}
	}
	attrs := []any{slog.String("channel", t.Name), slog.String("from", t.From.String()),
		slog.String("to", t.To.String()), slog.String("reason", t.Reason)}
	if !t.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", t.Until))
	}
	if t.To == earlywarning.Demoted {
		g.tel.Metrics.EarlyWarningDemotion(context.Background(), t.Name, region, t.Reason)
		g.log.Warn("early warning: channel demoted to the end of its chains", append(attrs, slog.String("evidence", t.Detail))...)
		return
	}
	g.log.Info("early warning transition", attrs...)
}

// Addr is the main listener's address; AdminAddr the admin listener's.
func (g *Gateway) Addr() string      { return g.mainLn.Addr().String() }
func (g *Gateway) AdminAddr() string { return g.adminLn.Addr().String() }

// Engine exposes the engine (tests, demo).
func (g *Gateway) Engine() *dispatch.Engine { return g.engine }

// Status exposes the status page's service (tests flush it).
func (g *Gateway) Status() *status.Service { return g.status }

// Telemetry exposes the telemetry in use.
func (g *Gateway) Telemetry() *telemetry.Telemetry { return g.tel }

// Config is the configuration in force.
func (g *Gateway) Config() *config.Config { return g.api.Config() }

// Errors reports listener failures after start.
func (g *Gateway) Errors() <-chan error { return g.errs }

// Reload swaps in a new, already validated configuration. Listener
// addresses cannot change without a restart; breaker state is kept for
// channels whose breaker policy is unchanged, and forgotten for channels
// the new configuration removes.
func (g *Gateway) Reload(cfg *config.Config) error {
	cur := g.api.Config()
	if cfg.Listen != cur.Listen || cfg.AdminListen != cur.AdminListen {
		return errors.New("listen and admin_listen cannot change on reload; restart instead")
	}
	if cfg.Store != cur.Store || cfg.Billing.Currency != cur.Billing.Currency {
		return errors.New("store and billing.currency cannot change on reload; restart instead")
	}
	if err := checkLimiterReload(cur, cfg); err != nil {
		return err
	}
	if err := g.engine.CheckChannels(cfg); err != nil {
		return fmt.Errorf("channel credentials: %w", err)
	}
	if o, n := cur.Overload, cfg.Overload; o.BudgetBytes != n.BudgetBytes || o.BudgetFraction != n.BudgetFraction ||
		o.MaxInFlight != n.MaxInFlight || o.MaxStreams != n.MaxStreams {
		// The budget and bounds are fixed for the process's life (Start);
		// a changed value that is silently kept would read as applied.
		g.log.Warn("overload budget and bounds are fixed at start: the running ones are kept; restart to change them",
			slog.Int64("budget_bytes", n.BudgetBytes), slog.Float64("budget_fraction", n.BudgetFraction),
			slog.Int64("max_in_flight", n.MaxInFlight), slog.Int64("max_streams", n.MaxStreams))
	}
	g.api.SetConfig(cfg)
	g.engine.RetainChannels(cfg)
	g.tel.ErrorRates.Retain(func(ch string) bool { return cfg.Channel(ch) != nil })
	g.log.Info("config reloaded", slog.Int("models", len(cfg.Models)), slog.Int("channels", len(cfg.Channels)))
	return nil
}

// Shutdown drains: /readyz turns 503 so load balancers stop sending, new
// connections are refused, in-flight requests and streams get up to
// DrainTimeout to finish; streams still open then end with the in-band
// gateway_shutting_down frame (at most StreamCutWait more), and remaining
// connections are closed. Realtime sessions (hijacked: the server does not
// wait for them) get the same drain, then the error event
// gateway_shutting_down and close 1012; after a cut, Shutdown waits (at
// most StreamCutWait) for the cut handlers' log lines. The
// wallet then waits (at most wallet.DefaultCloseWait) for the handlers of
// the requests so cut to settle their charges before the store closes.
// Spans are flushed last.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.admin.SetReady(false)
	dctx, cancel := context.WithTimeout(ctx, g.opts.DrainTimeout)
	defer cancel()
	err := g.main.Shutdown(dctx)
	if err != nil {
		g.log.Warn("drain timeout: closing remaining connections", slog.Any("error", err))
		g.cutStreams(ctx)
		_ = g.main.Close()
	}
	g.endSessions(dctx, ctx)
	if err != nil {
		g.waitHandlers(ctx) // the cut streams' and sessions' last log lines
	}
	actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer acancel()
	_ = g.adm.Shutdown(actx)
	g.wg.Wait()
	g.stopSt() // after the drain: the last requests are counted, then flushed
	<-g.stDone
	// The requests still running were cut above; their handlers are on
	// their way out. The wallet waits for their settles (at most
	// wallet.DefaultCloseWait), then what the store could not take gets
	// one more chance, for up to DrainTimeout; the store closes after.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), wallet.DefaultCloseWait+g.opts.DrainTimeout)
	g.closeWallet(wctx)
	wcancel()
	g.closeLimiter()
	g.closeTel(actx)
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // drained as far as the grace period allowed: a clean exit
	}
	return err
}

func (g *Gateway) closeTel(ctx context.Context) {
	if g.ownTel {
		if err := g.tel.Shutdown(ctx); err != nil {
			g.log.Warn("telemetry shutdown", slog.Any("error", err))
		}
	}
}

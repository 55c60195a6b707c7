package ratelimit

import (
	"context"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

// DefaultCallTimeout bounds one counter call made for a request (Redis):
// past it the admission is a store error, and on_store_error decides.
const DefaultCallTimeout = 250 * time.Millisecond

// Options configure a Limiter. All are optional.
type Options struct {
	// Counter keeps the windows. Nil: NewMemory().
	Counter Counter
	// Clock stamps every take. Nil: the real clock.
	Clock clockwork.Clock
	// Stored returns the limits kept with a tenant in the store (`hopgate
	// tenants limits`); the file's entry for the same tenant and model
	// wins. Nil: none.
	Stored func(tenant, model string) (all, perModel *config.TenantLimit)
	// Telemetry receives the store-error metric. Nil: telemetry.Noop().
	Telemetry *telemetry.Telemetry
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
	// CallTimeout bounds one counter call. Default DefaultCallTimeout.
	CallTimeout time.Duration
}

// Limiter admits requests within their tenant's limits. Safe for
// concurrent use; one per process, across config reloads (the limits are
// read from the config of each request).
type Limiter struct {
	counter Counter
	clock   clockwork.Clock
	stored  func(tenant, model string) (all, perModel *config.TenantLimit)
	tel     *telemetry.Telemetry
	log     *slog.Logger
	timeout time.Duration
}

// New builds a Limiter.
func New(o Options) *Limiter {
	l := &Limiter{counter: o.Counter, clock: o.Clock, stored: o.Stored, tel: o.Telemetry, log: o.Logger, timeout: o.CallTimeout}
	if l.counter == nil {
		l.counter = NewMemory()
	}
	if l.clock == nil {
		l.clock = clockwork.NewRealClock()
	}
	if l.tel == nil {
		l.tel = telemetry.Noop()
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.timeout <= 0 {
		l.timeout = DefaultCallTimeout
	}
	return l
}

// Admission is the answer of Admit.
type Admission struct {
	// Ticket settles the tokens taken; nil when no limit applies (or the
	// store failed and on_store_error allowed the request).
	Ticket *Ticket
	// Refused: over a limit (Cell and State say which, with its
	// Retry-After), or the store failed and on_store_error is deny
	// (StoreError set).
	Refused    bool
	Cell       Cell
	State      State
	StoreError error
	// Windows are the tightest window of each kind, for the
	// x-ratelimit-* headers; Has says which kinds apply.
	Windows [2]State
	Has     [2]bool
}

// Admit takes one request and its estimated tokens from every limit of
// tenant on model (cfg's rate_limits, then the store's). A tenant with no
// limit costs one map lookup.
func (l *Limiter) Admit(ctx context.Context, cfg *config.Config, tenant, model string, tokens int64) Admission {
	var cells [MaxCells]Cell
	n := l.cells(&cells, cfg, tenant, model, tokens)
	if n == 0 {
		return Admission{}
	}
	return l.admit(ctx, cfg, tenant, model, tokens, cells, n)
}

// admit takes the n cells. The counter is an interface, so the cells it
// is given escape: they are given as the ticket's own, one allocation per
// limited request (the ticket), and none for a tenant without limits.
func (l *Limiter) admit(ctx context.Context, cfg *config.Config, tenant, model string, tokens int64, cells [MaxCells]Cell, n int) Admission {
	t := &Ticket{l: l, cells: cells, n: n, reserved: tokens}
	v, err := l.take(ctx, t.cells[:n])
	if err != nil {
		decision := cfg.RateLimits.OnStoreError
		l.tel.Metrics.RateLimitStoreError(ctx, decision)
		l.log.LogAttrs(ctx, slog.LevelWarn, "rate limits: the counter store failed; on_store_error decides",
			slog.String("decision", decision), slog.String("tenant", tenant), slog.String("model", model), slog.Any("error", err))
		return Admission{Refused: decision == config.RateLimitDeny, StoreError: err}
	}
	a := Admission{Refused: !v.Allowed}
	for i := 0; i < n; i++ {
		k, st := cells[i].Kind, v.States[i]
		if !a.Has[k] || st.Remaining < a.Windows[k].Remaining {
			a.Windows[k], a.Has[k] = st, true
		}
	}
	if a.Refused {
		a.Cell, a.State = cells[v.Denied], v.States[v.Denied]
		return a
	}
	a.Ticket = t
	return a
}

// take calls the counter, bounded by the call timeout when it is remote
// (the in-process one answers at once: no timer per request).
func (l *Limiter) take(ctx context.Context, cells []Cell) (Verdict, error) {
	if _, local := l.counter.(*Memory); local {
		return l.counter.Take(ctx, l.clock.Now(), cells)
	}
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.counter.Take(cctx, l.clock.Now(), cells)
}

// cells fills cs with the limits that apply and returns how many.
func (l *Limiter) cells(cs *[MaxCells]Cell, cfg *config.Config, tenant, model string, tokens int64) int {
	if tenant == "" {
		return 0 // auth.mode none: nobody to limit
	}
	all, per := cfg.RateLimits.Limits(tenant, model)
	if l.stored != nil && (all == nil || per == nil) {
		sAll, sPer := l.stored(tenant, model)
		if all == nil {
			all = sAll
		}
		if per == nil {
			per = sPer
		}
	}
	n := addCells(cs, 0, all, tenant, "", tokens)
	return addCells(cs, n, per, tenant, model, tokens)
}

// addCells appends lim's cells (rpm, tpm) at cs[n:] and returns the count.
func addCells(cs *[MaxCells]Cell, n int, lim *config.TenantLimit, tenant, model string, tokens int64) int {
	if lim == nil {
		return n
	}
	if lim.RPM > 0 {
		cs[n] = Cell{Tenant: tenant, Model: model, Kind: Requests, Limit: lim.RPM, N: 1}
		n++
	}
	if lim.TPM > 0 {
		cs[n] = Cell{Tenant: tenant, Model: model, Kind: Tokens, Limit: lim.TPM, N: max(tokens, 0)}
		n++
	}
	return n
}

// Ticket is an admitted request's share of its limits, until it settles.
type Ticket struct {
	l        *Limiter
	cells    [MaxCells]Cell
	n        int
	reserved int64
	done     bool
}

// Settle charges the tokens cells with the usage the request was charged
// (the wallet's rules: reported, or estimated from what was delivered):
// the difference with the estimate taken at admission is given back, or
// taken on top (a window may run into debt: the next requests wait).
// Nil-safe; only the first Settle or Release counts.
func (t *Ticket) Settle(ctx context.Context, tokens int64) {
	if t == nil || t.done {
		return
	}
	t.done = true
	t.adjust(ctx, max(tokens, 0)-t.reserved, false)
}

// Charge takes tokens on top of what the ticket holds, as a realtime
// session reports them (each response.done), before its Settle. Nil-safe;
// nothing after Settle or Release.
func (t *Ticket) Charge(ctx context.Context, tokens int64) {
	if t == nil || t.done || tokens <= 0 {
		return
	}
	t.adjust(ctx, tokens, false)
}

// Release gives everything back: the request was refused after admission
// (the wallet said no) and nothing was sent upstream.
func (t *Ticket) Release(ctx context.Context) {
	if t == nil || t.done {
		return
	}
	t.done = true
	t.adjust(ctx, -t.reserved, true)
}

func (t *Ticket) adjust(ctx context.Context, tokens int64, requests bool) {
	if _, local := t.l.counter.(*Memory); !local {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), t.l.timeout)
		defer cancel()
	}
	now := t.l.clock.Now()
	for _, c := range t.cells[:t.n] {
		delta := tokens
		if c.Kind == Requests {
			if !requests {
				continue
			}
			delta = -1
		}
		if delta == 0 {
			continue
		}
		if err := t.l.counter.Adjust(ctx, now, c, delta); err != nil {
			// A lost settle errs by at most this request's estimate, for
			// one window: logged, never retried.
			t.l.log.LogAttrs(ctx, slog.LevelWarn, "rate limits: could not settle a window",
				slog.String("tenant", c.Tenant), slog.String("model", c.Model), slog.String("kind", c.Kind.String()),
				slog.Int64("delta", delta), slog.Any("error", err))
		}
	}
}

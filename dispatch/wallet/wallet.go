package wallet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/telemetry"
)

// Store is what the wallet needs of package store (*store.Store has it);
// tests wrap a real store to make it fail.
type Store interface {
	Hold(ctx context.Context, h store.Hold) error
	Settle(ctx context.Context, c store.Charge) (store.Settlement, error)
	Release(ctx context.Context, requestID string) (bool, error)
	ExpireHolds(ctx context.Context, now time.Time) (int, error)
	Keys(ctx context.Context) ([]store.KeyRecord, error)
	MarkDelivering(ctx context.Context, c store.Charge) (bool, error)
	RecordInDoubt(ctx context.Context, c store.Charge, delivering time.Time) (bool, error)
}

var _ Store = (*store.Store)(nil)

// Errors of Reserve, told apart with errors.Is (they are the store's).
var (
	// ErrInsufficientBalance: the reservation does not fit: 402.
	ErrInsufficientBalance = store.ErrInsufficientBalance
	// ErrNoWallet: the tenant has no wallet in the store: 402.
	ErrNoWallet = store.ErrNotFound
	// ErrUnavailable: the store could not be reached: 503 (fail_closed),
	// or no credit was left (fail_open).
	ErrUnavailable = store.ErrUnavailable
)

// Defaults of Options.
const (
	DefaultCallTimeout   = 3 * time.Second
	DefaultRetryInterval = 2 * time.Second
	// DefaultCloseWait is CloseWait's default: twice DefaultCallTimeout.
	DefaultCloseWait = 2 * DefaultCallTimeout
	// MaxExpirySweep bounds the interval between two ExpireHolds calls;
	// shorter hold_ttl values sweep every hold_ttl/4.
	MaxExpirySweep = time.Minute
)

// Options configure a Wallet. Store and Config are required.
type Options struct {
	Store Store
	// Config returns the configuration in force (billing policy, key
	// refresh period, hold lifetime are read from it at each use, so a
	// reload applies).
	Config func() *config.Config
	// Clock drives the refresh, expiry and retry loops and stamps hold
	// expiries. Nil: the real clock.
	Clock clockwork.Clock
	// Telemetry receives the wallet metrics. Nil: telemetry.Noop().
	Telemetry *telemetry.Telemetry
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
	// CallTimeout bounds one store call made for a request. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// RetryInterval is the wait between two rounds of retries of settles
	// and releases the store could not take. Default DefaultRetryInterval.
	RetryInterval time.Duration
	// CloseWait bounds how long Close waits for the reservations still in
	// flight to be settled or released. Default twice CallTimeout: Close
	// comes after the drain timeout has cut the requests still running, so
	// each of their handlers has at most one store call under way (a hold)
	// and one to make (its settle or release).
	CloseWait time.Duration
	// Journal, when set, keeps every charge the store could not take until
	// it does, across restarts (journal.go). Nil: such a charge is only
	// logged at shutdown.
	Journal *Journal
}

// Wallet reserves, settles and releases for one gateway process. Its
// methods are safe for concurrent use.
type Wallet struct {
	store     Store
	cfg       func() *config.Config
	clock     clockwork.Clock
	tel       *telemetry.Telemetry
	log       *slog.Logger
	timeout   time.Duration
	retry     time.Duration
	closeWait time.Duration
	journal   *Journal

	keys      keyring
	refreshes chan chan struct{} // Refresh's requests to the key loop

	mu      sync.Mutex
	pending []*pendingOp
	// unsettled is, per tenant, what this replica served and could not
	// settle yet: reservations on credit (fail_open) and charges waiting
	// in pending. fail_open admits on credit while it stays within
	// billing.fail_open_credit.
	unsettled map[string]int64
	kick      chan struct{}
	// inflight holds the reservations from Reserve to the end of their
	// Finish or Guard; idle, while Close waits for them, is closed when
	// the last one ends (inflight.go).
	inflight map[*Reservation]struct{}
	idle     chan struct{}

	stop    chan struct{}
	stopped bool // Close was called: the loops end
	closed  bool // Close has returned: nothing retries any more
	wg      sync.WaitGroup
}

// New builds a Wallet; Start starts its background loops.
func New(o Options) *Wallet {
	w := &Wallet{
		store: o.Store, cfg: o.Config, clock: o.Clock, tel: o.Telemetry, log: o.Logger,
		timeout: o.CallTimeout, retry: o.RetryInterval, closeWait: o.CloseWait, journal: o.Journal,
		refreshes: make(chan chan struct{}),
		unsettled: map[string]int64{},
		inflight:  map[*Reservation]struct{}{},
		kick:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
	}
	if w.clock == nil {
		w.clock = clockwork.NewRealClock()
	}
	if w.tel == nil {
		w.tel = telemetry.Noop()
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.timeout <= 0 {
		w.timeout = DefaultCallTimeout
	}
	if w.retry <= 0 {
		w.retry = DefaultRetryInterval
	}
	if w.closeWait <= 0 {
		w.closeWait = 2 * w.timeout
	}
	w.tel.Metrics.ObservePendingSettles(func() int64 { return int64(w.Pending()) })
	return w
}

// Start loads the keys once (a store that does not answer is logged, and
// the loop keeps trying) and starts the loops: key refresh, hold expiry,
// retries.
func (w *Wallet) Start(ctx context.Context) {
	if err := w.loadKeys(ctx); err != nil {
		w.log.Warn("wallet: could not load the store's keys; retrying every key_refresh", slog.Any("error", err))
	}
	w.replayJournal(ctx)
	w.wg.Add(3)
	go func() { defer w.wg.Done(); w.keyLoop() }()
	go func() { defer w.wg.Done(); w.expiryLoop() }()
	go func() { defer w.wg.Done(); w.retryLoop() }()
}

// Close refuses new reservations, stops the loops, waits for the
// reservations in flight to be settled or released (at most CloseWait,
// and within ctx), then tries once more to land what is pending (within
// ctx). After it returns a request that ends does not call the store (the
// caller closes it next). A charge still pending then, or one whose
// request ends after Close (a handler that outlived the wait), is logged
// at ERROR with everything needed to apply it by hand ("unsettled
// charge"): the only ways a charge can be lost are a replica stopped while
// the store is down, or a request still running when the process exits.
func (w *Wallet) Close(ctx context.Context) {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	close(w.stop)
	w.mu.Unlock()
	w.wg.Wait()
	w.awaitInFlight(ctx)
	for w.Pending() > 0 && ctx.Err() == nil {
		if !w.flush(ctx) {
			// The store is still down: wait a retry interval (the clock's:
			// tests do not wait) or the end of ctx.
			select {
			case <-ctx.Done():
			case <-w.clock.After(w.retry):
			}
		}
	}
	w.mu.Lock()
	lost := w.pending
	w.pending = nil
	w.closed = true
	w.mu.Unlock()
	for _, op := range lost {
		if op.charge == nil {
			continue // a release: the hold expires by itself
		}
		if op.journaled {
			w.logUnsettled("unsettled charge: the store was unavailable until shutdown; kept in the journal "+
				w.journal.Path()+", applied at the next start", op.charge, nil)
			continue
		}
		w.logUnsettled("unsettled charge: the store was unavailable until shutdown; apply it by hand", op.charge, nil)
	}
	w.tel.Metrics.ObservePendingSettles(nil)
}

// logUnsettled logs at ERROR a charge the store did not take and that
// nobody will retry, with everything needed to apply it by hand.
func (w *Wallet) logUnsettled(msg string, c *store.Charge, err error) {
	attrs := []any{slog.String("request_id", c.RequestID), slog.String("tenant", c.Tenant), slog.String("model", c.Model),
		slog.Int64("amount_micros", c.AmountMicros), slog.Int64("input_tokens", c.InputTokens),
		slog.Int64("output_tokens", c.OutputTokens), slog.Bool("estimated", c.Estimated)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	}
	w.log.Error(msg, attrs...)
}

// Pending is the number of settles and releases waiting for the store.
func (w *Wallet) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// callCtx bounds one store call. It does not inherit the request's
// cancellation: a client that leaves must not leave a hold half-written or
// a charge unrecorded.
func (w *Wallet) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
}

// unavailable reports a store failure worth retrying.
func unavailable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

package wallet_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/money"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
)

// faultyStore is a real store that can be made unavailable: down fails
// every call before it reaches the database; lose lets a call commit and
// then loses its answer, as a connection dropped after COMMIT does.
type faultyStore struct {
	*store.Store
	down, lose atomic.Bool
	// refuse, when set, fails a settle with the error it returns for the
	// request (nil: the settle goes on).
	refuse atomic.Pointer[func(requestID string) error]
	mu     sync.Mutex
	calls  map[string]int
}

var errDown = fmt.Errorf("%w: test: connection refused", store.ErrUnavailable)

func (f *faultyStore) count(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
}

func (f *faultyStore) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *faultyStore) Hold(ctx context.Context, h store.Hold) error {
	f.count("hold")
	if f.down.Load() {
		return errDown
	}
	err := f.Store.Hold(ctx, h)
	if err == nil && f.lose.Load() {
		return errDown
	}
	return err
}

func (f *faultyStore) Settle(ctx context.Context, c store.Charge) (store.Settlement, error) {
	f.count("settle")
	if f.down.Load() {
		return store.Settlement{}, errDown
	}
	if refuse := f.refuse.Load(); refuse != nil {
		if err := (*refuse)(c.RequestID); err != nil {
			return store.Settlement{}, err
		}
	}
	st, err := f.Store.Settle(ctx, c)
	if err == nil && f.lose.Load() {
		return store.Settlement{}, errDown
	}
	return st, err
}

func (f *faultyStore) Release(ctx context.Context, id string) (bool, error) {
	f.count("release")
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.Release(ctx, id)
}

func (f *faultyStore) ExpireHolds(ctx context.Context, now time.Time) (int, error) {
	f.count("expire")
	if f.down.Load() {
		return 0, errDown
	}
	return f.Store.ExpireHolds(ctx, now)
}

func (f *faultyStore) Keys(ctx context.Context) ([]store.KeyRecord, error) {
	f.count("keys")
	if f.down.Load() {
		return nil, errDown
	}
	return f.Store.Keys(ctx)
}

// fixture is a wallet on a real SQLite store, on a fake clock.
type fixture struct {
	t     *testing.T
	st    *faultyStore
	w     *wallet.Wallet
	cfg   *config.Config
	clock *clockwork.FakeClock
	n     int
}

const fixtureConfig = `auth:
  keys: [{id: k, tenant: acme, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]
store: {key_refresh: 10s}
billing: {hold_ttl: 4m %s}
channels:
  - {id: a, base_url: "http://127.0.0.1:1/v1"}
models:
  - name: m
    chain: [{channel: a, price: {input: 0.1, output: 0.2}}]
    price: {input: 1, output: 2}
    reserve_output_tokens: 100
`

// openFixture parses fixtureConfig with billing and opens a store on a
// fake clock, with tenant acme and no balance; the store closes when t
// ends.
func openFixture(t *testing.T, billing string) (*config.Config, *clockwork.FakeClock, *store.Store) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(fixtureConfig, billing)), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := clockwork.NewFakeClockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	s, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "w.db"), Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateTenant(context.Background(), "acme", "test"); err != nil {
		t.Fatal(err)
	}
	return cfg, clock, s
}

func newFixture(t *testing.T, billing string) *fixture {
	t.Helper()
	cfg, clock, s := openFixture(t, billing)
	f := &fixture{t: t, st: &faultyStore{Store: s}, cfg: cfg, clock: clock}
	f.w = wallet.New(wallet.Options{Store: f.st, Config: func() *config.Config { return cfg }, Clock: clock})
	f.w.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.w.Close(ctx)
	})
	return f
}

func (f *fixture) topUp(micros int64) {
	f.t.Helper()
	if _, err := f.st.Store.TopUp(context.Background(), "acme", micros, "test"); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) tenant() store.Tenant {
	f.t.Helper()
	tn, err := f.st.Store.Tenant(context.Background(), "acme")
	if err != nil {
		f.t.Fatal(err)
	}
	return tn
}

// reserve reserves for a body of bodyBytes with the given max_tokens (-1:
// none).
func (f *fixture) reserve(bodyBytes int, maxTokens int64) (*wallet.Reservation, error) {
	f.n++
	return f.w.Reserve(context.Background(), wallet.Request{
		RequestID: fmt.Sprintf("req-%d", f.n), Tenant: "acme", Config: f.cfg, Model: f.cfg.Model("m"),
		Sizing: wallet.Sizing{BodyBytes: bodyBytes, MaxTokens: max(maxTokens, 0), MaxTokensPresent: maxTokens >= 0},
	})
}

// advance moves the fake clock once the wallet's three loops (keys,
// expiry, retries) wait on it, so no timer is created after the jump.
func (f *fixture) advance(d time.Duration) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.clock.BlockUntilContext(ctx, 3); err != nil {
		f.t.Fatalf("the wallet's loops never waited on the clock: %v", err)
	}
	f.clock.Advance(d)
}

// waitFor waits for cond (a condition, never the passing of time),
// checked every 10 ms: conditions here cost a query or a request.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Poll{Every: 10 * time.Millisecond}.Eventually(t, cond, what)
}

// Why: the hold is sized from the request (token limit, else the model's
// estimate; input from the body size) at the list price, and the charge
// is the reported usage at the list price, not the channel's price.
func TestReserveAndSettle(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(1_000_000)
	r, err := f.reserve(400, 50) // 100 input tokens estimated, 50 output
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(100*1 + 50*2); r.Amount() != want || f.tenant().ReservedMicros != want {
		t.Fatalf("held %d (tenant reserved %d), want %d", r.Amount(), f.tenant().ReservedMicros, want)
	}
	charged := r.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 30, OutputTokens: 7})
	if want := (money.Price{Input: 1_000_000, Output: 2_000_000}).Cost(30, 7); charged != want {
		t.Fatalf("charged %d, want %d", charged, want)
	}
	tn := f.tenant()
	if tn.BalanceMicros != 1_000_000-charged || tn.ReservedMicros != 0 {
		t.Fatalf("tenant %+v", tn)
	}
	led, _ := f.st.Store.Ledger(context.Background(), "acme", 1)
	if e := led[0]; e.RequestID != "req-1" || e.AmountMicros != -charged || e.InputTokens != 30 || e.OutputTokens != 7 || e.Estimated || e.Model != "m" {
		t.Fatalf("ledger row %+v", e)
	}
	// Without a token limit the model's reserve_output_tokens is assumed.
	r2, err := f.reserve(8, -1)
	if err != nil || r2.Amount() != 2*1+100*2 {
		t.Fatalf("default reservation %v, %v", r2.Amount(), err)
	}
	r2.Finish(context.Background(), wallet.Outcome{})
}

// Why: an unanswered request (a failure, hopgate's own error, a client
// gone before anything was committed) is released, never charged.
func TestUnansweredIsReleased(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r, err := f.reserve(40, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Finish(context.Background(), wallet.Outcome{Answered: false, UsagePresent: true, OutputTokens: 99}); got != 0 {
		t.Fatalf("charged %d for an unanswered request", got)
	}
	if tn := f.tenant(); tn.BalanceMicros != 10_000 || tn.ReservedMicros != 0 {
		t.Fatalf("tenant %+v", tn)
	}
	// A second Finish changes nothing.
	r.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, OutputTokens: 5})
	if tn := f.tenant(); tn.BalanceMicros != 10_000 {
		t.Fatalf("second Finish charged: %+v", tn)
	}
}

// Why: a stream cut before its usage report is charged for what was
// delivered, by the documented estimate.
func TestEstimateWhenNoUsage(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r, err := f.reserve(41, 100)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Finish(context.Background(), wallet.Outcome{Answered: true, TextBytes: 21, ToolCallFrames: 2})
	// input ceil(41/4) = 11, output ceil(21/4) + 2 = 8
	if want := int64(11*1 + 8*2); got != want {
		t.Fatalf("charged %d, want %d", got, want)
	}
	led, _ := f.st.Store.Ledger(context.Background(), "acme", 1)
	if e := led[0]; !e.Estimated || e.InputTokens != 11 || e.OutputTokens != 8 {
		t.Fatalf("ledger row %+v", e)
	}
}

// Why: the balance decides: a reservation that does not fit is refused
// (402), and so is a tenant without a wallet.
func TestDenied(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(199)
	if _, err := f.reserve(4, 100); !errors.Is(err, wallet.ErrInsufficientBalance) { // 1 + 200
		t.Fatalf("err %v, want insufficient balance", err)
	}
	r, err := f.reserve(4, 99) // 1 + 198 fits exactly
	if err != nil {
		t.Fatal(err)
	}
	defer r.Finish(context.Background(), wallet.Outcome{})
	_, err = f.w.Reserve(context.Background(), wallet.Request{RequestID: "x", Tenant: "nobody", Config: f.cfg, Model: f.cfg.Model("m")})
	if !errors.Is(err, wallet.ErrNoWallet) {
		t.Fatalf("unknown tenant: %v", err)
	}
}

// Why: a panic in the handler releases the hold and still panics.
func TestGuardReleasesOnPanic(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", v)
			}
		}()
		defer r.Guard()
		panic("boom")
	}()
	if tn := f.tenant(); tn.ReservedMicros != 0 || tn.BalanceMicros != 10_000 {
		t.Fatalf("tenant %+v", tn)
	}
}

// Why: a settle the store could not take is retried until it lands, and a
// settle whose answer was lost after COMMIT lands exactly once.
func TestSettleRetriedUntilItLands(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r1, _ := f.reserve(4, 10)
	r2, _ := f.reserve(4, 10)
	f.st.down.Store(true)
	c1 := r1.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 1})
	f.st.down.Store(false)
	f.st.lose.Store(true)
	c2 := r2.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 2, OutputTokens: 2})
	f.st.lose.Store(false)
	if f.w.Pending() != 2 || f.w.Unsettled("acme") != c1+c2 {
		t.Fatalf("pending %d, unsettled %d", f.w.Pending(), f.w.Unsettled("acme"))
	}
	f.st.down.Store(true)
	f.advance(wallet.DefaultRetryInterval) // a round while still down lands nothing
	waitFor(t, "a retry round", func() bool { return f.st.Calls("settle") >= 3 })
	if f.w.Pending() != 2 {
		t.Fatalf("pending %d while the store is down", f.w.Pending())
	}
	f.st.down.Store(false)
	for f.w.Pending() > 0 {
		f.advance(wallet.DefaultRetryInterval)
		waitFor(t, "the next retry round", func() bool { return f.st.Calls("settle") >= 4 })
	}
	tn := f.tenant()
	if tn.BalanceMicros != 10_000-c1-c2 || tn.ReservedMicros != 0 || f.w.Unsettled("acme") != 0 {
		t.Fatalf("tenant %+v, unsettled %d", tn, f.w.Unsettled("acme"))
	}
	led, _ := f.st.Store.Ledger(context.Background(), "acme", 0)
	if len(led) != 3 { // top-up and two charges, none twice
		t.Fatalf("ledger %+v", led)
	}
	if err := f.st.Store.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Why: fail_closed refuses while the store is down, and the hold that may
// have been written before the answer was lost is released afterwards.
func TestFailClosed(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	f.st.lose.Store(true) // the hold commits, its answer is lost
	if _, err := f.reserve(4, 10); !errors.Is(err, wallet.ErrUnavailable) {
		t.Fatalf("err %v, want unavailable", err)
	}
	f.st.lose.Store(false)
	if f.tenant().ReservedMicros == 0 || f.w.Pending() != 1 {
		t.Fatalf("the lost hold should be there and its release pending: %+v, %d", f.tenant(), f.w.Pending())
	}
	// The next successful store call wakes the retries at once.
	r, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	r.Finish(context.Background(), wallet.Outcome{})
	waitFor(t, "the release", func() bool { return f.w.Pending() == 0 })
	if tn := f.tenant(); tn.ReservedMicros != 0 || tn.BalanceMicros != 10_000 {
		t.Fatalf("tenant %+v", tn)
	}
}

// Why: fail_open serves on credit while the store is down, at most
// fail_open_credit per tenant on this replica, and every charge lands
// when the store is back.
func TestFailOpenCredit(t *testing.T) {
	f := newFixture(t, ", on_store_error: fail_open, fail_open_credit: 0.000402") // exactly two reservations of 201
	f.topUp(10_000)
	f.st.down.Store(true)
	var served []*wallet.Reservation
	for {
		r, err := f.reserve(4, 100) // 201 each
		if err != nil {
			if !errors.Is(err, wallet.ErrUnavailable) {
				t.Fatal(err)
			}
			break
		}
		if !r.OnCredit() {
			t.Fatal("served without credit while down")
		}
		served = append(served, r)
	}
	if len(served) != 2 || f.w.Unsettled("acme") != 402 {
		t.Fatalf("served %d on credit, unsettled %d; want 2 and 402", len(served), f.w.Unsettled("acme"))
	}
	var total int64
	for _, r := range served {
		total += r.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 10, OutputTokens: 20})
	}
	if f.w.Unsettled("acme") != total {
		t.Fatalf("unsettled %d, want the charges %d", f.w.Unsettled("acme"), total)
	}
	f.st.down.Store(false)
	f.advance(wallet.DefaultRetryInterval)
	waitFor(t, "the charges to land", func() bool { return f.w.Pending() == 0 })
	if tn := f.tenant(); tn.BalanceMicros != 10_000-total || tn.ReservedMicros != 0 || f.w.Unsettled("acme") != 0 {
		t.Fatalf("tenant %+v", tn)
	}
}

// Why: keys issued at run time authenticate from a snapshot refreshed every
// key_refresh; a revoked key disappears at the next refresh.
func TestKeySnapshot(t *testing.T) {
	f := newFixture(t, "")
	secret := "hg-test-secret"
	sum := sha256.Sum256([]byte(secret))
	if _, found, loaded := f.w.LookupKey(sum); found || !loaded {
		t.Fatalf("found %v loaded %v before the key exists", found, loaded)
	}
	if err := f.st.Store.AddKey(context.Background(), store.KeyRecord{KeyID: "k1", Tenant: "acme", SHA256: hex.EncodeToString(sum[:])}, "test"); err != nil {
		t.Fatal(err)
	}
	f.advance(10 * time.Second)
	waitFor(t, "the refresh", func() bool { _, found, _ := f.w.LookupKey(sum); return found })
	if k, _, _ := f.w.LookupKey(sum); k != (wallet.StoreKey{ID: "k1", Tenant: "acme"}) {
		t.Fatalf("key %+v", k)
	}
	if err := f.st.Store.RevokeKey(context.Background(), "k1", "test"); err != nil {
		t.Fatal(err)
	}
	f.w.Refresh(context.Background())
	if _, found, _ := f.w.LookupKey(sum); found {
		t.Fatal("revoked key still in the snapshot")
	}
}

// Why: the hold of a replica that died expires: the wallet's sweep
// releases it once hold_ttl has passed on its clock, not before.
func TestExpirySweep(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r, err := f.reserve(4, 10) // not finished: its replica "died"
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's Close would wait for it (this wallet did not die).
	defer r.Finish(context.Background(), wallet.Outcome{})
	f.advance(time.Minute) // one sweep (hold_ttl 4m / 4), nothing expired yet
	waitFor(t, "a sweep", func() bool { return f.st.Calls("expire") >= 1 })
	if f.tenant().ReservedMicros == 0 {
		t.Fatal("released before hold_ttl")
	}
	for i := 2; f.tenant().ReservedMicros != 0; i++ {
		if i > 5 {
			t.Fatal("not released after hold_ttl and a sweep")
		}
		f.advance(time.Minute)
		waitFor(t, "the next sweep", func() bool { return f.st.Calls("expire") >= i })
	}
	if f.clock.Since(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)) < 4*time.Minute {
		t.Fatal("released before hold_ttl")
	}
}

// Why: Close ends the three loops, lands what the store takes again (a
// charge owed is not dropped at shutdown), and logs each charge the store
// still cannot take, and each of a request that ends after Close gave up
// waiting for it, as "unsettled charge" at ERROR with what is needed to
// apply it by hand: the ways DESIGN §9's "no charge lost" can give. After
// Close the store is not called any more: the gateway closes it next.
func TestCloseLandsOrLogsPending(t *testing.T) {
	cfg, clock, s := openFixture(t, "")
	if _, err := s.TopUp(context.Background(), "acme", 10_000, "test"); err != nil {
		t.Fatal(err)
	}
	st := &faultyStore{Store: s}
	var logs testkit.SyncBuffer
	waiting := newLogWatch(slog.NewJSONHandler(&logs, nil), "wallet: waiting for")
	before := goleak.IgnoreCurrent() // the store's goroutines, not the wallet's
	w := wallet.New(wallet.Options{Store: st, Config: func() *config.Config { return cfg }, Clock: clock,
		Logger: slog.New(waiting)})
	w.Start(context.Background())
	var rs []*wallet.Reservation
	for _, id := range []string{"req-landed", "req-lost", "req-late"} {
		r, err := w.Reserve(context.Background(), wallet.Request{RequestID: id, Tenant: "acme", Config: cfg,
			Model: cfg.Model("m"), Sizing: wallet.Sizing{BodyBytes: 4, MaxTokens: 10, MaxTokensPresent: true}})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	st.down.Store(true)
	landed := rs[0].Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 3})
	lost := rs[1].Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 4})
	st.down.Store(false)
	if w.Pending() != 2 {
		t.Fatalf("pending %d, want 2", w.Pending())
	}

	// The store is back for the first charge, not for the second; Close
	// gives up on it when its context ends (here: at the refusal).
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
	defer cancel()
	refuse := func(id string) error {
		if id != "req-lost" {
			return nil
		}
		cancel()
		return errDown
	}
	st.refuse.Store(&refuse)
	// req-late is still in flight: Close waits CloseWait for it (on the
	// clock, its loops gone: the one timer), then gives up on it.
	advanced := make(chan error, 1)
	go func() {
		bctx, bcancel := context.WithTimeout(context.Background(), testkit.Bound)
		defer bcancel()
		select {
		case <-waiting.seen:
		case <-bctx.Done():
			advanced <- errors.New("Close did not say it waits")
			return
		}
		err := clock.BlockUntilContext(bctx, 1)
		clock.Advance(wallet.DefaultCloseWait)
		advanced <- err
	}()
	w.Close(ctx)
	if err := testkit.Recv(t, advanced, "Close's wait"); err != nil {
		t.Fatalf("Close never waited on the clock for the request in flight: %v", err)
	}

	if tn, err := s.Tenant(context.Background(), "acme"); err != nil || tn.BalanceMicros != 10_000-landed {
		t.Fatalf("tenant %+v, %v after Close; want balance %d (the landed charge only)", tn, err, 10_000-landed)
	}
	if got := chargeLogs(&logs, "wallet: a request still in flight at shutdown"); len(got) != 1 || got[0].RequestID != "req-late" ||
		got[0].Level != "ERROR" {
		t.Fatalf("in-flight logs %+v, want one for req-late; logs:\n%s", got, logs.String())
	}
	// The request that ends after Close: its charge is logged at once,
	// and the store (maybe closed by now) is left alone.
	settles := st.Calls("settle")
	late := rs[2].Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 5})
	if st.Calls("settle") != settles {
		t.Fatal("a request that ended after Close settled on the store")
	}
	want := []chargeLog{{"", "ERROR", "req-lost", "acme", "m", lost, 4}, {"", "ERROR", "req-late", "acme", "m", late, 5}}
	got := chargeLogs(&logs, "unsettled charge")
	if len(got) != 2 || got[0].withMsg("") != want[0] || got[1].withMsg("") != want[1] || w.Pending() != 0 {
		t.Fatalf("unsettled charge logs %+v (pending %d), want %+v; logs:\n%s", got, w.Pending(), want, logs.String())
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("the wallet's loops outlived Close: %v", err)
	}
}

// Why: the gateway closes the wallet once its drain timeout has cut the
// requests still running, and closes the store right after; their
// handlers settle on their way out. Close waits for them, so their
// charges land in the store, and meanwhile refuses new reservations
// without a hold on the store.
func TestCloseWaitsForRequestsInFlight(t *testing.T) {
	f := newFixture(t, "")
	f.w.Close(context.Background()) // the fixture's wallet, replaced by one that logs here
	var logs testkit.SyncBuffer
	waiting := newLogWatch(slog.NewJSONHandler(&logs, nil), "wallet: waiting for")
	f.w = wallet.New(wallet.Options{Store: f.st, Config: func() *config.Config { return f.cfg }, Clock: f.clock,
		Logger: slog.New(waiting)})
	f.w.Start(context.Background())
	f.topUp(10_000)
	r, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { f.w.Close(context.Background()); close(closed) }()
	testkit.Recv(t, waiting.seen, "Close to wait for the request in flight")
	holds := f.st.Calls("hold")
	if _, err := f.reserve(4, 10); !errors.Is(err, wallet.ErrUnavailable) || f.st.Calls("hold") != holds {
		t.Fatalf("a reservation while Close waits: %v, %d holds on the store; want ErrUnavailable and none",
			err, f.st.Calls("hold")-holds)
	}
	select {
	case <-closed:
		t.Fatal("Close returned with a request in flight")
	default:
	}
	charged := r.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 3})
	testkit.Recv(t, closed, "Close to return once the request settled")
	if tn := f.tenant(); tn.BalanceMicros != 10_000-charged || tn.ReservedMicros != 0 {
		t.Fatalf("tenant %+v after Close; want the charge %d applied, nothing reserved", tn, charged)
	}
	if strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("error logged:\n%s", logs.String())
	}
}

// Why: a request that ends unanswered after Close gave up waiting for it
// must not call the store either (the gateway closes it next): its hold
// is left to expire after billing.hold_ttl.
func TestReleaseAfterCloseLeavesTheStore(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	r, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Close gives up on r at once
	f.w.Close(ctx)
	releases := f.st.Calls("release")
	r.Finish(context.Background(), wallet.Outcome{})
	if n := f.st.Calls("release") - releases; n != 0 {
		t.Fatalf("a request that ended after Close released its hold on the store (%d calls)", n)
	}
}

// Why: a charge the store refuses (not an outage: nothing retries it) is
// logged at ERROR with everything needed to apply it by hand, like one
// still pending at shutdown.
func TestRefusedChargeIsLoggedWhole(t *testing.T) {
	f := newFixture(t, "")
	var logs testkit.SyncBuffer
	f.w.Close(context.Background()) // the fixture's wallet, replaced by one that logs here
	f.w = wallet.New(wallet.Options{Store: f.st, Config: func() *config.Config { return f.cfg }, Clock: f.clock,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	f.topUp(10_000)
	r, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.reserve(4, 10)
	if err != nil {
		t.Fatal(err)
	}
	f.st.down.Store(true)
	retried := r2.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 6})
	f.st.down.Store(false)
	refuse := func(string) error { return fmt.Errorf("%w: test: refused", store.ErrInvalid) }
	f.st.refuse.Store(&refuse)
	charged := r.Finish(context.Background(), wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 5})
	want := chargeLog{"", "ERROR", "req-1", "acme", "m", charged, 5}
	if got := chargeLogs(&logs, "wallet: the store refused a charge"); len(got) != 1 || got[0].withMsg("") != want {
		t.Fatalf("refused charge logs %+v, want one: %+v; logs:\n%s", got, want, logs.String())
	}
	// A pending charge the store refuses when retried (here at Close) is
	// dropped the same way.
	f.w.Close(context.Background())
	want = chargeLog{"", "ERROR", "req-2", "acme", "m", retried, 6}
	if got := chargeLogs(&logs, "wallet: the store refused a retried charge"); len(got) != 1 || got[0].withMsg("") != want || f.w.Pending() != 0 {
		t.Fatalf("refused retried charge logs %+v (pending %d), want one: %+v; logs:\n%s", got, f.w.Pending(), want, logs.String())
	}
}

// chargeLog is what a log record of a charge nobody retries must carry.
type chargeLog struct {
	Msg          string `json:"msg"`
	Level        string `json:"level"`
	RequestID    string `json:"request_id"`
	Tenant       string `json:"tenant"`
	Model        string `json:"model"`
	AmountMicros int64  `json:"amount_micros"`
	OutputTokens int64  `json:"output_tokens"`
}

func (c chargeLog) withMsg(m string) chargeLog { c.Msg = m; return c }

// chargeLogs returns the JSON log records whose message starts with prefix.
func chargeLogs(logs *testkit.SyncBuffer, prefix string) []chargeLog {
	var out []chargeLog
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r chargeLog
		if json.Unmarshal([]byte(line), &r) == nil && strings.HasPrefix(r.Msg, prefix) {
			out = append(out, r)
		}
	}
	return out
}

func (f *faultyStore) MarkDelivering(ctx context.Context, c store.Charge) (bool, error) {
	f.count("deliver")
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.MarkDelivering(ctx, c)
}

func (f *faultyStore) RecordInDoubt(ctx context.Context, c store.Charge, since time.Time) (bool, error) {
	f.count("doubt")
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.RecordInDoubt(ctx, c, since)
}

package wallet_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/store"
	"github.com/hopgate/hopgate/internal/testkit"
)

// replica is one "process" of a wallet with a journal in dir, on the
// fixture's store: start it again (a restart) with the same dir.
func replica(t *testing.T, f *fixture, dir string) (*wallet.Wallet, *wallet.Journal) {
	t.Helper()
	j, err := wallet.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	w := wallet.New(wallet.Options{Store: f.st, Config: func() *config.Config { return f.cfg }, Clock: f.clock, Journal: j})
	w.Start(context.Background())
	return w, j
}

// stop closes w as a shutdown does (the store may be down: Close gives up
// at the end of its context) and its journal, as the process exits.
func stop(w *wallet.Wallet, j *wallet.Journal) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	w.Close(ctx)
	j.Close()
}

func reserveOn(t *testing.T, f *fixture, w *wallet.Wallet, id string) *wallet.Reservation {
	t.Helper()
	r, err := w.Reserve(context.Background(), wallet.Request{RequestID: id, Tenant: "acme", Config: f.cfg,
		Model: f.cfg.Model("m"), Sizing: wallet.Sizing{BodyBytes: 4, MaxTokens: 10, MaxTokensPresent: true}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var answered = wallet.Outcome{Answered: true, UsagePresent: true, InputTokens: 1, OutputTokens: 4}

func journalBytes(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, wallet.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func charges(t *testing.T, f *fixture) []store.LedgerEntry {
	t.Helper()
	led, err := f.st.Store.Ledger(context.Background(), "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LedgerEntry
	for _, e := range led {
		if e.Kind == store.KindCharge {
			out = append(out, e)
		}
	}
	return out
}

func inDoubt(t *testing.T, f *fixture) []store.InDoubt {
	t.Helper()
	d, err := f.st.Store.InDoubtCharges(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Why: issue 35, item 3: a replica stopped while the store is down kept
// its charges only in an ERROR log line. With the journal they survive the
// shutdown and are applied once at the next start, and the journal is
// empty afterwards; a third start applies nothing twice.
func TestJournalAppliesUnsettledChargesAtTheNextStart(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	dir := t.TempDir()
	w, j := replica(t, f, dir)
	r := reserveOn(t, f, w, "req-1")
	f.st.down.Store(true)
	charged := r.Finish(context.Background(), answered)
	stop(w, j) // the store is still down: the charge stays in the journal
	f.st.down.Store(false)
	if n := len(charges(t, f)); n != 0 || journalBytes(t, dir) == 0 {
		t.Fatalf("%d charges, journal of %d bytes before the restart", n, journalBytes(t, dir))
	}

	for start := 2; start <= 3; start++ {
		w, j = replica(t, f, dir)
		c := charges(t, f)
		if len(c) != 1 || c[0].RequestID != "req-1" || c[0].AmountMicros != -charged {
			t.Fatalf("start %d: charges %+v, want req-1 once (%d)", start, c, charged)
		}
		if journalBytes(t, dir) != 0 || j.Open() != 0 {
			t.Fatalf("start %d: the journal was not drained: %d bytes, %d open", start, journalBytes(t, dir), j.Open())
		}
		stop(w, j)
	}
	if tn := f.tenant(); tn.BalanceMicros != 10_000-charged || tn.ReservedMicros != 0 {
		t.Fatalf("tenant %+v", tn)
	}
	if err := f.st.Store.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Why: the journal is also how a charge lands when the store returns while
// the process still runs: the retry loop settles it and ends its record.
func TestJournalDrainsWhenTheStoreReturns(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	dir := t.TempDir()
	w, j := replica(t, f, dir)
	defer stop(w, j)
	r := reserveOn(t, f, w, "req-1")
	f.st.down.Store(true)
	r.Finish(context.Background(), answered)
	if j.Open() != 1 {
		t.Fatalf("journal holds %d open, want the charge", j.Open())
	}
	f.st.down.Store(false)
	waitFor(t, "the retry to land", func() bool {
		f.clock.Advance(wallet.DefaultRetryInterval)
		return w.Pending() == 0
	})
	if len(charges(t, f)) != 1 || j.Open() != 0 || journalBytes(t, dir) != 0 {
		t.Fatalf("charges %d, journal open %d (%d bytes)", len(charges(t, f)), j.Open(), journalBytes(t, dir))
	}
}

// Why: a commit whose answer was lost, journaled as unsettled, replayed at
// the next start: Settle is idempotent by request id, so it charges once.
func TestJournalReplayOfALandedChargeChargesOnce(t *testing.T) {
	f := newFixture(t, "")
	f.topUp(10_000)
	dir := t.TempDir()
	w, j := replica(t, f, dir)
	r := reserveOn(t, f, w, "req-1")
	f.st.lose.Store(true) // commits, then the answer is lost
	r.Finish(context.Background(), answered)
	f.st.down.Store(true)
	stop(w, j)
	f.st.lose.Store(false)
	f.st.down.Store(false)
	w, j = replica(t, f, dir)
	defer stop(w, j)
	if c := charges(t, f); len(c) != 1 || j.Open() != 0 {
		t.Fatalf("charges %+v, journal open %d", c, j.Open())
	}
}

// Why: the delivery rule: Deliver marks the hold before the last write; a
// replica killed before Finish leaves a delivering hold that expires into
// an in-doubt row (not a release, not a charge). When the store is down
// at Deliver, the mark goes to the journal, and the next start records the
// doubt and releases the hold.
func TestDeliverLeavesTheChargeInDoubtAfterAKill(t *testing.T) {
	t.Run("marked on the hold", func(t *testing.T) {
		f := newFixture(t, "")
		f.topUp(10_000)
		r := reserveOn(t, f, f.w, "req-1")
		r.Deliver(context.Background(), answered)
		// The kill: no Finish. The hold expires on a surviving replica.
		if _, err := f.st.Store.ExpireHolds(context.Background(), f.clock.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		d := inDoubt(t, f)
		if len(d) != 1 || d[0].RequestID != "req-1" || d[0].OutputTokens != 4 || len(charges(t, f)) != 0 || f.tenant().ReservedMicros != 0 {
			t.Fatalf("in doubt %+v, charges %+v, tenant %+v", d, charges(t, f), f.tenant())
		}
		r.Guard() // the fixture's Close must not wait for it
	})
	t.Run("in the journal while the store is down", func(t *testing.T) {
		f := newFixture(t, "")
		f.topUp(10_000)
		dir := t.TempDir()
		w, j := replica(t, f, dir)
		r := reserveOn(t, f, w, "req-1")
		f.st.down.Store(true)
		r.Deliver(context.Background(), answered)
		if j.Open() != 1 {
			t.Fatalf("journal open %d, want the doubt", j.Open())
		}
		// The kill: no Finish, no Close; the process's file goes away.
		j.Close()
		f.st.down.Store(false)
		w2, j2 := replica(t, f, dir)
		defer stop(w2, j2)
		d := inDoubt(t, f)
		if len(d) != 1 || d[0].RequestID != "req-1" || len(charges(t, f)) != 0 || f.tenant().ReservedMicros != 0 || j2.Open() != 0 {
			t.Fatalf("in doubt %+v, charges %+v, tenant %+v, journal open %d", d, charges(t, f), f.tenant(), j2.Open())
		}
		r.Guard()
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Bound)
		defer cancel()
		w.Close(ctx)
	})
	t.Run("finished normally: nothing in doubt, nothing journaled", func(t *testing.T) {
		f := newFixture(t, "")
		f.topUp(10_000)
		dir := t.TempDir()
		w, j := replica(t, f, dir)
		defer stop(w, j)
		r := reserveOn(t, f, w, "req-1")
		f.st.down.Store(true)
		r.Deliver(context.Background(), answered) // journaled as a doubt
		f.st.down.Store(false)
		r.Finish(context.Background(), answered) // settled: the doubt ends
		if _, err := f.st.Store.ExpireHolds(context.Background(), f.clock.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if len(inDoubt(t, f)) != 0 || len(charges(t, f)) != 1 || j.Open() != 0 || journalBytes(t, dir) != 0 {
			t.Fatalf("in doubt %+v, charges %+v, journal open %d", inDoubt(t, f), charges(t, f), j.Open())
		}
	})
}

// Why: each replica replays only its own journal: a second process on the
// same directory is refused at start, with a message naming the key.
func TestJournalIsOneProcesss(t *testing.T) {
	dir := t.TempDir()
	j, err := wallet.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := wallet.OpenJournal(dir); err == nil {
		t.Fatal("a second journal on the same directory was opened")
	}
}

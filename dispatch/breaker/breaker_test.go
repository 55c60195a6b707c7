package breaker

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func TestCountPolicy(t *testing.T) {
	runScripts(t, Policy{}, []scriptCase{
		{"three failures in five minutes open",
			"the contract's opening rule: 3 failures within the sliding 5 min window",
			"F +1m F closed +3m59s F open deny"},
		{"third failure after the first left the window",
			"the window slides: a failure older than 5 min no longer counts",
			"F +1m F closed +4m1s F closed F open"},
		{"failure exactly window old has left",
			"pins the boundary: the window is (now-5m, now]",
			"F +1m F +4m F closed"},
		{"successes do not reset the count",
			"failures in window, not consecutive failures: a flapping channel still opens",
			"F S*5 F S*5 F open"},
		{"open skips for the cooldown",
			"an open channel is out of chains for 60 s before anything is sent",
			"F*3 open reopen=60s deny +59s deny open reopen=1s +1s half-open"},
		{"exactly one trial in half-open",
			"a recovering channel gets one request, not a thundering herd",
			"F*3 +60s A deny deny half-open dS closed"},
		{"trial success closes and clears the window",
			"after recovery the channel starts from zero failures",
			"F*3 +60s A dS closed F F closed F open"},
		{"trial failure re-opens for another cooldown",
			"a still-broken channel stays out another 60 s",
			"F*3 +60s A dF open reopen=60s +59s deny +1s half-open"},
		{"excluded outcomes change nothing",
			"client cancellations and client errors never count against a channel",
			"X*10 F F X*10 closed"},
		{"excluded trial releases the slot",
			"a cancelled trial must not leave the breaker half-open with no trial possible",
			"F*3 +60s A deny dX half-open A dS closed"},
	})
}

func TestRatePolicy(t *testing.T) {
	runScripts(t, Policy{Mode: RateMode}, []scriptCase{
		{"below MinRequests never opens",
			"nine failures out of nine is not enough evidence",
			"F*9 closed"},
		{"30 percent opens",
			"3/10 errors is strictly above 25 % with 10 requests",
			"S*7 F*3 open reopen=60s deny"},
		{"20 percent does not open",
			"2/10 errors is below the threshold",
			"S*8 F*2 closed"},
		{"exactly 25 percent does not open",
			"the threshold is strictly greater (3/12)",
			"S*9 F*3 closed"},
		{"success never opens",
			"only a failure can open: completing MinRequests with a success does not",
			"F*9 S closed F open"},
		{"old buckets roll out",
			"errors older than the 60 s window no longer count",
			"F*3 +1s S*7 +59s F closed"},
		{"buckets within the window still count",
			"the control for the case above: one second earlier the same errors open",
			"F*3 +1s S*7 +58s F open"},
		{"half-open closes after three successful trials",
			"three consecutive good trials are enough evidence",
			"S*7 F*3 +60s A dS half-open A dS half-open A deny dS closed"},
		{"half-open closes by cooldown/2 with a success",
			"with successful trials the channel is closed by 90 s after opening",
			"S*7 F*3 +60s A dS +29s half-open +1s closed"},
		{"success after cooldown/2 closes at once",
			"the cooldown/2 rule also applies when the success arrives late",
			"S*7 F*3 +60s +40s A dS closed"},
		{"half-open without success stays half-open",
			"time alone is not evidence of recovery",
			"S*7 F*3 +60s +5m half-open A dX half-open"},
		{"failed trial re-opens",
			"one failure in half-open sends the channel back out",
			"S*7 F*3 +60s A dS A dF open reopen=60s +60s half-open"},
		{"closing clears the window",
			"the errors that opened it are not held against the recovered channel",
			"S*7 F*3 +60s A dS A dS A dS closed F closed"},
	})
}

func TestRetryAfter(t *testing.T) {
	runScripts(t, Policy{}, []scriptCase{
		{"keeps a healthy channel out",
			"the provider said when to come back, even below the failure threshold",
			"R90s open reopen=90s deny +89s deny +1s half-open A dS closed"},
		{"capped at five minutes",
			"a hostile or broken Retry-After cannot remove a channel for long",
			"R1h reopen=5m +5m half-open"},
		{"extends an open breaker",
			"a longer Retry-After than the cooldown wins",
			"F*3 R2m reopen=2m +60s open +60s half-open"},
		{"never shortens an open breaker",
			"reopen is the max of the cooldown and Retry-After",
			"F*3 R10s reopen=60s +10s open +50s half-open"},
		{"half-open trial turned away",
			"a 429 on the trial keeps it out for the given time; the trial's own Done is then stale",
			"F*3 +60s A R30s open reopen=30s dF reopen=30s +30s half-open"},
		{"non-positive is ignored",
			"a missing or past Retry-After must not open anything",
			"R0s R-5s closed"},
	})
}

func TestStaleGeneration(t *testing.T) {
	runScripts(t, Policy{}, []scriptCase{
		{"slow success does not close an open breaker",
			"a request that started before the breaker opened must not flip it",
			"A F*3 open dS open deny"},
		{"slow success is not a half-open trial",
			"only the trial issued in half-open decides; an old ticket neither closes nor takes the slot",
			"A F*3 +60s half-open dS half-open A dF open"},
		{"slow failure does not re-open a recovered breaker",
			"failures from before recovery must not count against the fresh window",
			"A F*3 +60s A dS closed dF F F closed"},
	})
}

// A duplicate Done of an excluded trial must not release the slot now held by
// the next trial: ticket identity, not just generation, guards the slot.
func TestDuplicateTrialDone(t *testing.T) {
	for _, mode := range []Mode{CountMode, RateMode} {
		h := newHarness(t, Policy{Mode: mode})
		h.run("R1s +1s half-open")
		first, _ := h.b.Allow()
		h.b.Done(first, Excluded)
		second, ok := h.b.Allow()
		if !ok {
			t.Fatalf("%v: slot not released by Excluded", mode)
		}
		h.b.Done(first, Excluded)
		if _, ok := h.b.Allow(); ok {
			t.Fatalf("%v: duplicate Done released the second trial's slot", mode)
		}
		h.b.Done(first, Success)
		if h.b.State() != HalfOpen {
			t.Fatalf("%v: duplicate Done decided the trial", mode)
		}
		h.b.Done(second, Failure)
		if h.b.State() != Open {
			t.Fatalf("%v: second trial's failure ignored", mode)
		}
	}
}

// A half-open trial whose ticket never comes back (a leaked ticket, a
// request stuck past every timeout) must not hold the trial slot forever:
// after TrialTimeout the next request gets the slot, and the abandoned
// ticket's late Done decides nothing.
func TestTrialSlotTimeout(t *testing.T) {
	for _, mode := range []Mode{CountMode, RateMode} {
		h := newHarness(t, Policy{Mode: mode, TrialTimeout: 2 * time.Minute})
		h.run("R1s +1s half-open")
		lost, ok := h.b.Allow()
		if !ok {
			t.Fatalf("%v: no trial in half-open", mode)
		}
		h.clk.Advance(2*time.Minute - time.Nanosecond)
		if _, ok := h.b.Allow(); ok {
			t.Fatalf("%v: slot freed before TrialTimeout", mode)
		}
		h.clk.Advance(time.Nanosecond)
		next, ok := h.b.Allow()
		if !ok {
			t.Fatalf("%v: slot still held after TrialTimeout", mode)
		}
		h.b.Done(lost, Failure)
		if h.b.State() != HalfOpen {
			t.Fatalf("%v: the abandoned trial's late failure decided the state: %v", mode, h.b.State())
		}
		h.b.Done(next, Success)
		if mode == CountMode && h.b.State() != Closed {
			t.Fatalf("%v: the live trial's success did not close: %v", mode, h.b.State())
		}
	}
}

// The rate ring's size is bounded whatever the window: a library user may
// pass a day; the breaker keeps at most maxBuckets buckets and still
// counts the whole window.
func TestRateRingBounded(t *testing.T) {
	for _, w := range []time.Duration{time.Second, time.Minute, 10 * time.Minute, time.Hour, 24 * time.Hour} {
		r := newRateRing(w)
		if len(r.buckets) > maxBuckets {
			t.Errorf("window %v: %d buckets", w, len(r.buckets))
		}
		if got := time.Duration(len(r.buckets)) * r.width; got < w || got >= w+r.width {
			t.Errorf("window %v: %d buckets of %v cover %v", w, len(r.buckets), r.width, got)
		}
	}
	// A day-long window still opens on errors spread over hours.
	h := newHarness(t, Policy{Mode: RateMode, Window: 24 * time.Hour, MinRequests: 4})
	h.run("S +5h S +5h F +5h F")
	if h.b.State() != Open {
		t.Fatalf("errors spread over a day-long window did not open: %v", h.b.State())
	}
}

func TestForceTrial(t *testing.T) {
	runScripts(t, Policy{}, []scriptCase{
		{"does not change state by itself",
			"the dispatcher's last resort must not open the gate for others",
			"F*3 FT open deny reopen=60s"},
		{"success closes",
			"a fully-open chain recovers through the forced attempt",
			"F*3 +10s FT dS closed"},
		{"failure re-opens for a full cooldown from now",
			"a forced failure pushes the next half-open back",
			"F*3 +50s FT dF open reopen=60s"},
		{"failure never shortens Retry-After",
			"the provider's word still holds",
			"R5m FT dF reopen=5m"},
		{"does not take the half-open slot",
			"the regular trial still goes out",
			"F*3 +60s FT A deny dS closed dS closed"},
		{"stale after the cooldown elapsed",
			"a forced ticket is tied to the generation it was issued in",
			"F*3 FT +60s dS half-open"},
		{"on a closed breaker it is an ordinary request",
			"a race between 'all open' and a recovery must not skew counts",
			"FT dF FT dF closed FT dF open"},
	})
	clk := clockwork.NewFakeClockAt(t0)
	b := New("ch", Policy{}, WithClock(clk))
	if tk := b.ForceTrial(); tk.Forced() || tk.Trial() {
		t.Errorf("closed: ForceTrial ticket forced=%v trial=%v, want ordinary", tk.Forced(), tk.Trial())
	}
	b.RetryAfter(time.Minute)
	if tk := b.ForceTrial(); !tk.Forced() || !tk.Trial() {
		t.Errorf("open: ForceTrial ticket forced=%v trial=%v, want forced trial", tk.Forced(), tk.Trial())
	}
}

// Every state change reaches the callback exactly once, in order, with
// consecutive generations: metrics and spans are fed from it.
func TestTransitionsInOrder(t *testing.T) {
	h := newHarness(t, Policy{})
	h.run("F*3 +60s A dF +60s A dS R30s +30s A dS")
	type tr struct {
		from, to State
		reason   string
		at       time.Duration
		reopen   time.Duration // from t0; -1: zero
	}
	want := []tr{
		{Closed, Open, ReasonFailures, 0, 60 * time.Second},
		{Open, HalfOpen, ReasonCooldownElapsed, 60 * time.Second, -1},
		{HalfOpen, Open, ReasonTrialFailed, 60 * time.Second, 120 * time.Second},
		{Open, HalfOpen, ReasonCooldownElapsed, 120 * time.Second, -1},
		{HalfOpen, Closed, ReasonTrialSucceeded, 120 * time.Second, -1},
		{Closed, Open, ReasonRetryAfter, 120 * time.Second, 150 * time.Second},
		{Open, HalfOpen, ReasonCooldownElapsed, 150 * time.Second, -1},
		{HalfOpen, Closed, ReasonTrialSucceeded, 150 * time.Second, -1},
	}
	if len(h.trans) != len(want) {
		t.Fatalf("got %d transitions, want %d: %+v", len(h.trans), len(want), h.trans)
	}
	for i, w := range want {
		g := h.trans[i]
		wantReopen := time.Time{}
		if w.reopen >= 0 {
			wantReopen = t0.Add(w.reopen)
		}
		if g.Name != "ch" || g.From != w.from || g.To != w.to || g.Reason != w.reason ||
			!g.At.Equal(t0.Add(w.at)) || !g.ReopenAt.Equal(wantReopen) || g.Generation != uint64(i+2) {
			t.Errorf("transition %d = %+v, want %+v (generation %d)", i, g, w, i+2)
		}
	}
}

// The callback runs outside the lock, so it may read the breaker (a metrics
// hook reading ReopenAt) without deadlocking.
func TestCallbackMayCallBack(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var b *Breaker
	var seen []string
	b = New("ch", Policy{}, WithClock(clk), WithOnTransition(func(tr Transition) {
		seen = append(seen, tr.To.String()+"/"+b.State().String())
	}))
	b.RetryAfter(time.Second)
	clk.Advance(time.Second)
	b.State()
	if got := strings.Join(seen, " "); got != "open/open half-open/half-open" {
		t.Errorf("callback saw %q", got)
	}
}

// A panicking callback must not stop later transitions from being delivered.
func TestCallbackPanicDoesNotWedge(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	calls := 0
	b := New("ch", Policy{}, WithClock(clk), WithOnTransition(func(Transition) {
		calls++
		if calls == 1 {
			panic("boom")
		}
	}))
	func() {
		defer func() { _ = recover() }()
		b.RetryAfter(time.Second)
	}()
	clk.Advance(time.Second)
	if b.State() != HalfOpen || calls != 2 {
		t.Fatalf("state %v, calls %d; want half-open, 2", b.State(), calls)
	}
}

// Under concurrent use every transition is delivered once and generations
// arrive strictly increasing; run with -race.
func TestConcurrentTransitionsOrdered(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	var gens []uint64
	b := New("ch", Policy{Mode: RateMode, MinRequests: 2}, WithClock(clk), WithOnTransition(func(tr Transition) {
		mu.Lock()
		gens = append(gens, tr.Generation)
		mu.Unlock()
	}))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				if tk, ok := b.Allow(); ok {
					b.Done(tk, Outcome((i+g)%3))
				}
				if i%50 == 0 {
					b.RetryAfter(time.Millisecond)
				}
				if g == 0 && i%10 == 0 {
					clk.Advance(time.Second)
				}
			}
		})
	}
	wg.Wait()
	final := b.Snapshot().Generation
	mu.Lock()
	defer mu.Unlock()
	if uint64(len(gens)) != final-1 {
		t.Fatalf("delivered %d transitions, generation went 1 → %d", len(gens), final)
	}
	for i, g := range gens {
		if g != uint64(i+2) {
			t.Fatalf("transition %d has generation %d, want %d", i, g, i+2)
		}
	}
}

// /admin/breakers shows these fields in snake_case with readable states.
func TestSnapshotJSON(t *testing.T) {
	h := newHarness(t, Policy{})
	h.run("F F")
	s := h.b.Snapshot()
	if s.Failures != 2 || s.State != Closed || s.Generation != 1 {
		t.Errorf("snapshot %+v", s)
	}
	h.run("F")
	js, err := json.Marshal(h.b.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"ch","mode":"count","state":"open","reopen_at":"2026-01-02T03:05:05Z","failures":3,"requests":0,"errors":0,"trial_in_flight":false,"generation":2}`
	if string(js) != want {
		t.Errorf("JSON\n got %s\nwant %s", js, want)
	}

	r := newHarness(t, Policy{Mode: RateMode})
	r.run("S*4 F +1s A")
	s = r.b.Snapshot()
	if s.Requests != 5 || s.Errors != 1 || s.Failures != 0 || s.TrialInFlight {
		t.Errorf("rate snapshot %+v", s)
	}
}

// Zero fields take the contract's defaults, per mode.
func TestPolicyDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Policy
		want Policy
	}{
		{"zero is the count contract", Policy{},
			Policy{CountMode, 5 * time.Minute, 3, time.Minute, 0.25, 10, 5 * time.Minute}},
		{"rate window defaults to 60s", Policy{Mode: RateMode},
			Policy{RateMode, time.Minute, 3, time.Minute, 0.25, 10, 5 * time.Minute}},
		{"set fields are kept", Policy{Mode: RateMode, Window: 30 * time.Second, Cooldown: 5 * time.Second, Threshold: 0.5, MinRequests: 20, TrialTimeout: time.Minute},
			Policy{RateMode, 30 * time.Second, 3, 5 * time.Second, 0.5, 20, time.Minute}},
	}
	for _, tc := range tests {
		if got := tc.in.WithDefaults(); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, s := range []string{"", "count", "rate", "bogus"} {
		m, err := ParseMode(s)
		if (err != nil) != (s == "bogus") || (err == nil && s == "rate" && m != RateMode) {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
}

// The gauge and the admin page rely on these exact values and spellings.
func TestStateValues(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", HalfOpen: "half-open", Open: "open"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
	if Closed != 0 || HalfOpen != 1 || Open != 2 {
		t.Error("state values must be the metric values 0, 1, 2")
	}
}

package overload

import (
	"runtime/debug"
	"sync"
	"testing"
)

// Why: the budget is shared by every request of the process; concurrent
// acquisitions must never take it past its limit, and what is released
// comes back exactly.
func TestBudgetNeverOvershoots(t *testing.T) {
	b := NewBudget(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if b.Acquire(7) {
					if u := b.Used(); u > 1000 {
						t.Errorf("used %d over the limit", u)
					}
					mu.Lock()
					taken++
					mu.Unlock()
					b.Release(7)
				}
			}
		}()
	}
	wg.Wait()
	if b.Used() != 0 || taken == 0 {
		t.Fatalf("used %d after every release, %d acquisitions", b.Used(), taken)
	}
	if !b.Acquire(1000) || b.Acquire(1) || b.Denied() == 0 {
		t.Fatalf("a full budget admitted more, or denied nothing (denied %d)", b.Denied())
	}
}

// Why: a hold grows with a buffer and gives everything back at once; a
// nil budget (protection off) admits everything.
func TestHold(t *testing.T) {
	b := NewBudget(100)
	h := NewHold(b)
	if !h.Grow(60) || h.Grow(50) || !h.Grow(40) || h.Held() != 100 || b.Used() != 100 {
		t.Fatalf("held %d used %d", h.Held(), b.Used())
	}
	h.Release()
	h.Release() // twice is harmless
	if b.Used() != 0 || h.Held() != 0 {
		t.Fatalf("after release: used %d held %d", b.Used(), h.Held())
	}
	// Shrink gives back part of a hold (a body reader returning pooled
	// chunks), never more than is held.
	h.Grow(80)
	h.Shrink(30)
	if h.Held() != 50 || b.Used() != 50 {
		t.Fatalf("after shrink: held %d used %d", h.Held(), b.Used())
	}
	h.Shrink(500)
	if h.Held() != 0 || b.Used() != 0 {
		t.Fatalf("after shrinking past the hold: held %d used %d", h.Held(), b.Used())
	}
	off := NewHold(nil)
	if !off.Grow(1 << 40) {
		t.Fatal("a nil budget refused")
	}
	off.Release()
}

// Why: admission sheds past each bound at once, counts back on leave, and
// says overloaded exactly while a new request would be shed.
func TestAdmission(t *testing.T) {
	a := NewAdmission(3, 1)
	for i := 0; i < 3; i++ {
		if _, ok := a.Enter(); !ok {
			t.Fatalf("request %d shed under the bound", i)
		}
	}
	if r, ok := a.Enter(); ok || r != ShedInFlight {
		t.Fatalf("a fourth request: %q %v", r, ok)
	}
	if r, over := a.Overloaded(); !over || r != ShedInFlight {
		t.Fatalf("overloaded %q %v", r, over)
	}
	a.Leave()
	if _, over := a.Overloaded(); over {
		t.Fatal("still overloaded after a request left")
	}
	if _, ok := a.OpenStream(); !ok {
		t.Fatal("first stream shed")
	}
	if r, ok := a.OpenStream(); ok || r != ShedStreams {
		t.Fatalf("second stream: %q %v", r, ok)
	}
	if r, over := a.Overloaded(); !over || r != ShedStreams {
		t.Fatalf("overloaded %q %v", r, over)
	}
	a.CloseStream()
	a.Leave()
	a.Leave()
	if a.InFlight() != 0 || a.Streams() != 0 {
		t.Fatalf("in flight %d streams %d", a.InFlight(), a.Streams())
	}
	var off *Admission
	if _, ok := off.Enter(); !ok {
		t.Fatal("nil admission shed")
	}
}

// Why: the budget follows GOMEMLIMIT (the manifest sets it from the
// container limit) unless configured.
func TestBudgetFor(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	debug.SetMemoryLimit(1 << 30)
	if got := BudgetFor(0, 0.25); got != 1<<28 {
		t.Fatalf("a quarter of 1 GiB: %d", got)
	}
	if got := BudgetFor(12345, 0.25); got != 12345 {
		t.Fatalf("configured: %d", got)
	}
	debug.SetMemoryLimit(prev)
	if prev == 1<<63-1 {
		if got := BudgetFor(0, 0.5); got != DefaultBudgetBytes {
			t.Fatalf("no GOMEMLIMIT: %d", got)
		}
	}
	if DefaultStreams(256<<20) != 256<<20/streamCost || DefaultInFlight(1) != minInFlight {
		t.Fatalf("derived bounds: %d %d", DefaultStreams(256<<20), DefaultInFlight(1))
	}
}

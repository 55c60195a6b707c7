package replay

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// Timers fire in deadline order, each one alone, with time set to its
// deadline; a stopped timer never fires and a reset one fires at its new
// deadline, never with a stale value.
func TestClockFiresInOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // Settle's premise
	c := NewClock(epoch)
	var mu sync.Mutex
	var got []string
	done := make(chan struct{}, 8)
	at := func(name string) func() {
		return func() {
			mu.Lock()
			got = append(got, name+"@"+c.Now().Sub(epoch).String())
			mu.Unlock()
			done <- struct{}{}
		}
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	stopped := c.AfterFunc(2*time.Second, at("stopped"))
	reset := c.AfterFunc(time.Second, at("reset"))
	if !stopped.Stop() || !reset.Reset(4*time.Second) {
		t.Fatal("Stop and Reset of armed timers report true")
	}
	tm := c.NewTimer(500 * time.Millisecond)
	c.Advance(epoch.Add(time.Second))
	if v := <-tm.Chan(); v != epoch.Add(500*time.Millisecond) {
		t.Fatalf("timer value %v", v)
	}
	c.Advance(epoch.Add(10 * time.Second))
	for range 3 {
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"a@1s", "c@3s", "reset@4s"}
	if len(got) != len(want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fired %v, want %v", got, want)
		}
	}
	if c.Pending() != 0 || c.Now() != epoch.Add(10*time.Second) {
		t.Fatalf("pending %d, now %v", c.Pending(), c.Now())
	}
}

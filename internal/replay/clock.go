package replay

import (
	"container/heap"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is a virtual clockwork.Clock: timers wait in a heap and fire only
// when Advance (or Step) moves time to them, one at a time, in deadline
// order (ties: creation order).
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers timerHeap
}

var _ clockwork.Clock = (*Clock)(nil)

// NewClock returns a Clock at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *Clock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

func (c *Clock) Sleep(d time.Duration) { <-c.After(d) }

func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).Chan() }

func (c *Clock) NewTimer(d time.Duration) clockwork.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1), idx: -1}
	c.schedule(t, d)
	return t
}

func (c *Clock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	t := &timer{c: c, f: f, idx: -1}
	c.schedule(t, d)
	return t
}

func (c *Clock) NewTicker(d time.Duration) clockwork.Ticker {
	t := &timer{c: c, ch: make(chan time.Time, 1), period: d, idx: -1}
	c.schedule(t, d)
	return ticker{t}
}

func (c *Clock) schedule(t *timer, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t.at, t.seq = c.now.Add(max(d, 0)), c.seq
	heap.Push(&c.timers, t)
}

// next pops the first timer due at or before limit and moves time to it.
func (c *Clock) next(limit time.Time) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 || c.timers[0].at.After(limit) {
		return nil
	}
	t := heap.Pop(&c.timers).(*timer)
	if t.at.After(c.now) {
		c.now = t.at
	}
	if t.period > 0 {
		c.seq++
		t.at, t.seq = t.at.Add(t.period), c.seq
		heap.Push(&c.timers, t)
	}
	return t
}

// Advance fires every timer due up to to, one at a time, settling after
// each, then sets the time to to.
func (c *Clock) Advance(to time.Time) {
	for {
		t := c.next(to)
		if t == nil {
			break
		}
		t.fire(c.Now())
		Settle()
	}
	c.mu.Lock()
	if to.After(c.now) {
		c.now = to
	}
	c.mu.Unlock()
}

// Pending is the number of armed timers.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextAt is the deadline of the first armed timer (false: none).
func (c *Clock) NextAt() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// timer is a virtual timer, ticker or AfterFunc.
type timer struct {
	c      *Clock
	at     time.Time
	seq    uint64
	idx    int // in the heap; -1: not armed
	ch     chan time.Time
	f      func()
	period time.Duration
}

func (t *timer) fire(now time.Time) {
	if t.f != nil {
		go t.f() // as time.AfterFunc: its own goroutine
		return
	}
	select {
	case t.ch <- now:
	default:
	}
}

func (t *timer) Chan() <-chan time.Time { return t.ch }

// Stop disarms the timer; like Go 1.23 timers, a value it already sent
// and nobody received is dropped, so a later Reset never delivers it.
func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return t.disarm()
}

func (t *timer) disarm() bool {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
	if t.idx < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.idx)
	return true
}

func (t *timer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	active := t.disarm()
	c.seq++
	t.at, t.seq = c.now.Add(max(d, 0)), c.seq
	heap.Push(&c.timers, t)
	c.mu.Unlock()
	return active
}

type ticker struct{ t *timer }

func (k ticker) Chan() <-chan time.Time { return k.t.ch }
func (k ticker) Stop()                  { k.t.Stop() }
func (k ticker) Reset(d time.Duration) {
	k.t.c.mu.Lock()
	k.t.period = d
	k.t.c.mu.Unlock()
	k.t.Reset(d)
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}

// schedSamples are the scheduler metrics Settle reads.
var schedSamples = []metrics.Sample{
	{Name: "/sched/goroutines/runnable:goroutines"},
	{Name: "/sched/goroutines/not-in-go:goroutines"},
}

// Settle returns once no other goroutine can run: none is runnable and
// none is in a system call, three checks in a row with a yield between
// each. It assumes GOMAXPROCS 1 (Run sets it), where a yield lets every
// runnable goroutine run until it blocks.
func Settle() {
	quiet := 0
	for quiet < 3 {
		runtime.Gosched()
		metrics.Read(schedSamples)
		if schedSamples[0].Value.Uint64() == 0 && schedSamples[1].Value.Uint64() == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}

package testkit

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records the message of Fatalf and ends the goroutine as
// testing.T does; any other method of testing.TB panics (nil embedded).
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f with a fatalTB and returns what it failed with ("" when
// it returned normally).
func failure(f func(tb testing.TB)) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(tb)
	}()
	<-done
	return tb.msg
}

// A condition that holds after a few checks ends the wait at once, without
// a failure; a condition already true is checked once.
func TestEventuallyReturnsWhenTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	msg := failure(func(tb testing.TB) { Eventually(tb, func() bool { return n.Add(1) == 3 }, "the third check") })
	if msg != "" || n.Load() != 3 {
		t.Fatalf("failed with %q after %d checks, want success on the third", msg, n.Load())
	}
	n.Store(0)
	start := time.Now()
	EventuallyNil(t, func() error { n.Add(1); return nil }, "at once")
	if n.Load() != 1 || time.Since(start) > time.Second {
		t.Fatalf("%d checks in %v for a condition already true", n.Load(), time.Since(start))
	}
}

// The failure names what was awaited and the bound; EventuallyNil adds the
// last error, which says why the condition did not hold.
func TestEventuallyFailureMessage(t *testing.T) {
	p := Poll{Within: 20 * time.Millisecond, Every: 5 * time.Millisecond}
	msg := failure(func(tb testing.TB) { p.Eventually(tb, func() bool { return false }, "the reply") })
	if msg != "the reply: not within 20ms" {
		t.Fatalf("Eventually failed with %q", msg)
	}
	var n atomic.Int32
	msg = failure(func(tb testing.TB) {
		p.EventuallyNil(tb, func() error { return fmt.Errorf("check %d: %w", n.Add(1), errors.New("empty result")) }, "the series")
	})
	if !strings.HasPrefix(msg, "the series: not within 20ms: check ") || !strings.HasSuffix(msg, ": empty result") {
		t.Fatalf("EventuallyNil failed with %q", msg)
	}
	if last := fmt.Sprintf("check %d: empty result", n.Load()); !strings.HasSuffix(msg, last) {
		t.Fatalf("EventuallyNil failed with %q, want the last error %q", msg, last)
	}
}

// Within bounds the wait: a condition that never holds fails after about
// Within, not Bound.
func TestPollWithinBoundsTheWait(t *testing.T) {
	start := time.Now()
	failure(func(tb testing.TB) {
		Poll{Within: 30 * time.Millisecond}.Eventually(tb, func() bool { return false }, "never")
	})
	if took := time.Since(start); took < 30*time.Millisecond || took > Bound/2 {
		t.Fatalf("a 30ms poll gave up after %v", took)
	}
}

// Recv returns what arrives (a closed channel's zero value included) and
// fails with what when nothing comes.
func TestRecv(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Recv(t, ch, "seven"); got != 7 {
		t.Fatalf("Recv = %d", got)
	}
	done := make(chan struct{})
	close(done)
	Recv(t, done, "a closed channel")
	msg := failure(func(tb testing.TB) { recv(tb, make(chan int), "the reply", 10*time.Millisecond) })
	if msg != "the reply: nothing within 10ms" {
		t.Fatalf("recv failed with %q", msg)
	}
}

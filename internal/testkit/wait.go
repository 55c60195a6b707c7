package testkit

import (
	"errors"
	"testing"
	"time"
)

// Bound is how long a test waits for something that should happen before
// it fails instead. It is only a failure bound: a passing test waits for
// the condition, never for time to pass, so the bound can be generous
// enough for a loaded machine running -race.
const Bound = 30 * time.Second

// Poll is a wait on a condition: checked every Every, failed after Within.
// The zero value is Bound and a millisecond, for conditions a test
// process reaches on its own (a request arrived, a span ended, a log line
// was written). Real-time tests that observe another process (Prometheus
// scraping every second) poll more slowly, with the bound they need.
type Poll struct {
	Within time.Duration // failure bound; 0: Bound
	Every  time.Duration // between two checks; 0: a millisecond
}

// Eventually polls cond until it returns true, and fails tb with what
// when it has not within Bound.
func Eventually(tb testing.TB, cond func() bool, what string) {
	tb.Helper()
	Poll{}.Eventually(tb, cond, what)
}

// EventuallyNil polls check until it returns nil, and fails tb with what
// and check's last error (why the condition did not hold: a query's
// answer, the log so far) when it has not within Bound.
func EventuallyNil(tb testing.TB, check func() error, what string) {
	tb.Helper()
	Poll{}.EventuallyNil(tb, check, what)
}

// Eventually is the package's Eventually with p's bound and interval.
func (p Poll) Eventually(tb testing.TB, cond func() bool, what string) {
	tb.Helper()
	if err := p.wait(func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}); err != nil {
		tb.Fatalf("%s: not within %v", what, p.within())
	}
}

// EventuallyNil is the package's EventuallyNil with p's bound and interval.
func (p Poll) EventuallyNil(tb testing.TB, check func() error, what string) {
	tb.Helper()
	if err := p.wait(check); err != nil {
		tb.Fatalf("%s: not within %v: %v", what, p.within(), err)
	}
}

var errNotYet = errors.New("not yet")

// wait checks until check returns nil or the bound passed; it returns the
// last error.
func (p Poll) wait(check func() error) error {
	every := p.Every
	if every <= 0 {
		every = time.Millisecond
	}
	deadline := time.Now().Add(p.within())
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(every) // polling a condition, not waiting for time to pass
	}
}

func (p Poll) within() time.Duration {
	if p.Within <= 0 {
		return Bound
	}
	return p.Within
}

// Recv receives from ch, failing tb with what instead of hanging until
// the package's -timeout when nothing comes within Bound: a timer armed
// too long, a request that never ends.
func Recv[T any](tb testing.TB, ch <-chan T, what string) T {
	tb.Helper()
	return recv(tb, ch, what, Bound)
}

func recv[T any](tb testing.TB, ch <-chan T, what string, bound time.Duration) T {
	tb.Helper()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("%s: nothing within %v", what, bound)
		var zero T
		return zero
	}
}

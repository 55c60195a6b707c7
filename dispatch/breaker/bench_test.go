package breaker

import (
	"testing"
)

// Allow is on every request's path: it must not allocate (real clock, with a
// transition callback installed as in production).
func BenchmarkAllow(b *testing.B) {
	br := New("ch", Policy{}, WithOnTransition(func(Transition) {}))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := br.Allow(); !ok {
			b.Fatal("refused")
		}
	}
}

// Allow plus Done, both policies; rate mode writes a ring bucket per Done.
func BenchmarkAllowDone(b *testing.B) {
	for _, mode := range []Mode{CountMode, RateMode} {
		b.Run(mode.String(), func(b *testing.B) {
			br := New("ch", Policy{Mode: mode}, WithOnTransition(func(Transition) {}))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				t, ok := br.Allow()
				if !ok {
					b.Fatal("refused")
				}
				// A healthy channel's steady state: successes, now and then
				// a client cancellation.
				o := Success
				if i%100 == 0 {
					o = Excluded
				}
				br.Done(t, o)
				i++
			}
		})
	}
}

// Concurrent Allow/Done on one channel (the mutex under contention).
func BenchmarkAllowParallel(b *testing.B) {
	br := New("ch", Policy{Mode: RateMode}, WithOnTransition(func(Transition) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if t, ok := br.Allow(); ok {
				br.Done(t, Success)
			}
		}
	})
}

// Set.Get is looked up per request by the dispatcher.
func BenchmarkSetGet(b *testing.B) {
	s := NewSet()
	p := Policy{Mode: RateMode}
	s.Get("ch", p)
	b.ReportAllocs()
	for b.Loop() {
		s.Get("ch", p)
	}
}

// The benchmarks' 0 allocs/op, enforced in the ordinary test run.
func TestRequestPathDoesNotAllocate(t *testing.T) {
	for _, mode := range []Mode{CountMode, RateMode} {
		br := New("ch", Policy{Mode: mode}, WithOnTransition(func(Transition) {}))
		s := NewSet()
		s.Get("ch", Policy{Mode: mode})
		allocs := testing.AllocsPerRun(1000, func() {
			t, _ := br.Allow()
			br.Done(t, Success)
			s.Get("ch", Policy{Mode: mode})
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocs per Allow+Done+Get, want 0", mode, allocs)
		}
	}
}

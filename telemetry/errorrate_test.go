package telemetry

import (
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// TestErrorRatesRetain: a reload's Retain drops the counters of removed
// channels, leaves the kept ones' counts alone, and makes room again for
// new channels once maxRateChannels ids have been seen (without it a
// gateway reloaded with new channel ids stopped counting any new one).
func TestErrorRatesRetain(t *testing.T) {
	r := NewErrorRates(clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)))
	for i := range maxRateChannels {
		r.observe(fmt.Sprintf("old-%d", i), HopOK)
	}
	r.observe("a", HopRetryable)
	if p := r.Current("a"); p.Hops != 0 {
		t.Fatalf("a counted beyond maxRateChannels: %+v", p)
	}
	r.Retain(func(ch string) bool { return ch == "old-0" })
	if got := r.Channels(); len(got) != 1 || got[0] != "old-0" {
		t.Fatalf("channels after Retain: %d (%v...), want old-0 alone", len(got), got[:min(len(got), 3)])
	}
	if p := r.Current("old-0"); p.Hops != 1 {
		t.Fatalf("a kept channel lost its counts: %+v", p)
	}
	r.observe("a", HopRetryable)
	if p := r.Current("a"); p.Hops != 1 || p.Failed != 1 {
		t.Fatalf("a new channel after Retain: %+v", p)
	}
	var none *ErrorRates
	none.Retain(func(string) bool { return false }) // a nil ErrorRates counts nothing and drops nothing
}

package dispatch_test

import (
	"testing"
	"time"
)

func TestZZDump2(t *testing.T) {
	t.Run("ht", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|no-headers", "m", "    policy: {header_timeout: 10s}\n"), "a", "b")
		done := h.async(chat(true))
		h.waitAttempts("a", "m|no-headers", 1)
		h.waitTimers(1)
		h.clock.Advance(10 * time.Second)
		r := <-done
		t.Logf("%d %v\n%s", r.status, r.header, dumpSpans(t, h))
	})
	t.Run("se", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|stream-error", "m", ""), "a", "b")
		r := h.post(chat(true))
		t.Logf("%d %v\n%s", r.status, r.header, dumpSpans(t, h))
	})
	t.Run("exh", func(t *testing.T) {
		h := newHarness(t, twoChannels("m|503", "m|500", "    policy: {degraded_reply: {mode: message, message: sorry}}\n"), "a", "b")
		r := h.post(chat(true))
		t.Logf("%d %v %s\n%s", r.status, r.header, r.body, dumpSpans(t, h))
	})
}

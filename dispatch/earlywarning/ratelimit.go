package earlywarning

import (
	"fmt"
	"time"
)

// A channel's rate-limit window (DESIGN.md §16) is evidence of its own:
// the provider states on every answer how much of its window is used and
// when it resets, so a channel about to answer 429 can be demoted before
// the first 429, for exactly as long as the window still has to run.
// Unlike latency and errors, it needs no samples, no baseline and no For:
// the provider's own count is not noise. The demotion ends when the window
// resets, straight back to normal (no probation: the next answer states
// the new window, which is all the evidence there is).

// Window is the fullest rate-limit window a channel's answers state: its
// kind (requests, tokens, …), 1 − remaining/limit, and when it resets
// (zero: not stated).
type Window struct {
	Kind        string    `json:"kind"`
	Utilization float64   `json:"utilization"`
	ResetAt     time.Time `json:"reset_at,omitzero"`
}

// Window records the fullest window the channel's last answers state
// (the caller picks it among the kinds); it replaces the previous one.
// A nil Detector records nothing.
func (d *Detector) Window(w Window) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.window = w
	d.mu.Unlock()
}

// windowFull reports whether the last stated window is evidence as of
// now: at least Policy.RateLimit used and not reset yet. d.mu is held.
func (d *Detector) windowFull(now time.Time) bool {
	w := d.window
	return d.policy.RateLimit > 0 && w.Utilization >= d.policy.RateLimit && (w.ResetAt.IsZero() || now.Before(w.ResetAt))
}

// windowDetail is the evidence in words. d.mu is held.
func (d *Detector) windowDetail(now time.Time) string {
	w := d.window
	if w.ResetAt.IsZero() {
		return fmt.Sprintf("%s window %.0f%% used (demoting at %.0f%%), reset not stated", w.Kind, 100*w.Utilization, 100*d.policy.RateLimit)
	}
	return fmt.Sprintf("%s window %.0f%% used (demoting at %.0f%%), resets in %s", w.Kind, 100*w.Utilization,
		100*d.policy.RateLimit, w.ResetAt.Sub(now).Round(time.Millisecond))
}

// windowUntil is when a ratelimit demotion starting now ends: the
// window's reset, or one cooldown when the provider did not state it.
// d.mu is held.
func (d *Detector) windowUntil(now time.Time) time.Time {
	if r := d.window.ResetAt; !r.IsZero() && r.After(now) {
		return r
	}
	return now.Add(d.policy.Cooldown)
}

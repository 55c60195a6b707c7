package dispatch

import (
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/internal/ratelimithdr"
	"github.com/hopgate/hopgate/telemetry"
)

// channelWindows keeps, per channel, the rate-limit windows its last
// answer stated (DESIGN §16): read from every upstream answer, failed
// ones too, in place (no allocation once a channel was seen).
type channelWindows struct {
	mu sync.Mutex
	by map[string]*ratelimithdr.Windows
}

// observeWindows records the windows of one answer of ch, and hands the
// fullest of them to ch's early warning, which may demote ch until it
// resets (policy.early_warning.ratelimit_utilization).
func (e *Engine) observeWindows(ch *config.Channel, h http.Header, now time.Time) {
	if full, ok := e.windows.observe(ch.ID, h, now); ok {
		e.warnFor(ch).Window(full)
	}
}

// observe records the windows of one answer of channel; an answer that
// states none changes nothing (a provider that sends them on some answers
// only keeps its last). It returns the channel's fullest window not yet
// reset, ok false when the answer stated none.
func (cw *channelWindows) observe(channel string, h http.Header, now time.Time) (full earlywarning.Window, ok bool) {
	var ws ratelimithdr.Windows
	ratelimithdr.Parse(h, now, &ws)
	if !ws.Any() {
		return full, false
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if cw.by == nil {
		cw.by = map[string]*ratelimithdr.Windows{}
	}
	cur := cw.by[channel]
	if cur == nil {
		cur = new(ratelimithdr.Windows)
		cw.by[channel] = cur
	}
	for k, w := range ws {
		if w.Set {
			cur[k] = w
		}
	}
	for k, w := range cur {
		if u := w.Utilization(); w.Set && (w.ResetAt.IsZero() || now.Before(w.ResetAt)) && u >= full.Utilization {
			full = earlywarning.Window{Kind: ratelimithdr.Kind(k).String(), Utilization: u, ResetAt: w.ResetAt}
		}
	}
	return full, true
}

// WindowObservations are the channels' last stated windows, by channel
// then kind, for hopgate_channel_ratelimit_utilization and its reset time.
func (e *Engine) WindowObservations() []telemetry.WindowObservation {
	e.windows.mu.Lock()
	defer e.windows.mu.Unlock()
	var out []telemetry.WindowObservation
	for ch, ws := range e.windows.by {
		for k, w := range ws {
			if w.Set {
				out = append(out, telemetry.WindowObservation{Channel: ch, Kind: ratelimithdr.Kind(k).String(),
					Utilization: w.Utilization(), ResetAt: w.ResetAt})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Channel != out[j].Channel {
			return out[i].Channel < out[j].Channel
		}
		return out[i].Kind < out[j].Kind
	})
	return out
}

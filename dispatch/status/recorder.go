package status

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/telemetry"
)

// Classify says whether a request outcome (a telemetry.Outcome* value)
// counts on the status page, and whether it counts as a failure.
//
//   - ok, failover_ok: served (failover is invisible to the client);
//   - exhausted, deadline, degraded, interrupted: failed — every channel
//     failed, the chain deadline's degraded reply (the opt-in 200 message
//     too: the client did not get an answer), a committed stream cut;
//   - final_error, canceled, bad_request and anything else: not counted —
//     the upstream's 400 to a bad prompt and a client that left say
//     nothing about whether hopgate could serve.
func Classify(outcome string) (counted, failed bool) {
	switch outcome {
	case telemetry.OutcomeOK, telemetry.OutcomeFailoverOK:
		return true, false
	case telemetry.OutcomeExhausted, telemetry.OutcomeDeadline, telemetry.OutcomeDegraded, telemetry.OutcomeInterrupted:
		return true, true
	}
	return false, false
}

// Recorder defaults.
const (
	DefaultFlushEvery = 10 * time.Second
	// maxPendingKeys bounds what waits for the store: (minute, model)
	// pairs. At 20 models that is more than 3 days of minutes; past it,
	// when the store has been down that long, the oldest are dropped.
	maxPendingKeys = 100_000
	flushTimeout   = 10 * time.Second
)

// Recorder counts finished requests per model per minute and flushes the
// counts to a Store in batches. Record is safe to call from any request
// goroutine and never waits on the store.
type Recorder struct {
	store Store
	clock clockwork.Clock // dates the counts
	tick  clockwork.Clock // paces Run
	every time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	pending  map[bucketKey]okFailed // counted, not yet handed to the store
	inflight map[bucketKey]okFailed // handed to the store, not yet acknowledged
	dropped  int64

	flushMu sync.Mutex // one flush at a time
}

// NewRecorder returns a recorder dating counts on clock and writing them to
// store every `every` (0: DefaultFlushEvery) of tick; nil clocks are the
// real clock. The two are apart because a gateway under test runs on a
// fake clock whose waiters its tests count: a flush ticker there would be
// one more. log receives flush failures (nil: slog.Default()).
func NewRecorder(store Store, clock, tick clockwork.Clock, every time.Duration, log *slog.Logger) *Recorder {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	if tick == nil {
		tick = clockwork.NewRealClock()
	}
	if every <= 0 {
		every = DefaultFlushEvery
	}
	if log == nil {
		log = slog.Default()
	}
	return &Recorder{store: store, clock: clock, tick: tick, every: every, log: log, pending: map[bucketKey]okFailed{}}
}

// Record counts one finished request of model with outcome (see Classify).
func (r *Recorder) Record(model, outcome string) {
	if r == nil {
		return
	}
	counted, failed := Classify(outcome)
	if !counted {
		return
	}
	k := bucketKey{r.clock.Now().UTC().Truncate(time.Minute).Unix(), model}
	r.mu.Lock()
	v, ok := r.pending[k]
	if !ok && len(r.pending) >= maxPendingKeys {
		r.dropOldestLocked()
	}
	if failed {
		v.failed++
	} else {
		v.ok++
	}
	r.pending[k] = v
	r.mu.Unlock()
}

func (r *Recorder) dropOldestLocked() {
	var oldest bucketKey
	first := true
	for k := range r.pending {
		if first || k.start < oldest.start {
			oldest, first = k, false
		}
	}
	v := r.pending[oldest]
	r.dropped += v.ok + v.failed
	delete(r.pending, oldest)
}

// Run flushes every interval until ctx ends, then flushes once more (with
// its own timeout) so a drained process loses no count.
func (r *Recorder) Run(ctx context.Context) {
	t := r.tick.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-t.Chan():
			fctx, cancel := context.WithTimeout(ctx, flushTimeout)
			_ = r.Flush(fctx)
			cancel()
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			_ = r.Flush(fctx)
			cancel()
			return
		}
	}
}

// Flush hands what was counted to the store in one batch. On failure the
// counts go back to pending and are retried at the next flush.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.mu.Unlock()
		return nil
	}
	batch := r.pending
	r.pending, r.inflight = map[bucketKey]okFailed{}, batch
	r.mu.Unlock()

	counts := make([]StatusCount, 0, len(batch))
	for k, v := range batch {
		counts = append(counts, StatusCount{Minute: time.Unix(k.start, 0).UTC(), Model: k.model, OK: v.ok, Failed: v.failed})
	}
	err := r.store.AddStatus(ctx, counts)

	r.mu.Lock()
	r.inflight = nil
	if err != nil {
		for k, v := range batch {
			p, ok := r.pending[k]
			if !ok && len(r.pending) >= maxPendingKeys {
				r.dropped += v.ok + v.failed
				continue
			}
			p.ok += v.ok
			p.failed += v.failed
			r.pending[k] = p
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("status: flush to the store failed; retrying at the next flush",
			slog.Int("buckets", len(counts)), slog.Any("error", err))
	}
	return err
}

// unflushed returns the counts not yet acknowledged by the store, from
// since on: the page adds them so it is current before the next flush.
func (r *Recorder) unflushed(since time.Time) []StatusCount {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []StatusCount
	for _, m := range []map[bucketKey]okFailed{r.pending, r.inflight} {
		for k, v := range m {
			if k.start >= since.Unix() {
				out = append(out, StatusCount{Minute: time.Unix(k.start, 0).UTC(), Model: k.model, OK: v.ok, Failed: v.failed})
			}
		}
	}
	return out
}

// Dropped is the number of requests whose counts were dropped because the
// store stayed unreachable past the pending bound.
func (r *Recorder) Dropped() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}

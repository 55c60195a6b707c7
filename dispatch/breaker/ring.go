package breaker

import "time"

// minBucketWidth is the bucket width of windows up to maxBuckets seconds.
const minBucketWidth = time.Second

// maxBuckets bounds the ring whatever the window: memory per breaker and
// the cost of summing the window stay fixed (600 buckets: a 60 s window
// keeps 1 s buckets; a 1 h window gets 6 s buckets).
const maxBuckets = 600

// bucket counts the outcomes of one second. sec is the bucket's second
// (relative to the breaker's epoch); a slot whose sec is not the one being
// written is stale and is reset before reuse.
type bucket struct {
	sec      int64
	requests uint32
	errors   uint32
}

// rateRing is the rolling window of the rate policy: a ring of buckets
// (one second wide unless the window needs more than maxBuckets of them)
// allocated once, so recording and summing never allocate. An event in
// bucket s counts at bucket now while s > now-len(buckets), i.e. the window
// is the current (partial) bucket plus the len-1 before it.
type rateRing struct {
	buckets []bucket
	width   time.Duration
}

const emptySec = -1 << 62

func newRateRing(window time.Duration) rateRing {
	width := minBucketWidth
	if window > maxBuckets*minBucketWidth {
		width = (window + maxBuckets - 1) / maxBuckets
		width = (width + time.Second - 1).Truncate(time.Second)
	}
	n := int((window + width - 1) / width)
	if n < 1 {
		n = 1
	}
	r := rateRing{buckets: make([]bucket, n), width: width}
	r.reset()
	return r
}

func (r *rateRing) slot(sec int64) *bucket {
	n := int64(len(r.buckets))
	return &r.buckets[((sec%n)+n)%n]
}

func (r *rateRing) add(sec int64, failed bool) {
	b := r.slot(sec)
	if b.sec != sec {
		if b.sec > sec {
			// The event is older than the window (only with a clock that
			// went backwards); it cannot count.
			return
		}
		*b = bucket{sec: sec}
	}
	b.requests++
	if failed {
		b.errors++
	}
}

// totals sums the buckets inside the window ending at second now.
func (r *rateRing) totals(now int64) (requests, errors int) {
	oldest := now - int64(len(r.buckets))
	for i := range r.buckets {
		b := &r.buckets[i]
		if b.sec > oldest && b.sec <= now {
			requests += int(b.requests)
			errors += int(b.errors)
		}
	}
	return requests, errors
}

func (r *rateRing) reset() {
	for i := range r.buckets {
		r.buckets[i] = bucket{sec: emptySec}
	}
}

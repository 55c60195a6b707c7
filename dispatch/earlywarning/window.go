package earlywarning

import "time"

// maxSteps bounds the ring: a baseline longer than maxSteps short-window
// steps gets wider buckets, so memory per channel stays fixed (about
// 64 KiB at most).
const maxSteps = 120

// bucket is what one step of time saw on a channel.
type bucket struct {
	step int64 // the bucket's step number; stale when not the one wanted
	// tainted: the step was part of a short window judged bad (or of a
	// demotion). It never enters the baseline: a channel slow for longer
	// than half the baseline window must not make its slowness the norm.
	tainted bool
	hops    uint32
	errors  uint32
	header  sketch // header latency of hops whose headers arrived in the step
	first   sketch // time to first token of streams that committed in the step
}

// ring holds the buckets of the baseline and the short window, allocated
// once. Bucket n covers [epoch + n·width, epoch + (n+1)·width).
type ring struct {
	buckets []bucket
	width   time.Duration
	epoch   time.Time
}

func newRing(p Policy, epoch time.Time) ring {
	w := p.step()
	n := int((p.Baseline+w-1)/w) + 1
	r := ring{buckets: make([]bucket, n), width: w, epoch: epoch}
	for i := range r.buckets {
		r.buckets[i].step = -1
	}
	return r
}

// stepOf is t's bucket number (negative before the epoch).
func (r *ring) stepOf(t time.Time) int64 {
	d := t.Sub(r.epoch)
	s := int64(d / r.width)
	if d < 0 && d%r.width != 0 {
		s--
	}
	return s
}

// at returns the bucket of step s for writing, reset if it held an older
// step; nil when s is too old to be in the ring any more.
func (r *ring) at(s int64) *bucket {
	n := int64(len(r.buckets))
	b := &r.buckets[((s%n)+n)%n]
	switch {
	case b.step == s:
	case b.step > s:
		return nil // a clock that went backwards: the slot is newer
	default:
		*b = bucket{step: s}
	}
	return b
}

// get returns the bucket of step s for reading, nil when it holds nothing
// of s.
func (r *ring) get(s int64) *bucket {
	n := int64(len(r.buckets))
	b := &r.buckets[((s%n)+n)%n]
	if b.step != s {
		return nil
	}
	return b
}

// sum adds up the buckets of steps (from, to] into out; clean leaves the
// tainted ones out.
func (r *ring) sum(from, to int64, clean bool, out *bucket) {
	for s := from + 1; s <= to; s++ {
		if b := r.get(s); b != nil && !(clean && b.tainted) {
			out.hops += b.hops
			out.errors += b.errors
			out.header.merge(&b.header)
			out.first.merge(&b.first)
		}
	}
}

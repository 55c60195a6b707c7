package telemetry

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Bounds of the failover-aware processor. A request has a handful of spans
// (server, dispatch, ≤3 hops with 2 children each, skips); the caps only
// matter under overload or a leak, and then spans are forwarded, not lost.
const (
	defaultMaxTraces        = 10_000
	defaultMaxSpansPerTrace = 256
	defaultMaxSpansTotal    = 64 * 1024
	// Longer than any sane request: header_timeout is 240 s and streams are
	// bounded by stream_idle_timeout in the chat profile.
	defaultMaxTraceAge = 15 * time.Minute
	// Decisions remembered for spans that end after their root (a body
	// closed after the handler returned): they follow the root's decision.
	decidedMemory = 4096
)

// Interesting reports whether a trace must be kept whatever the healthy
// ratio: its local root failed, its outcome is not plain "ok", it took more
// than one step (skip, retry, failover), or any of its spans errored.
func Interesting(root sdktrace.ReadOnlySpan, anyError bool) bool {
	if anyError || root.Status().Code == codes.Error {
		return true
	}
	for _, kv := range root.Attributes() {
		switch string(kv.Key) {
		case AttrOutcome:
			if v := kv.Value.AsString(); v != "" && v != OutcomeOK {
				return true
			}
		case AttrFailoverPath:
			if strings.Contains(kv.Value.AsString(), PathArrow) {
				return true
			}
		case AttrTimedOut:
			if kv.Value.AsBool() {
				return true
			}
		}
	}
	return false
}

// pendingTrace holds the ended spans of one trace until its local root ends:
// SDK spans, and the compact records of the request path (record.go),
// which are built into spans only if the trace is kept.
type pendingTrace struct {
	spans    []sdktrace.ReadOnlySpan
	recs     []*record
	nrec     int // spans in recs
	anyError bool
	// passthrough: the trace overflowed or went stale; part of it is already
	// exported, so the rest follows immediately to keep it whole.
	passthrough bool
	created     time.Time
	// id and the links of failoverProcessor.age (oldest first): intrusive,
	// so tracking a trace's age allocates nothing.
	id         trace.TraceID
	prev, next *pendingTrace
}

// ageList orders pending traces by creation, oldest first.
type ageList struct{ head, tail *pendingTrace }

func (l *ageList) pushBack(t *pendingTrace) {
	t.prev, t.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
}

func (l *ageList) remove(t *pendingTrace) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
}

// traces recycles pendingTrace values and their span slices: one trace per
// request is created and dropped, and they are all the same shape.
var tracePool = sync.Pool{New: func() any {
	return &pendingTrace{spans: make([]sdktrace.ReadOnlySpan, 0, 8)}
}}

// recycle returns t to the pool; nothing may reference it any more.
func recycle(t *pendingTrace) {
	clear(t.spans) // drop the span references for the GC
	clear(t.recs)
	*t = pendingTrace{spans: t.spans[:0], recs: t.recs[:0]}
	tracePool.Put(t)
}

// size is the spans t holds, records included.
func (t *pendingTrace) size() int { return len(t.spans) + t.nrec }

// held returns t's spans with its records built: what a kept trace
// forwards, in the order they arrived (a record arrives when its dispatch
// span ends, with its spans in the order they ended).
func (t *pendingTrace) held() []sdktrace.ReadOnlySpan {
	if len(t.recs) == 0 {
		return t.spans
	}
	out := make([]sdktrace.ReadOnlySpan, 0, t.size())
	out = append(out, t.spans...)
	for _, r := range t.recs {
		out = append(out, r.export()...)
	}
	return out
}

// sampleCounters count the processor's decisions (hopgate_trace_decisions_total).
type sampleCounters struct {
	interesting, healthyKept, healthyDropped, overflow, stale atomic.Int64
}

// failoverProcessor is the tail sampler of the issue "every trace of a request
// that skipped, retried, failed over, timed out or errored is kept; healthy
// traces kept at a configurable ratio". All spans of a request are local, so
// the decision is made when the local root (the SERVER span, ServerHandler's: parent
// invalid or remote) ends, and the buffered spans go to next (the batch
// processor) or are dropped.
//
// It composes with the head sampler (OTEL_TRACES_SAMPLER): spans the head
// sampler did not sample never reach it. The healthy ratio uses the same
// trace-id arithmetic as TraceIDRatioBased, so a head ratio r1 and a healthy
// ratio r2 keep min(r1, r2) of healthy traces, consistently across services.
type failoverProcessor struct {
	next    sdktrace.SpanProcessor
	healthy healthyRatio
	clock   clockwork.Clock

	maxTraces, maxSpansPerTrace, maxSpansTotal int
	maxAge                                     time.Duration

	mu       sync.Mutex
	traces   map[trace.TraceID]*pendingTrace
	age      ageList
	buffered int // spans held across all traces

	decided     map[trace.TraceID]bool // trace id -> kept, for late spans
	decidedRing []trace.TraceID        // eviction order of decided
	decidedNext int

	// all: the healthy ratio is 1, so every trace is kept and nothing is
	// buffered: spans go on as they end (an open stream holds none of its
	// ended spans), and only errored non-root spans are noted (errored),
	// so the root's decision is counted as in the buffering mode.
	all      bool
	errored  map[trace.TraceID]struct{}
	nErrored atomic.Int64
	// erroredRing evicts the oldest noted trace once full, so notes of
	// traces whose root never comes (a span ending after its root) cannot
	// pile up.
	erroredRing []trace.TraceID
	erroredNext int

	counts sampleCounters

	// ring receives the interesting traces (tracering.go); nil: none.
	ring *TraceRing
}

var _ sdktrace.SpanProcessor = (*failoverProcessor)(nil)

func newFailoverProcessor(next sdktrace.SpanProcessor, healthyRatio float64, clock clockwork.Clock) *failoverProcessor {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &failoverProcessor{
		next:             next,
		healthy:          newHealthyRatio(healthyRatio),
		clock:            clock,
		maxTraces:        defaultMaxTraces,
		maxSpansPerTrace: defaultMaxSpansPerTrace,
		maxSpansTotal:    defaultMaxSpansTotal,
		maxAge:           defaultMaxTraceAge,
		traces:           make(map[trace.TraceID]*pendingTrace),
		decided:          make(map[trace.TraceID]bool, decidedMemory),
		decidedRing:      make([]trace.TraceID, decidedMemory),
		all:              healthyRatio >= 1,
		errored:          make(map[trace.TraceID]struct{}),
		erroredRing:      make([]trace.TraceID, decidedMemory),
	}
}

// healthyRatio decides which healthy traces are kept, from the trace id
// alone, with the arithmetic of the SDK's TraceIDRatioBased sampler: the
// upper 63 bits of the id's second half against ratio·2⁶³ (a ratio of 1
// or more keeps all, 0 or less none), so a head ratio and a healthy ratio
// compose (TestHealthyRatioMatchesSDK holds the two to the same decisions).
// Not the SDK sampler itself: its ShouldSample takes a SamplingParameters
// and reads a parent context, two 328-byte stack frames in the exemplar
// filter under every metric the request path records, which counted
// towards the depth an open stream's goroutine reaches
// (docs/performance.md, memory per idle stream).
type healthyRatio struct {
	all   bool
	bound uint64
}

func newHealthyRatio(ratio float64) healthyRatio {
	switch {
	case ratio >= 1:
		return healthyRatio{all: true}
	case ratio <= 0:
		return healthyRatio{}
	}
	return healthyRatio{bound: uint64(ratio * (1 << 63))}
}

// keep reports whether a healthy trace with this id is kept.
func (h healthyRatio) keep(id trace.TraceID) bool {
	return h.all || binary.BigEndian.Uint64(id[8:16])>>1 < h.bound
}

func (p *failoverProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (p *failoverProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	if !sc.IsSampled() {
		return // the head sampler said no; the batch processor would drop it too
	}
	id := sc.TraceID()
	isRoot := !s.Parent().IsValid() || s.Parent().IsRemote()
	isErr := s.Status().Code == codes.Error
	if p.all {
		p.keepAll(s, id, isRoot, isErr)
		return
	}

	var (
		forward []sdktrace.ReadOnlySpan // spans of swept or overflowing traces (rare)
		kept    *pendingTrace           // a kept root's buffered spans
		self    bool                    // s goes on too
		ringIt  bool                    // the trace goes into the ring
		late    bool                    // s is a late span of a kept trace
	)
	p.mu.Lock()
	forward = p.sweepLocked(forward)
	t := p.traces[id]
	switch {
	case isRoot:
		anyErr, passthrough := isErr, false
		if t != nil {
			anyErr, passthrough = t.anyError || isErr, t.passthrough
			p.removeLocked(id, t)
		}
		keep := true
		switch {
		case passthrough:
		case Interesting(s, anyErr):
			p.counts.interesting.Add(1)
			ringIt = true
		case p.healthy.keep(id):
			p.counts.healthyKept.Add(1)
			ringIt = p.ring.keepsHealthy()
		default:
			p.counts.healthyDropped.Add(1)
			keep = false
		}
		if ringIt {
			p.ring.expect(id) // before the decision is visible to late spans
		}
		p.rememberLocked(id, keep)
		switch {
		case keep:
			kept, self = t, true
		case t != nil:
			recycle(t)
		}
	default:
		var buf *pendingTrace
		buf, self, late, forward = p.placeLocked(id, t, 1, forward)
		if buf != nil {
			buf.spans = append(buf.spans, s)
			buf.anyError = buf.anyError || isErr
		}
	}
	p.mu.Unlock()

	// Outside the lock, in the order the spans ended: what was swept or
	// overflowed, the kept trace's buffered spans, then s.
	for _, f := range forward {
		p.next.OnEnd(f)
	}
	var keptSpans []sdktrace.ReadOnlySpan
	if kept != nil {
		keptSpans = kept.held() // records are built here, for kept traces only
	}
	if ringIt {
		p.ring.add(keptSpans, s)
	} else if late {
		p.ring.addLate(s)
	}
	if kept != nil {
		for _, f := range keptSpans {
			p.next.OnEnd(f)
		}
		recycle(kept) // removed from traces and age under the lock: ours now
	}
	if self {
		p.next.OnEnd(s)
	}
}

// keepAll is OnEnd when every trace is kept: s goes on at once; a root
// counts its trace's decision (Interesting, with the errors of its spans).
func (p *failoverProcessor) keepAll(s sdktrace.ReadOnlySpan, id trace.TraceID, isRoot, isErr bool) {
	switch {
	case isRoot:
		anyErr := isErr
		if p.nErrored.Load() > 0 {
			p.mu.Lock()
			if _, ok := p.errored[id]; ok {
				anyErr = true
				delete(p.errored, id)
				p.nErrored.Store(int64(len(p.errored)))
			}
			p.mu.Unlock()
		}
		interesting := Interesting(s, anyErr)
		if interesting {
			p.counts.interesting.Add(1)
		} else {
			p.counts.healthyKept.Add(1)
		}
		p.ring.finish(s, interesting || p.ring.keepsHealthy())
	case isErr:
		p.noteErrored(id)
	}
	if !isRoot {
		p.ring.collect(id, s)
	}
	p.next.OnEnd(s)
}

// noteErrored notes that a span of trace id has ended in error, for its
// root's decision.
func (p *failoverProcessor) noteErrored(id trace.TraceID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.errored[id]; ok {
		return
	}
	// A bounded ring: the oldest note goes (if its root has not come yet,
	// its trace only misses from the decision counter).
	if old := p.erroredRing[p.erroredNext]; old.IsValid() {
		delete(p.errored, old)
	}
	p.erroredRing[p.erroredNext] = id
	p.erroredNext = (p.erroredNext + 1) % len(p.erroredRing)
	p.errored[id] = struct{}{}
	p.nErrored.Store(int64(len(p.errored)))
}

// keepAllRecord is keepAll for the spans of a record (none is a root):
// an error among them is noted once, the ring collects them under one
// lock, and they go on.
func (p *failoverProcessor) keepAllRecord(r *record, id trace.TraceID) {
	spans := r.export()
	if r.err {
		p.noteErrored(id)
	}
	p.ring.collectAll(id, spans)
	for _, s := range spans {
		p.next.OnEnd(s)
	}
}

func hasKey(m map[trace.TraceID]bool, id trace.TraceID) bool {
	_, ok := m[id]
	return ok
}

// drainLocked appends t's spans (its records built) to forward and
// empties t: it overflowed or went stale, and the rest of its trace
// follows as it ends.
func (p *failoverProcessor) drainLocked(t *pendingTrace, forward []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	forward = append(forward, t.held()...)
	p.buffered -= t.size()
	clear(t.recs)
	t.spans, t.recs, t.nrec = nil, t.recs[:0], 0
	return forward
}

// endRecord takes the record of a request whose dispatch span ended: its
// spans join their trace like ended spans, but are built only if the trace
// is kept (a dropped healthy trace costs its record and nothing more).
func (p *failoverProcessor) endRecord(r *record) {
	id := r.parent.TraceID()
	n := len(r.order)
	if p.all {
		p.keepAllRecord(r, id)
		return
	}
	p.mu.Lock()
	forward := p.sweepLocked(nil)
	// self: r's spans go on now; late: they join a kept trace whose root
	// ended.
	buf, self, late, forward := p.placeLocked(id, p.traces[id], n, forward)
	if buf != nil {
		buf.recs = append(buf.recs, r)
		buf.nrec += n
		buf.anyError = buf.anyError || r.err
	}
	p.mu.Unlock()

	for _, f := range forward {
		p.next.OnEnd(f)
	}
	if self {
		for _, s := range r.export() {
			if late {
				p.ring.addLate(s)
			}
			p.next.OnEnd(s)
		}
	}
}

// placeLocked decides where n ended non-root spans of trace id go (t: its
// pending trace, nil if none). buf non-nil: into buf, which counts them
// in p.buffered (the caller appends them); self: on at once, late when
// they follow a kept trace whose root has ended; neither: nowhere, their
// trace was dropped. Spans of traces that overflow are added to forward.
func (p *failoverProcessor) placeLocked(id trace.TraceID, t *pendingTrace, n int, forward []sdktrace.ReadOnlySpan) (buf *pendingTrace, self, late bool, _ []sdktrace.ReadOnlySpan) {
	switch {
	case t == nil && p.decided[id]:
		return nil, true, true, forward
	case t == nil && hasKey(p.decided, id):
		return nil, false, false, forward
	case t == nil && (len(p.traces) >= p.maxTraces || p.buffered >= p.maxSpansTotal):
		p.counts.overflow.Add(int64(n))
		return nil, true, false, forward
	case t == nil:
		t = tracePool.Get().(*pendingTrace)
		t.id, t.created = id, p.clock.Now()
		p.age.pushBack(t)
		p.traces[id] = t
	}
	switch {
	case t.passthrough:
		return nil, true, false, forward
	case t.size()+n > p.maxSpansPerTrace || p.buffered+n > p.maxSpansTotal:
		p.counts.overflow.Add(int64(t.size() + n))
		forward = p.drainLocked(t, forward)
		t.passthrough = true
		return nil, true, false, forward
	}
	p.buffered += n
	return t, false, false, forward
}

// rememberLocked records a root decision in a fixed ring, evicting the oldest.
func (p *failoverProcessor) rememberLocked(id trace.TraceID, keep bool) {
	if old := p.decidedRing[p.decidedNext]; old.IsValid() {
		delete(p.decided, old)
	}
	p.decidedRing[p.decidedNext] = id
	p.decidedNext = (p.decidedNext + 1) % len(p.decidedRing)
	p.decided[id] = keep
}

// removeLocked forgets trace id.
func (p *failoverProcessor) removeLocked(id trace.TraceID, t *pendingTrace) {
	p.buffered -= t.size()
	p.age.remove(t)
	delete(p.traces, id)
}

// sweepLocked flushes traces older than maxAge: their local root never ended
// (a leaked span, a stream longer than any request should be). They are kept,
// not dropped: we cannot tell whether they were healthy. Their entry stays as
// passthrough until it ages out once more, so late spans follow.
func (p *failoverProcessor) sweepLocked(forward []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	now := p.clock.Now()
	for t := p.age.head; t != nil; t = p.age.head {
		if now.Sub(t.created) < p.maxAge {
			break
		}
		if t.passthrough {
			p.removeLocked(t.id, t)
			continue
		}
		p.counts.stale.Add(1)
		forward = p.drainLocked(t, forward)
		t.passthrough, t.created = true, now
		p.age.remove(t)
		p.age.pushBack(t)
	}
	return forward
}

// ForceFlush exports what is decided; traces still in flight stay buffered
// (exporting them now would split them from their decision).
func (p *failoverProcessor) ForceFlush(ctx context.Context) error {
	p.mu.Lock()
	forward := p.sweepLocked(nil)
	p.mu.Unlock()
	for _, f := range forward {
		p.next.OnEnd(f)
	}
	return p.next.ForceFlush(ctx)
}

// Shutdown forwards every buffered span (an unfinished trace at shutdown is
// worth keeping) and shuts next down.
func (p *failoverProcessor) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	var forward []sdktrace.ReadOnlySpan
	for id, t := range p.traces {
		forward = append(forward, t.held()...)
		p.removeLocked(id, t)
	}
	p.mu.Unlock()
	for _, f := range forward {
		p.next.OnEnd(f)
	}
	return p.next.Shutdown(ctx)
}

// pending reports buffered traces and spans (tests).
func (p *failoverProcessor) pending() (traces, spans int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.traces), p.buffered
}

package telemetry

import (
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the trace ring: on-call needs the traces of the last
// incident, not a trace store. A failover trace is 2–6 KiB as held here,
// so the byte bound is the one that binds under an incident.
const (
	DefaultTraceRingTraces = 2000
	DefaultTraceRingBytes  = 16 << 20 // 16 MiB

	// Per-trace and per-value caps keep one pathological trace (a huge
	// upstream error message, a runaway span count) from taking the ring.
	ringMaxSpansPerTrace = 256
	ringMaxEventsPerSpan = 32
	ringMaxValueLen      = 2048
	// ringMaxPending bounds the traces whose spans the ring collects itself
	// while their root is still open (only when every trace is kept: the
	// sampler then buffers nothing for it).
	ringMaxPending = 4096
)

// TraceRingOptions bounds the ring. Zero values take the defaults.
type TraceRingOptions struct {
	MaxTraces int   // traces held; 0: DefaultTraceRingTraces
	MaxBytes  int64 // estimated bytes held; 0: DefaultTraceRingBytes
	// KeepHealthy also puts the healthy traces the sampler keeps (at the
	// healthy ratio) into the ring. Off in production, where they would
	// push out the failovers; the demo turns it on so every step it plays
	// has a trace view.
	KeepHealthy bool
}

// Attr is one span attribute or event attribute, its value as a string.
type Attr struct{ Key, Value string }

// SpanEvent is one span event (an exception, "every channel is open").
type SpanEvent struct {
	Name  string
	Time  time.Time
	Attrs []Attr
}

// SpanRecord is the ring's own compact copy of one ended span: nothing in
// it refers to SDK memory, so holding it keeps no SDK span alive.
type SpanRecord struct {
	Name          string
	Kind          string // server, client, internal, producer, consumer
	SpanID        trace.SpanID
	ParentID      trace.SpanID // invalid for a root
	Start, End    time.Time
	Error         bool // status Error
	StatusMessage string
	Attrs         []Attr
	Events        []SpanEvent
}

// Attr returns the value of attribute key, "" when absent.
func (s *SpanRecord) Attr(key string) string {
	for _, a := range s.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

// Duration is End - Start.
func (s *SpanRecord) Duration() time.Duration { return s.End.Sub(s.Start) }

// TraceRecord is one kept trace. The summary fields are read off its spans
// when it is added (and again when a late span joins it).
type TraceRecord struct {
	TraceID    trace.TraceID
	Start, End time.Time // of the local root
	Model      string    // hopgate.model of the dispatch span
	Outcome    string    // hopgate.outcome of the root
	Path       string    // hopgate.failover.path of the root
	Channels   []string  // hopgate.channel of every hop, skip and early-warning demotion, first-seen order
	Spans      []SpanRecord
	bytes      int64
}

// Bytes is the record's estimated memory footprint, what MaxBytes bounds.
func (t *TraceRecord) Bytes() int64 { return t.bytes }

// Root returns the local root span (the SERVER span), or nil.
func (t *TraceRecord) Root() *SpanRecord {
	ids := make(map[trace.SpanID]bool, len(t.Spans))
	for i := range t.Spans {
		ids[t.Spans[i].SpanID] = true
	}
	var root *SpanRecord
	for i := range t.Spans {
		s := &t.Spans[i]
		if !s.ParentID.IsValid() || !ids[s.ParentID] {
			if root == nil || s.Start.Before(root.Start) {
				root = s
			}
		}
	}
	return root
}

// TraceFilter selects traces in List; empty fields match everything.
type TraceFilter struct {
	Model, Channel, Outcome string
	Limit                   int // 0: no limit
}

// Match reports whether t passes the filter (Limit aside).
func (f TraceFilter) Match(t *TraceRecord) bool {
	return (f.Model == "" || t.Model == f.Model) &&
		(f.Outcome == "" || t.Outcome == f.Outcome) &&
		(f.Channel == "" || slices.Contains(t.Channels, f.Channel))
}

// TraceRingStats are the ring's counters (shown on /admin/traces).
type TraceRingStats struct {
	Traces, MaxTraces int
	Bytes, MaxBytes   int64
	Added, Evicted    int64
	// Dropped: traces larger than MaxBytes on their own, or whose spans
	// the ring could not collect (pending bound).
	Dropped int64
}

// TraceRing holds the last traces the failover-aware sampler kept because
// they were interesting (a skip, a failover, a timeout, an error, a
// degraded reply), as compact copies, bounded in count and in bytes; the
// oldest go first. Healthy traces kept at the healthy ratio go to the
// exporter only: under an incident they would push out the failovers
// on-call came to see. It is what /admin/traces shows, so a trace can be
// read with no trace backend at all. Safe for concurrent use; a nil
// *TraceRing holds nothing.
type TraceRing struct {
	maxTraces int
	maxBytes  int64
	healthy   bool // KeepHealthy

	mu      sync.Mutex
	buf     []*TraceRecord // FIFO ring, oldest at head
	head, n int
	byID    map[trace.TraceID]*TraceRecord
	bytes   int64
	added   int64
	evicted int64
	dropped int64
	// arriving holds the late spans of kept traces between expect and
	// add: a span that ends once its root is decided must not miss the
	// trace because the ring is still copying it.
	arriving map[trace.TraceID][]SpanRecord

	// Spans of traces still open, collected only in keep-all mode.
	pmu      sync.Mutex
	pending  map[trace.TraceID][]sdktrace.ReadOnlySpan
	pendRing []trace.TraceID
	pendNext int
	// finished remembers the last roots seen, so a span ending after its
	// root joins the kept trace (or is ignored) instead of opening a
	// pending entry that no root will ever finish.
	finished     map[trace.TraceID]struct{}
	finishedRing []trace.TraceID
	finishedNext int
}

// NewTraceRing returns an empty ring.
func NewTraceRing(o TraceRingOptions) *TraceRing {
	if o.MaxTraces <= 0 {
		o.MaxTraces = DefaultTraceRingTraces
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultTraceRingBytes
	}
	return &TraceRing{
		maxTraces: o.MaxTraces,
		maxBytes:  o.MaxBytes,
		healthy:   o.KeepHealthy,
		buf:       make([]*TraceRecord, o.MaxTraces),
		byID:      make(map[trace.TraceID]*TraceRecord),
		pending:   make(map[trace.TraceID][]sdktrace.ReadOnlySpan),
	}
}

// keepsHealthy reports KeepHealthy.
func (r *TraceRing) keepsHealthy() bool { return r != nil && r.healthy }

// Get returns the trace with id, or nil. The record must not be modified.
func (r *TraceRing) Get(id trace.TraceID) *TraceRecord {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// List returns the traces matching f, newest first. Records must not be
// modified.
func (r *TraceRing) List(f TraceFilter) []*TraceRecord {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*TraceRecord
	for i := r.n - 1; i >= 0; i-- {
		t := r.buf[(r.head+i)%len(r.buf)]
		if f.Match(t) {
			out = append(out, t)
			if f.Limit > 0 && len(out) == f.Limit {
				break
			}
		}
	}
	return out
}

// Stats returns the ring's counters.
func (r *TraceRing) Stats() TraceRingStats {
	if r == nil {
		return TraceRingStats{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return TraceRingStats{Traces: r.n, MaxTraces: r.maxTraces, Bytes: r.bytes, MaxBytes: r.maxBytes,
		Added: r.added, Evicted: r.evicted, Dropped: r.dropped}
}

// expect announces that the trace id, just kept, is about to be added: the
// caller calls it where late spans of the trace can first learn the
// decision, before letting them, and calls add right after.
func (r *TraceRing) expect(id trace.TraceID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.arriving == nil {
		r.arriving = make(map[trace.TraceID][]SpanRecord)
	}
	r.arriving[id] = nil
}

// add copies a kept trace's spans (root included) into the ring.
func (r *TraceRing) add(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) {
	if r == nil {
		return
	}
	t := &TraceRecord{TraceID: root.SpanContext().TraceID()}
	n := min(len(spans)+1, ringMaxSpansPerTrace)
	t.Spans = make([]SpanRecord, 0, n)
	for _, s := range spans {
		if len(t.Spans) == ringMaxSpansPerTrace-1 {
			break // the root always fits
		}
		t.Spans = append(t.Spans, copySpan(s))
	}
	t.Spans = append(t.Spans, copySpan(root))
	t.summarize()

	r.mu.Lock()
	defer r.mu.Unlock()
	if late := r.arriving[t.TraceID]; len(late) > 0 {
		t.Spans = append(t.Spans, late[:min(len(late), ringMaxSpansPerTrace-len(t.Spans))]...)
		t.summarize()
	}
	delete(r.arriving, t.TraceID)
	if t.bytes > r.maxBytes {
		r.dropped++
		return
	}
	if old := r.byID[t.TraceID]; old != nil {
		// The same trace again (a second local root: cannot happen with
		// one SERVER span per request, but never hold two copies).
		r.removeLocked(old)
	}
	for r.n == r.maxTraces || r.bytes+t.bytes > r.maxBytes {
		r.evictOldestLocked()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = t
	r.n++
	r.byID[t.TraceID] = t
	r.bytes += t.bytes
	r.added++
}

// addLate appends a span that ended after its trace's root (a stream's
// hop span ends when its body is closed) to the trace, if the ring holds
// it.
func (r *TraceRing) addLate(s sdktrace.ReadOnlySpan) {
	if r == nil {
		return
	}
	id := s.SpanContext().TraceID()
	r.mu.Lock()
	_, ok := r.byID[id]
	_, coming := r.arriving[id]
	r.mu.Unlock()
	if !ok && !coming {
		return
	}
	rec := copySpan(s) // outside the lock
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.byID[id]
	if t == nil {
		if late, coming := r.arriving[id]; coming && len(late) < ringMaxSpansPerTrace {
			r.arriving[id] = append(late, rec) // add takes it
		}
		return
	}
	if len(t.Spans) >= ringMaxSpansPerTrace {
		return
	}
	// Records are read without the lock once returned by Get or List, so
	// a late span makes a new record rather than growing the old one.
	nt := *t
	nt.Spans = append(slices.Clip(t.Spans), rec)
	nt.summarize()
	if nt.bytes > r.maxBytes {
		return
	}
	r.bytes += nt.bytes - t.bytes
	for i := 0; i < r.n; i++ {
		if j := (r.head + i) % len(r.buf); r.buf[j] == t {
			r.buf[j] = &nt
			break
		}
	}
	r.byID[id] = &nt
	for r.bytes > r.maxBytes && r.n > 1 {
		r.evictOldestLocked()
	}
}

func (r *TraceRing) evictOldestLocked() {
	t := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.bytes -= t.bytes
	delete(r.byID, t.TraceID)
	r.evicted++
}

// removeLocked takes t out of the FIFO, keeping the order of the others.
func (r *TraceRing) removeLocked(t *TraceRecord) {
	kept := make([]*TraceRecord, 0, r.n)
	for i := 0; i < r.n; i++ {
		j := (r.head + i) % len(r.buf)
		if r.buf[j] != t {
			kept = append(kept, r.buf[j])
		}
		r.buf[j] = nil
	}
	r.head, r.n = 0, len(kept)
	copy(r.buf, kept)
	r.bytes -= t.bytes
	delete(r.byID, t.TraceID)
}

// collect notes an ended non-root span of a trace whose root is still
// open. Used when the sampler keeps every trace and so buffers none.
func (r *TraceRing) collect(id trace.TraceID, s sdktrace.ReadOnlySpan) {
	r.collectAll(id, []sdktrace.ReadOnlySpan{s})
}

// collectAll is collect for several spans of one trace, under one lock
// (a request's compact record).
func (r *TraceRing) collectAll(id trace.TraceID, ss []sdktrace.ReadOnlySpan) {
	if r == nil || len(ss) == 0 {
		return
	}
	r.pmu.Lock()
	if _, done := r.finished[id]; done {
		r.pmu.Unlock()
		for _, s := range ss {
			r.addLate(s)
		}
		return
	}
	defer r.pmu.Unlock()
	spans, ok := r.pending[id]
	if !ok {
		if r.pendRing == nil {
			r.pendRing = make([]trace.TraceID, ringMaxPending)
		}
		// A fixed ring of ids: the oldest open trace is forgotten when
		// full, so traces whose root never ends cannot pile up.
		if old := r.pendRing[r.pendNext]; old.IsValid() {
			if _, still := r.pending[old]; still {
				delete(r.pending, old)
				r.mu.Lock()
				r.dropped++
				r.mu.Unlock()
			}
		}
		r.pendRing[r.pendNext] = id
		r.pendNext = (r.pendNext + 1) % ringMaxPending
	}
	if room := ringMaxSpansPerTrace - 1 - len(spans); room > 0 {
		r.pending[id] = append(spans, ss[:min(room, len(ss))]...)
	}
}

// finish ends collection of a trace at its root: kept (interesting) traces
// go into the ring, others are forgotten.
func (r *TraceRing) finish(root sdktrace.ReadOnlySpan, keep bool) {
	if r == nil {
		return
	}
	id := root.SpanContext().TraceID()
	r.pmu.Lock()
	spans := r.pending[id]
	delete(r.pending, id)
	if r.finishedRing == nil {
		r.finished = make(map[trace.TraceID]struct{}, ringMaxPending)
		r.finishedRing = make([]trace.TraceID, ringMaxPending)
	}
	if old := r.finishedRing[r.finishedNext]; old.IsValid() {
		delete(r.finished, old)
	}
	r.finishedRing[r.finishedNext] = id
	r.finishedNext = (r.finishedNext + 1) % ringMaxPending
	r.finished[id] = struct{}{}
	if keep {
		r.expect(id) // before a span can see the trace finished (collectAll)
	}
	r.pmu.Unlock()
	if keep {
		r.add(spans, root)
	}
}

// summarize fills the summary fields and the byte estimate.
func (t *TraceRecord) summarize() {
	t.Model, t.Outcome, t.Path, t.Channels = "", "", "", t.Channels[:0:0]
	if root := t.Root(); root != nil {
		t.Start, t.End = root.Start, root.End
		t.Outcome = root.Attr(AttrOutcome)
		t.Path = root.Attr(AttrFailoverPath)
		t.Model = root.Attr(AttrModel)
	}
	// The record, its map entry and ring slot, the spans' backing array.
	size := int64(unsafe.Sizeof(*t)) + traceOverhead
	for i := range t.Spans {
		s := &t.Spans[i]
		if t.Model == "" {
			t.Model = s.Attr(AttrModel)
		}
		if ch := s.Attr(AttrChannel); ch != "" && !slices.Contains(t.Channels, ch) {
			t.Channels = append(t.Channels, ch)
		}
		for _, ev := range s.Events {
			// A demoted channel a request tried last (or not at all) is
			// one of the channels its trace is about.
			if ev.Name != EventEarlyWarning {
				continue
			}
			for _, a := range ev.Attrs {
				if a.Key == AttrChannel && a.Value != "" && !slices.Contains(t.Channels, a.Value) {
					t.Channels = append(t.Channels, a.Value)
				}
			}
		}
		size += s.size()
	}
	for _, c := range t.Channels {
		size += int64(unsafe.Sizeof(c)) + allocOverhead
	}
	t.bytes = size
}

// Allocation overheads of the estimate: the allocator rounds every string
// and slice up to a size class (allocOverhead is a little more than the
// average waste measured by TestTraceRingByteBound), and a record costs a
// map entry and a ring slot besides itself.
const (
	allocOverhead = 24
	traceOverhead = 96
)

// size estimates what the record holds: struct, strings and slice backing
// arrays, each with allocOverhead.
func (s *SpanRecord) size() int64 {
	str := func(v string) int64 { return int64(len(v)) + allocOverhead }
	n := int64(unsafe.Sizeof(*s)) + str(s.Name) + str(s.StatusMessage) + allocOverhead // + attrs array
	for _, a := range s.Attrs {
		n += int64(unsafe.Sizeof(a)) + str(a.Key) + str(a.Value)
	}
	if len(s.Events) > 0 {
		n += allocOverhead
	}
	for _, e := range s.Events {
		n += int64(unsafe.Sizeof(e)) + str(e.Name) + allocOverhead
		for _, a := range e.Attrs {
			n += int64(unsafe.Sizeof(a)) + str(a.Key) + str(a.Value)
		}
	}
	return n
}

// copySpan makes the ring's owned copy of s.
func copySpan(s sdktrace.ReadOnlySpan) SpanRecord {
	r := SpanRecord{
		Name:     ownString(s.Name()),
		Kind:     s.SpanKind().String(),
		SpanID:   s.SpanContext().SpanID(),
		ParentID: s.Parent().SpanID(),
		Start:    s.StartTime(),
		End:      s.EndTime(),
	}
	if st := s.Status(); st.Code == codes.Error {
		r.Error, r.StatusMessage = true, ownString(st.Description)
	}
	r.Attrs = copyAttrs(s.Attributes())
	if ev := s.Events(); len(ev) > 0 {
		ev = ev[:min(len(ev), ringMaxEventsPerSpan)]
		r.Events = make([]SpanEvent, len(ev))
		for i, e := range ev {
			r.Events[i] = SpanEvent{Name: ownString(e.Name), Time: e.Time, Attrs: copyAttrs(e.Attributes)}
		}
	}
	return r
}

func copyAttrs(kvs []attribute.KeyValue) []Attr {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]Attr, len(kvs))
	for i, kv := range kvs {
		out[i] = Attr{Key: ownString(string(kv.Key)), Value: ownString(kv.Value.Emit())}
	}
	return out
}

// ownString copies s (so the record does not pin a larger SDK buffer) and
// truncates it at ringMaxValueLen bytes on a rune boundary.
func ownString(s string) string {
	if len(s) > ringMaxValueLen {
		cut := ringMaxValueLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strings.Clone(s[:cut]) + "…"
	}
	return strings.Clone(s)
}

package telemetry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// A record is one request's spans below the SERVER span, kept compactly
// while the request runs: names, times from the engine's clock, what the
// engine reported as typed values (the attributes are built from them
// only for a trace that is kept), parent links as indexes. Span ids are
// assigned as spans start, so a hop's traceparent names its span before
// the trace is decided, and the exported span carries that id.
//
// When the dispatch span ends, the record goes to the failover-aware
// sampler, which holds it with the trace until the SERVER span ends and
// decides (sampling.go): a kept trace's record is exported (export: the
// SDK's read-only view of each span, which the exporter and the trace
// ring read like any SDK span); a dropped one is never built.
//
// A record is written by the request's goroutine only; once handed to the
// sampler it is not written again.
type record struct {
	s      *Spans
	parent trace.SpanContext // the SERVER span's: every span's trace id, flags and trace state
	// The engine's clock and the wall clock when the record started: spans
	// are exported at wall0 plus their engine-clock offset from clock0, so
	// on a fake engine clock (tests, demos) they still sit under their
	// SERVER span's wall-clock times; on the real clock the two
	// are the same reading.
	clock0, wall0 time.Time

	n     int        // spans started
	first [4]spanRec // most requests: dispatch, one hop, await headers, stream gate
	more  []*spanRec // the rest, one allocation each (addresses must not move: contexts hold them)
	order []int16    // spans in the order they ended
	obuf  [6]int16   // order's first backing array
	hop0  hopRec     // the first hop's details; later hops allocate theirs
	hops  int        // hops started
	ev    []recEvent // events of every span, in the order they happened
	call  CallEnd    // the dispatch span's end
	err   bool       // a span's status is Error: the trace is interesting
	sent  bool       // handed to the sampler
	_     [0]func()  // not comparable
}

// recKind is what a span of the record is; it says which of its fields
// hold what.
type recKind uint8

const (
	recDispatch recKind = iota // attributes: record.call
	recSkip                    // s1 channel, s2 region, s3 state, n1 reopen_at (flag: set), flag2 forced
	recBackoff                 // s1 channel, n1 the wait
	recDegraded                // s1 reason, s2 model, s3 mode, s4 code
	recHop                     // hop
	recAwait                   // flag: header timeout
	recGate                    // s1 decision, n1 frames, n2 bytes
)

// spanRec is one span of a record. It is also what a context carries for
// it (trace.Span): code that reads the span from a context sees its ids;
// anything recorded through that interface is dropped (hopgate records
// spans through Spans only, and IsRecording says so).
type spanRec struct {
	embedded.Span
	// The read-only face of an ended span of a kept record (the SDK's
	// ReadOnlySpan, which exporters and the trace ring read): embedding
	// the interface gives it the interface's unexported method, as the
	// SDK's own tracetest.SpanStub snapshots do; every method is
	// implemented below, so the nil embedded value is never called.
	sdktrace.ReadOnlySpan

	rec         *record
	id          trace.SpanID
	parent      int16 // index in rec, -1: the SERVER span
	idx         int16
	what        recKind
	ended       bool
	failed      bool // status Error, described by desc
	flag, flag2 bool
	name, desc  string
	start, end  time.Time
	s1, s2      string
	s3, s4      string
	n1, n2      int64
	hop         *hopRec
}

// hopRec is what a hop span records beyond its name.
type hopRec struct {
	start         HopStart
	url           []attribute.KeyValue // Spans.urlAttrs, shared
	fields, betas []string             // Dropped
	streamEnd     string
	session       *SessionEnd // a realtime hop's (realtime.go)
	end           HopEnd
	ended         bool
}

// recEvent is a span event: named (with attrs, rare: an early-warning
// demotion), or an exception (err set).
type recEvent struct {
	span  int16
	name  string
	err   error
	attrs []attribute.KeyValue
	at    time.Time
}

var _ trace.Span = (*spanRec)(nil)

// newRecord starts the record of a request under the SERVER span parent.
func (s *Spans) newRecord(parent trace.SpanContext) *record {
	r := &record{s: s, parent: parent, clock0: s.clock.Now(), wall0: time.Now()}
	r.order = r.obuf[:0]
	return r
}

// add starts a span named name under the span parent (-1: the SERVER span).
func (r *record) add(what recKind, parent int16, name string) *spanRec {
	i := r.n
	r.n++
	var sp *spanRec
	if i < len(r.first) {
		sp = &r.first[i]
	} else {
		sp = new(spanRec)
		r.more = append(r.more, sp)
	}
	*sp = spanRec{rec: r, id: newSpanID(), parent: parent, idx: int16(i), what: what, name: name, start: r.s.clock.Now()}
	return sp
}

// at returns span i.
func (r *record) at(i int) *spanRec {
	if i < len(r.first) {
		return &r.first[i]
	}
	return r.more[i-len(r.first)]
}

// finish ends sp now.
func (sp *spanRec) finish() {
	if sp.ended {
		return
	}
	sp.ended, sp.end = true, sp.rec.s.clock.Now()
	r := sp.rec
	r.order = append(r.order, sp.idx)
	r.s.watched(sp.name)
}

// fail sets sp's status to Error with desc.
func (sp *spanRec) fail(desc string) {
	sp.failed, sp.desc = true, desc
	sp.rec.err = true
}

// event records an event on sp (err: an exception event).
func (sp *spanRec) event(name string, err error) {
	r := sp.rec
	r.ev = append(r.ev, recEvent{span: sp.idx, name: name, err: err, at: r.s.clock.Now()})
}

// eventAttrs records an event with attributes on sp.
func (sp *spanRec) eventAttrs(name string, attrs []attribute.KeyValue) {
	r := sp.rec
	r.ev = append(r.ev, recEvent{span: sp.idx, name: name, attrs: attrs, at: r.s.clock.Now()})
}

// newHop gives sp its hop details.
func (r *record) newHop(sp *spanRec) *hopRec {
	r.hops++
	if r.hops == 1 {
		sp.hop = &r.hop0
	} else {
		sp.hop = new(hopRec)
	}
	return sp.hop
}

// newSpanID returns a random, valid span id.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		v := rand.Uint64()
		for i := range id {
			id[i] = byte(v >> (8 * i))
		}
	}
	return id
}

// spanContext is the context of the record's span id.
func (r *record) spanContext(id trace.SpanID) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    r.parent.TraceID(),
		SpanID:     id,
		TraceFlags: r.parent.TraceFlags(),
		TraceState: r.parent.TraceState(),
	})
}

// The trace.Span face of a span (what contexts carry).

func (sp *spanRec) SpanContext() trace.SpanContext          { return sp.rec.spanContext(sp.id) }
func (sp *spanRec) IsRecording() bool                       { return false }
func (sp *spanRec) End(...trace.SpanEndOption)              {}
func (sp *spanRec) AddEvent(string, ...trace.EventOption)   {}
func (sp *spanRec) AddLink(trace.Link)                      {}
func (sp *spanRec) RecordError(error, ...trace.EventOption) {}
func (sp *spanRec) SetStatus(codes.Code, string)            {}
func (sp *spanRec) SetName(string)                          {}
func (sp *spanRec) SetAttributes(...attribute.KeyValue)     {}
func (sp *spanRec) TracerProvider() trace.TracerProvider    { return sp.rec.s.provider() }

// spanIn returns the record span ctx carries, or nil.
func spanIn(ctx context.Context) *spanRec {
	sp, _ := trace.SpanFromContext(ctx).(*spanRec)
	return sp
}

// kind is the span's SpanKind.
func (sp *spanRec) kind() trace.SpanKind {
	if sp.what == recHop {
		return trace.SpanKindClient
	}
	return trace.SpanKindInternal
}

// maxAttrs bounds the attributes of a span of kind what.
func (sp *spanRec) maxAttrs() int {
	switch sp.what {
	case recDispatch:
		return 7
	case recSkip:
		return 5
	case recBackoff:
		return 2
	case recDegraded:
		return 4
	case recHop:
		return 12 + len(sp.hop.url) + 2 + 1 + 9 + 4
	case recAwait:
		return 1
	case recGate:
		return 3
	}
	return 0
}

// appendAttrs appends sp's attributes, in the order spans recorded as SDK
// spans get them.
func (sp *spanRec) appendAttrs(a []attribute.KeyValue) []attribute.KeyValue {
	switch sp.what {
	case recDispatch:
		if sp.ended {
			a = appendCallEndAttrs(a, &sp.rec.call)
		}
	case recSkip:
		k := Skip{Channel: sp.s1, ChannelRegion: sp.s2, State: sp.s3, Forced: sp.flag2}
		if sp.flag {
			k.ReopenAt = time.Unix(0, sp.n1)
		}
		a = appendSkipAttrs(a, &k)
	case recBackoff:
		a = appendBackoffAttrs(a, sp.s1, time.Duration(sp.n1))
	case recDegraded:
		a = appendDegradedAttrs(a, &Degraded{Reason: sp.s1, Model: sp.s2, Mode: sp.s3, Code: sp.s4})
	case recHop:
		h := sp.hop
		a = appendHopStartAttrs(a, &h.start, h.url)
		a = appendDroppedAttrs(a, h.fields, h.betas)
		if h.streamEnd != "" {
			a = append(a, attribute.String(AttrStreamEnd, h.streamEnd))
		}
		if h.session != nil {
			a = appendSessionAttrs(a, h.session)
		}
		if h.ended {
			a = appendHopEndAttrs(a, &h.end)
		}
	case recAwait:
		if sp.flag {
			a = append(a, attribute.String(AttrErrorType, ErrTypeHeaderTimeout))
		}
	case recGate:
		if sp.ended {
			a = appendGateAttrs(a, sp.s1, int(sp.n1), int(sp.n2))
		}
	}
	return a
}

// The read-only face of a kept record's span. The record no longer
// changes once the sampler holds it, so each method reads it as it is;
// nothing is built at export but the list of spans (a view per span, as
// before, was a third of what a kept record allocated).
//
// Attributes are built when asked for (Attributes), or appended straight
// into an exporter's own buffer (AppendAttributes, what otlpwire's
// encoder calls): exporting a trace then allocates no attribute slice, a
// tenth of the bytes a completion allocated (hopbench's allocation
// profile, every trace exported).

func (sp *spanRec) Name() string { return sp.name }

func (sp *spanRec) Parent() trace.SpanContext {
	r := sp.rec
	if sp.parent < 0 {
		return r.parent
	}
	return r.spanContext(r.at(int(sp.parent)).id)
}

func (sp *spanRec) SpanKind() trace.SpanKind { return sp.kind() }
func (sp *spanRec) StartTime() time.Time     { return sp.rec.wall(sp.start) }
func (sp *spanRec) EndTime() time.Time       { return sp.rec.wall(sp.end) }

// Attributes builds the span's attributes, a new slice on every call.
func (sp *spanRec) Attributes() []attribute.KeyValue {
	if n := sp.maxAttrs(); n > 0 {
		if a := sp.appendAttrs(make([]attribute.KeyValue, 0, n)); len(a) > 0 {
			return a[:len(a):len(a)] // a reader's append copies
		}
	}
	return nil
}

// AppendAttributes appends what Attributes returns to a, without a slice
// of its own.
func (sp *spanRec) AppendAttributes(a []attribute.KeyValue) []attribute.KeyValue {
	return sp.appendAttrs(a)
}

func (sp *spanRec) Links() []sdktrace.Link   { return nil }
func (sp *spanRec) Events() []sdktrace.Event { return sp.rec.events(sp.idx) }

func (sp *spanRec) Status() sdktrace.Status {
	if sp.failed {
		return sdktrace.Status{Code: codes.Error, Description: sp.desc}
	}
	return sdktrace.Status{}
}

func (sp *spanRec) InstrumentationScope() instrumentation.Scope { return sp.rec.s.scope }

//nolint:staticcheck // the interface requires it
func (sp *spanRec) InstrumentationLibrary() instrumentation.Library { return sp.rec.s.scope }
func (sp *spanRec) Resource() *resource.Resource                    { return sp.rec.s.res }
func (sp *spanRec) DroppedAttributes() int                          { return 0 }
func (sp *spanRec) DroppedLinks() int                               { return 0 }
func (sp *spanRec) DroppedEvents() int                              { return 0 }

// ChildSpanCount counts the record's spans under sp.
func (sp *spanRec) ChildSpanCount() int {
	r, n := sp.rec, 0
	for i := 0; i < r.n; i++ {
		if r.at(i).parent == sp.idx {
			n++
		}
	}
	return n
}

var _ sdktrace.ReadOnlySpan = (*spanRec)(nil)

// export lists the record's ended spans, in the order they ended (the
// order the SDK would have handed them on). Called for a kept trace, by
// the sampler; a span that never ended is not exported, as the SDK
// exports no unended span.
func (r *record) export() []sdktrace.ReadOnlySpan {
	if len(r.order) == 0 {
		return nil
	}
	out := make([]sdktrace.ReadOnlySpan, len(r.order))
	for k, i := range r.order {
		out[k] = r.at(int(i))
	}
	return out
}

// wall places an engine-clock reading on the wall clock (see record).
func (r *record) wall(t time.Time) time.Time { return r.wall0.Add(t.Sub(r.clock0)) }

// events returns the SDK events of span i.
func (r *record) events(i int16) []sdktrace.Event {
	var out []sdktrace.Event
	for _, e := range r.ev {
		if e.span != i {
			continue
		}
		ev := sdktrace.Event{Name: e.name, Time: r.wall(e.at), Attributes: e.attrs}
		if e.err != nil {
			// As the SDK's RecordError writes it.
			ev.Name = semconv.ExceptionEventName
			ev.Attributes = []attribute.KeyValue{
				semconv.ExceptionType(errorType(e.err)),
				semconv.ExceptionMessage(e.err.Error()),
			}
		}
		out = append(out, ev)
	}
	return out
}

// errorType names err's type as the SDK's RecordError does.
func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

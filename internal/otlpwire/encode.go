package otlpwire

import (
	"math"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of opentelemetry/proto/{collector/trace,trace,common,
// resource}/v1 (OTLP 1.x; stable since 1.0).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1
	fResourceSpansScopeSpans = 2
	fResourceSpansSchemaURL  = 3

	fResourceAttributes = 1

	fScopeSpansScope     = 1
	fScopeSpansSpans     = 2
	fScopeSpansSchemaURL = 3

	fScopeName       = 1
	fScopeVersion    = 2
	fScopeAttributes = 3

	fSpanTraceID          = 1
	fSpanSpanID           = 2
	fSpanTraceState       = 3
	fSpanParentSpanID     = 4
	fSpanName             = 5
	fSpanKind             = 6
	fSpanStart            = 7
	fSpanEnd              = 8
	fSpanAttributes       = 9
	fSpanDroppedAttrs     = 10
	fSpanEvents           = 11
	fSpanDroppedEvents    = 12
	fSpanLinks            = 13
	fSpanDroppedLinks     = 14
	fSpanStatus           = 15
	fSpanFlags            = 16
	fEventTime            = 1
	fEventName            = 2
	fEventAttributes      = 3
	fEventDroppedAttrs    = 4
	fLinkTraceID          = 1
	fLinkSpanID           = 2
	fLinkTraceState       = 3
	fLinkAttributes       = 4
	fLinkDroppedAttrs     = 5
	fLinkFlags            = 6
	fStatusMessage        = 2
	fStatusCode           = 3
	fKeyValueKey          = 1
	fKeyValueValue        = 2
	fAnyString            = 1
	fAnyBool              = 2
	fAnyInt               = 3
	fAnyDouble            = 4
	fAnyArray             = 5
	fAnyKvlist            = 6
	fAnyBytes             = 7
	fArrayValues          = 1 // ArrayValue.values and KeyValueList.values
	statusCodeOk          = 1
	statusCodeError       = 2
	flagHasIsRemote       = 0x100 // SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
	flagIsRemote          = 0x200 // SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
	invalidAttributeValue = "INVALID"
)

// Encoder writes ExportTraceServiceRequest messages. It keeps the encoded
// resources and scopes it has seen (at most maxMemo; in a process they are
// always the same few): one Encoder per exporter, not safe for concurrent
// use.
type Encoder struct {
	groups []group
	memo   []memoEntry
	// The attributes of the current call's AttributeAppender spans, and
	// where each span's are (start offset, end offset; -1: the span's own
	// Attributes()).
	attrs []attribute.KeyValue
	spans [][2]int
}

// AttributeAppender is a span that can append its attributes to a
// caller's slice rather than return one it keeps (telemetry's compact
// spans build theirs from typed fields): the Encoder then reads them
// into a buffer it reuses from call to call, and exporting the span
// allocates no attribute slice. What it appends must be what its
// Attributes method returns.
type AttributeAppender interface {
	AppendAttributes([]attribute.KeyValue) []attribute.KeyValue
}

// maxAttrsKept bounds the attribute buffer an Encoder keeps between calls
// (a batch of 512 of hopgate's spans holds about 6 000).
const maxAttrsKept = 1 << 15

// attributes returns the attributes of span i (s) of the current call.
func (e *Encoder) attributes(i int, s sdktrace.ReadOnlySpan) []attribute.KeyValue {
	if r := e.spans[i]; r[0] >= 0 {
		return e.attrs[r[0]:r[1]:r[1]]
	}
	return s.Attributes()
}

// group is one (resource, scope) pair of a call, in order of first
// appearance.
type group struct {
	resKey attribute.Distinct // the resource's attribute set: the group key
	// res is the group's first span's resource; Append writes the one of
	// the first group with the key, so the first span's resource speaks for
	// all with the same attributes, as in the SDK's conversion.
	res   *resource.Resource
	scope instrumentation.Scope
	spans []int // indexes into the call's spans
}

// memoEntry is an encoded Resource or InstrumentationScope message body.
type memoEntry struct {
	res   *resource.Resource
	scope instrumentation.Scope
	isRes bool
	body  []byte
}

const maxMemo = 16

// Append appends the protobuf encoding of an ExportTraceServiceRequest
// holding spans to b. Spans are grouped by resource (by its attributes, as
// the SDK does), then by instrumentation scope, each in order of first
// appearance; spans keep their order within a group. Nil spans are
// skipped.
//
// The result decodes to the same message as the OTLP exporter's own
// conversion of the same spans (TestMatchesSDK), except that a link's
// trace_state is kept (the SDK drops it).
func (e *Encoder) Append(b []byte, spans []sdktrace.ReadOnlySpan) []byte {
	defer e.reset() // also after a panic in a span's methods
	e.group(spans)
	// Resources in order of first appearance; each with its scopes.
	for i := range e.groups {
		g := &e.groups[i]
		if e.seenRes(i) {
			continue
		}
		var rs int
		b, rs = beginLen(b, fRequestResourceSpans, 3)
		if g.res != nil {
			body := e.resourceBody(g.res)
			b = appendLen(b, fResourceSpansResource, len(body))
			b = append(b, body...)
		}
		for j := i; j < len(e.groups); j++ {
			if e.groups[j].resKey == g.resKey {
				b = e.appendScopeSpans(b, &e.groups[j], spans)
			}
		}
		if g.res != nil {
			b = appendString(b, fResourceSpansSchemaURL, g.res.SchemaURL())
		}
		b = endLen(b, rs, 3)
	}
	return b
}

// seenRes reports whether a group before i has the same resource.
func (e *Encoder) seenRes(i int) bool {
	for j := range i {
		if e.groups[j].resKey == e.groups[i].resKey {
			return true
		}
	}
	return false
}

func (e *Encoder) reset() {
	for i := range e.groups {
		e.groups[i] = group{spans: e.groups[i].spans[:0]}
	}
	e.groups = e.groups[:0]
	e.spans = e.spans[:0]
	clear(e.attrs) // they hold the spans' strings
	if cap(e.attrs) > maxAttrsKept {
		e.attrs = nil
	}
	e.attrs = e.attrs[:0]
}

// group sorts spans into groups.
func (e *Encoder) group(spans []sdktrace.ReadOnlySpan) {
	for i, s := range spans {
		r := [2]int{-1, -1}
		if a, ok := s.(AttributeAppender); ok {
			r[0] = len(e.attrs)
			e.attrs = a.AppendAttributes(e.attrs)
			r[1] = len(e.attrs)
		}
		e.spans = append(e.spans, r)
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		key := res.Equivalent()
		gi := -1
		for j := range e.groups {
			if e.groups[j].resKey == key && e.groups[j].scope == scope {
				gi = j
				break
			}
		}
		if gi < 0 {
			if len(e.groups) < cap(e.groups) {
				e.groups = e.groups[:len(e.groups)+1]
			} else {
				e.groups = append(e.groups, group{})
			}
			g := &e.groups[len(e.groups)-1]
			g.resKey, g.res, g.scope = key, res, scope
			gi = len(e.groups) - 1
		}
		g := &e.groups[gi]
		g.spans = append(g.spans, i)
	}
}

func (e *Encoder) appendScopeSpans(b []byte, g *group, spans []sdktrace.ReadOnlySpan) []byte {
	var ss int
	b, ss = beginLen(b, fResourceSpansScopeSpans, 3)
	if g.scope != (instrumentation.Scope{}) {
		body := e.scopeBody(g.scope)
		b = appendLen(b, fScopeSpansScope, len(body))
		b = append(b, body...)
	}
	for _, i := range g.spans {
		var sp int
		b, sp = beginLen(b, fScopeSpansSpans, 2)
		b = appendSpan(b, spans[i], e.attributes(i, spans[i]))
		b = endLen(b, sp, 2)
	}
	b = appendString(b, fScopeSpansSchemaURL, g.scope.SchemaURL)
	return endLen(b, ss, 3)
}

// resourceBody returns the encoded Resource message body of r (nil for a
// nil resource), from the memo when r was seen before.
func (e *Encoder) resourceBody(r *resource.Resource) []byte {
	if r == nil {
		return nil
	}
	for _, m := range e.memo {
		if m.isRes && m.res == r {
			return m.body
		}
	}
	var body []byte
	for it := r.Iter(); it.Next(); {
		body = appendKeyValue(body, fResourceAttributes, it.Attribute())
	}
	e.remember(memoEntry{res: r, isRes: true, body: body})
	return body
}

// scopeBody returns the encoded InstrumentationScope message body of s.
func (e *Encoder) scopeBody(s instrumentation.Scope) []byte {
	for _, m := range e.memo {
		if !m.isRes && m.scope == s {
			return m.body
		}
	}
	body := appendString(nil, fScopeName, s.Name)
	body = appendString(body, fScopeVersion, s.Version)
	for it := s.Attributes.Iter(); it.Next(); {
		body = appendKeyValue(body, fScopeAttributes, it.Attribute())
	}
	e.remember(memoEntry{scope: s, body: body})
	return body
}

// remember keeps at most maxMemo entries; a process has one resource and
// a handful of scopes, so eviction (oldest first) only bounds a caller
// that makes new ones per span.
func (e *Encoder) remember(m memoEntry) {
	if len(e.memo) == maxMemo {
		copy(e.memo, e.memo[1:])
		e.memo = e.memo[:maxMemo-1]
	}
	e.memo = append(e.memo, m)
}

func appendSpan(b []byte, s sdktrace.ReadOnlySpan, attrs []attribute.KeyValue) []byte {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		b = appendString(b, fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, fSpanParentSpanID, psid[:])
	}
	b = appendString(b, fSpanName, s.Name())
	b = appendVarint(b, fSpanKind, uint64(spanKind(s.SpanKind())))
	b = appendFixed64(b, fSpanStart, unixNano(s.StartTime().UnixNano()))
	b = appendFixed64(b, fSpanEnd, unixNano(s.EndTime().UnixNano()))
	for _, kv := range attrs {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	b = appendVarint(b, fSpanDroppedAttrs, uint64(clampUint32(s.DroppedAttributes())))
	for _, ev := range s.Events() {
		var evStart int
		b, evStart = beginLen(b, fSpanEvents, 1)
		b = appendFixed64(b, fEventTime, unixNano(ev.Time.UnixNano()))
		b = appendString(b, fEventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, fEventAttributes, kv)
		}
		b = appendVarint(b, fEventDroppedAttrs, uint64(clampUint32(ev.DroppedAttributeCount)))
		b = endLen(b, evStart, 1)
	}
	b = appendVarint(b, fSpanDroppedEvents, uint64(clampUint32(s.DroppedEvents())))
	for _, l := range s.Links() {
		var lStart int
		b, lStart = beginLen(b, fSpanLinks, 1)
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytes(b, fLinkTraceID, tid[:])
		b = appendBytes(b, fLinkSpanID, sid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			b = appendString(b, fLinkTraceState, ts.String())
		}
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, fLinkAttributes, kv)
		}
		b = appendVarint(b, fLinkDroppedAttrs, uint64(clampUint32(l.DroppedAttributeCount)))
		b = appendFixed32(b, fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		b = endLen(b, lStart, 1)
	}
	b = appendVarint(b, fSpanDroppedLinks, uint64(clampUint32(s.DroppedLinks())))
	st := s.Status()
	b = appendLen(b, fSpanStatus, statusSize(st))
	b = appendString(b, fStatusMessage, st.Description)
	b = appendVarint(b, fStatusCode, uint64(statusCode(st.Code)))
	return appendFixed32(b, fSpanFlags, spanFlags(sc.TraceFlags(), parent))
}

func statusSize(st sdktrace.Status) int {
	return stringField(fStatusMessage, st.Description) + varintField(fStatusCode, uint64(statusCode(st.Code)))
}

func keyValueSize(kv attribute.KeyValue) int {
	return stringField(fKeyValueKey, string(kv.Key)) + lenField(fKeyValueValue, valueSize(kv.Value))
}

// appendKeyValue looks at the key's bytes, and a string value's, once:
// every nested size is computed from what is written. Recomputing them
// (each a UTF-8 check of the same strings) took a quarter of the
// encoder's time (BenchmarkEncode).
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	key := validUTF8(string(kv.Key))
	keySize := 0
	if key != "" {
		keySize = lenField(fKeyValueKey, len(key))
	}
	var s string
	str := kv.Value.Type() == attribute.STRING
	valSize := 0
	if str {
		s = validUTF8(kv.Value.AsString())
		valSize = lenField(fAnyString, len(s))
	} else {
		valSize = valueSize(kv.Value)
	}
	b = appendLen(b, num, keySize+lenField(fKeyValueValue, valSize))
	if key != "" {
		b = append(appendLen(b, fKeyValueKey, len(key)), key...)
	}
	b = appendLen(b, fKeyValueValue, valSize)
	if str {
		return append(appendLen(b, fAnyString, len(s)), s...)
	}
	return appendValue(b, kv.Value)
}

// valueSize is the size of the AnyValue message body of v. A oneof member
// is written even when it holds its type's zero value.
func valueSize(v attribute.Value) int {
	switch v.Type() {
	case attribute.BOOL:
		return 1 + 1
	case attribute.INT64:
		return 1 + protowire.SizeVarint(uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return 1 + 8
	case attribute.STRING:
		return lenField(fAnyString, len(validUTF8(v.AsString())))
	case attribute.BYTESLICE:
		return lenField(fAnyBytes, len(v.AsByteSlice()))
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE,
		attribute.STRINGSLICE, attribute.SLICE:
		return lenField(fAnyArray, compositeSize(v))
	case attribute.MAP:
		return lenField(fAnyKvlist, compositeSize(v))
	case attribute.EMPTY:
		return 0
	default:
		return lenField(fAnyString, len(invalidAttributeValue))
	}
}

func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		x := uint64(0)
		if v.AsBool() {
			x = 1
		}
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyBool, protowire.VarintType), x)
	case attribute.INT64:
		return protowire.AppendVarint(protowire.AppendTag(b, fAnyInt, protowire.VarintType), uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return protowire.AppendFixed64(protowire.AppendTag(b, fAnyDouble, protowire.Fixed64Type), math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		return appendLenString(b, fAnyString, v.AsString())
	case attribute.BYTESLICE:
		return appendBytes(b, fAnyBytes, v.AsByteSlice())
	case attribute.EMPTY:
		return b
	case attribute.BOOLSLICE, attribute.INT64SLICE, attribute.FLOAT64SLICE,
		attribute.STRINGSLICE, attribute.SLICE, attribute.MAP:
		// Rare in spans.
		num := protowire.Number(fAnyArray)
		if v.Type() == attribute.MAP {
			num = fAnyKvlist
		}
		b = appendLen(b, num, compositeSize(v))
		if v.Type() == attribute.MAP {
			for _, kv := range v.AsMap() {
				b = appendKeyValue(b, fArrayValues, kv)
			}
			return b
		}
		elems(v, func(x attribute.Value) { b = appendElem(b, x) })
		return b
	default:
		return appendLenString(b, fAnyString, invalidAttributeValue)
	}
}

// compositeSize is the size of the ArrayValue or KeyValueList message
// body of a slice or map value.
func compositeSize(v attribute.Value) int {
	n := 0
	if v.Type() == attribute.MAP {
		for _, kv := range v.AsMap() {
			n += lenField(fArrayValues, keyValueSize(kv))
		}
		return n
	}
	elems(v, func(x attribute.Value) { n += elemSize(x) })
	return n
}

// elems calls fn with every element of a slice value, as a value of its
// own: what ArrayValue holds.
func elems(v attribute.Value, fn func(attribute.Value)) {
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, x := range v.AsBoolSlice() {
			fn(attribute.BoolValue(x))
		}
	case attribute.INT64SLICE:
		for _, x := range v.AsInt64Slice() {
			fn(attribute.Int64Value(x))
		}
	case attribute.FLOAT64SLICE:
		for _, x := range v.AsFloat64Slice() {
			fn(attribute.Float64Value(x))
		}
	case attribute.STRINGSLICE:
		for _, x := range v.AsStringSlice() {
			fn(attribute.StringValue(x))
		}
	case attribute.SLICE:
		for _, x := range v.AsSlice() {
			fn(x)
		}
	}
}

// elemSize and appendElem are one AnyValue of an ArrayValue.
func elemSize(x attribute.Value) int { return lenField(fArrayValues, valueSize(x)) }

func appendElem(b []byte, x attribute.Value) []byte {
	return appendValue(appendLen(b, fArrayValues, valueSize(x)), x)
}

func spanKind(k trace.SpanKind) int {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	default:
		return 0
	}
}

func statusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return statusCodeOk
	case codes.Error:
		return statusCodeError
	default:
		return 0
	}
}

// spanFlags is the W3C trace flags in the low byte plus whether the parent
// is remote, as the SDK's own conversion sets them.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

func unixNano(ns int64) uint64 { return uint64(max(0, ns)) } //nolint:gosec // clamped

func clampUint32(v int) uint32 {
	if v < 0 {
		return 0
	}
	if int64(v) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}

// Field sizes and writers. proto3: a scalar or string at its zero value is
// not written; a message field is written whenever present.

func lenField(num protowire.Number, size int) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(uint64(size)) + size
}

func stringField(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return lenField(num, len(validUTF8(s)))
}

// validUTF8 is s with every invalid UTF-8 sequence replaced by U+FFFD.
// Protobuf string fields must be UTF-8, and receivers reject the whole
// request otherwise (the SDK's marshal failed the whole batch locally): one
// attribute copied from a client's bytes must not cost 512 spans.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func varintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendLen(b []byte, num protowire.Number, size int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(size))
}

// beginLen appends the tag of the length-delimited field num and room for
// its length, guess bytes of varint, before a body whose size is not known
// yet; endLen writes the length once the body is written. It returns where
// the body starts. A body's size is thus taken from what was written, in
// one pass over the spans, rather than computed before by a pass of its
// own that walked every attribute twice.
func beginLen(b []byte, num protowire.Number, guess int) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = append(b, make([]byte, guess)...)
	return b, len(b)
}

// endLen writes the length of the body that started at start, after guess
// bytes of room (beginLen). The length is a minimal varint, as a size pass
// would have written it: when it needs more or fewer bytes than guess, the
// body moves (rare: guess fits the usual span or batch).
func endLen(b []byte, start, guess int) []byte {
	size := len(b) - start
	n := protowire.SizeVarint(uint64(size))
	if n != guess {
		if n > guess {
			b = append(b, make([]byte, n-guess)...)
		}
		copy(b[start-guess+n:], b[start:start+size])
		b = b[:start-guess+n+size]
	}
	protowire.AppendVarint(b[start-guess:start-guess], uint64(size)) // in place: n bytes
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendLenString(b, num, s)
}

func appendLenString(b []byte, num protowire.Number, s string) []byte {
	s = validUTF8(s)
	return append(appendLen(b, num, len(s)), s...)
}

func appendBytes(b []byte, num protowire.Number, p []byte) []byte {
	return append(appendLen(b, num, len(p)), p...)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

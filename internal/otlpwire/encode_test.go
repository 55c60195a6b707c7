package otlpwire

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// captureClient is an otlptrace.Client that marshals what the SDK's
// exporter converted, as otlptracehttp does before sending, and keeps the
// bytes instead of sending them.
type captureClient struct{ wire []byte }

func (c *captureClient) Start(context.Context) error { return nil }
func (c *captureClient) Stop(context.Context) error  { return nil }
func (c *captureClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	var err error
	c.wire, err = proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	return err
}

// sdkRequest is the OTLP exporter's own conversion of spans, as a collector
// would decode it.
func sdkRequest(t testing.TB, spans []sdktrace.ReadOnlySpan) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c := &captureClient{}
	exp, err := otlptrace.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(c.wire, &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

// ourRequest decodes the encoder's bytes. It also checks that appending
// keeps what b held and that a second call gives the same bytes (the
// memo and the reused group state).
func ourRequest(t testing.TB, e *Encoder, spans []sdktrace.ReadOnlySpan) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	b := e.Append([]byte("prefix"), spans)
	if !strings.HasPrefix(string(b), "prefix") {
		t.Fatal("Append overwrote the buffer's contents")
	}
	again := e.Append(nil, spans)
	if string(again) != string(b[len("prefix"):]) {
		t.Fatal("a second Append of the same spans gave different bytes")
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b[len("prefix"):], &req); err != nil {
		t.Fatalf("our bytes do not decode: %v", err)
	}
	return &req
}

// normalize makes two requests comparable: the SDK emits resources in map
// order, and drops a link's trace_state, which we keep.
func normalize(req *coltracepb.ExportTraceServiceRequest) {
	slices.SortStableFunc(req.ResourceSpans, func(a, b *tracepb.ResourceSpans) int {
		return strings.Compare(a.GetResource().String(), b.GetResource().String())
	})
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				for _, l := range s.Links {
					l.TraceState = ""
				}
			}
		}
	}
}

func requireSame(t *testing.T, e *Encoder, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	want, got := sdkRequest(t, spans), ourRequest(t, e, spans)
	normalize(want)
	normalize(got)
	if !proto.Equal(want, got) {
		t.Fatalf("encodings differ\nSDK: %v\nours: %v", want, got)
	}
}

// gatewaySpans is a failover trace as DESIGN §5 draws it (names and
// attributes as telemetry/names.go spells them; the package cannot import
// it): a stream whose cheapest channel is open, whose second answers 503
// and whose third commits. It also carries an event and dropped counts.
func gatewaySpans(res *resource.Resource) []sdktrace.ReadOnlySpan { return traceSpans(res, true) }

// healthySpans is the trace of a healthy completion: server, dispatch, one
// hop and its await-headers span, the four spans every request exports.
func healthySpans(res *resource.Resource) []sdktrace.ReadOnlySpan { return traceSpans(res, false) }

func traceSpans(res *resource.Resource, failover bool) []sdktrace.ReadOnlySpan {
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sc := func(id byte) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{id, 1}, TraceFlags: trace.FlagsSampled})
	}
	start := time.Date(2026, 11, 30, 1, 2, 3, 4, time.UTC)
	at := func(us int) time.Time { return start.Add(time.Duration(us) * time.Microsecond) }
	scope := instrumentation.Scope{Name: "github.com/hopgate/hopgate", Version: "0.1.0"}
	httpScope := instrumentation.Scope{Name: "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp", Version: "0.72.0"}
	path, hops := "c:ok", 1
	if failover {
		path, hops = "a:open -> b:503 -> c:ok", 2
	}
	span := func(id, parent byte, name string, kind trace.SpanKind, from, to int, attrs ...attribute.KeyValue) tracetest.SpanStub {
		st := tracetest.SpanStub{Name: name, SpanContext: sc(id), SpanKind: kind, StartTime: at(from), EndTime: at(to),
			Attributes: attrs, InstrumentationScope: scope, Resource: res}
		if parent != 0 {
			st.Parent = sc(parent)
		}
		return st
	}
	hop := func(id byte, channel string, index int, outcome string, from, to int) tracetest.SpanStub {
		return span(id, 2, "chat gpt-4o-mini-2024-07-18", trace.SpanKindClient, from, to,
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.provider.name", "openai"),
			attribute.String("gen_ai.request.model", "gpt-4o-mini-2024-07-18"),
			attribute.String("gen_ai.response.model", "gpt-4o-mini-2024-07-18"),
			attribute.Int("gen_ai.usage.input_tokens", 12),
			attribute.Int("gen_ai.usage.output_tokens", 48),
			attribute.String("http.request.method", "POST"),
			attribute.Int("http.response.status_code", 200),
			attribute.String("server.address", "api.openai.example"),
			attribute.String("hopgate.channel", channel),
			attribute.String("hopgate.channel.region", "eu-west-1"),
			attribute.Int("hopgate.hop.index", index),
			attribute.String("hopgate.hop.outcome", outcome),
		)
	}
	server := span(1, 0, "POST /v1/chat/completions", trace.SpanKindServer, 0, 3000,
		attribute.String("http.request.method", "POST"),
		attribute.String("url.path", "/v1/chat/completions"),
		attribute.String("url.scheme", "http"),
		attribute.String("server.address", "127.0.0.1"),
		attribute.Int("server.port", 8080),
		attribute.String("network.peer.address", "127.0.0.1"),
		attribute.Int("network.peer.port", 51234),
		attribute.String("user_agent.original", "Go-http-client/1.1"),
		attribute.Int("http.response.status_code", 200),
		attribute.Int64("http.response.body.size", 1024),
		attribute.String("hopgate.failover.path", path),
		attribute.String("hopgate.outcome", "ok"),
	)
	server.InstrumentationScope = httpScope
	dispatch := span(2, 1, "dispatch gpt-4o-mini", trace.SpanKindInternal, 1, 2900,
		attribute.String("hopgate.model", "gpt-4o-mini"),
		attribute.String("hopgate.chain", "a,b,c"),
		attribute.Int("hopgate.hops", hops),
		attribute.String("hopgate.outcome", "ok"),
	)
	ok := hop(6, "c", hops-1, "ok", 1200, 2800)
	stubs := tracetest.SpanStubs{server, dispatch}
	if failover {
		failed := hop(4, "b", 0, "503", 10, 1100)
		failed.Attributes[7] = attribute.Int("http.response.status_code", 503)
		failed.Attributes = append(failed.Attributes, attribute.String("error.type", "503"))
		failed.Status = sdktrace.Status{Code: codes.Error, Description: "503 Service Unavailable"}
		failed.Events = []sdktrace.Event{{Name: "exception", Time: at(1000),
			Attributes:            []attribute.KeyValue{attribute.String("exception.message", "upstream 503")},
			DroppedAttributeCount: 2}}
		failed.DroppedAttributes, failed.DroppedEvents = 3, 1
		stubs = append(stubs,
			span(3, 2, "breaker skip a", trace.SpanKindInternal, 2, 3,
				attribute.String("hopgate.channel", "a"),
				attribute.String("hopgate.breaker.state", "open"),
				attribute.String("hopgate.breaker.reopen_at", "2026-11-30T01:03:03Z")),
			failed,
			span(5, 4, "await headers", trace.SpanKindInternal, 11, 1000),
		)
	}
	stubs = append(stubs, ok, span(7, 6, "await headers", trace.SpanKindInternal, 1201, 1900))
	if failover {
		stubs = append(stubs, span(8, 6, "stream gate", trace.SpanKindInternal, 1900, 2000,
			attribute.String("hopgate.gate.decision", "commit_content"),
			attribute.Int("hopgate.gate.frames_held", 2),
			attribute.Int("hopgate.gate.bytes_held", 180)))
	}
	return stubs.Snapshots()
}

// Why: the bytes must decode to exactly what the SDK's exporter would
// have sent for the spans the gateway makes.
func TestMatchesSDK(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "hopgate"), attribute.String("service.version", "0.1.0"))
	var e Encoder
	requireSame(t, &e, gatewaySpans(res))
	requireSame(t, &e, healthySpans(res))
	requireSame(t, &e, gatewaySpans(nil))
	requireSame(t, &e, nil)
	requireSame(t, &e, append(gatewaySpans(res), nil))

	slices := gatewaySpans(res)[0:1]
	stub := tracetest.SpanStubFromReadOnlySpan(slices[0])
	stub.Attributes = []attribute.KeyValue{
		attribute.StringSlice("s", []string{"openai-us", ""}),
		attribute.Int64Slice("i", []int64{-1, 0, 1 << 40}),
		attribute.BoolSlice("b", []bool{true, false}),
		attribute.Float64Slice("f", []float64{0, -1.5, math.Inf(1)}),
		attribute.Slice("x", attribute.IntValue(1), attribute.StringValue("two")),
		attribute.Map("m", attribute.String("k", "v")),
	}
	requireSame(t, &e, []sdktrace.ReadOnlySpan{stub.Snapshot()})
}

// Why: spans that append their attributes (telemetry's compact spans)
// are read through AppendAttributes, not Attributes, and encode as the
// SDK would encode them, next to spans that do not, in the same call and
// in the calls after it (the buffer is reused).
func TestAttributeAppender(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "hopgate"))
	var e Encoder
	for round := range 3 {
		spans := gatewaySpans(res)
		if round == 2 {
			spans = healthySpans(res) // fewer: stale ranges would show
		}
		mixed := make([]sdktrace.ReadOnlySpan, len(spans))
		var appenders []*appenderSpan
		for i, s := range spans {
			mixed[i] = s
			if i%2 == round%2 {
				a := &appenderSpan{ReadOnlySpan: s}
				appenders = append(appenders, a)
				mixed[i] = a
			}
		}
		got := ourRequest(t, &e, mixed)
		if want := sdkRequest(t, spans); !proto.Equal(want, got) {
			t.Fatalf("encodings differ\nSDK: %v\nours: %v", want, got)
		}
		for _, a := range appenders {
			// ourRequest appends twice: once each.
			if a.appended != 2 || a.read != 0 {
				t.Fatalf("span %q: AppendAttributes called %d times, Attributes %d; want twice and never",
					a.Name(), a.appended, a.read)
			}
		}
	}
}

// appenderSpan is a span that can append its attributes, and counts how
// they were read.
type appenderSpan struct {
	sdktrace.ReadOnlySpan
	appended, read int
}

func (a *appenderSpan) Attributes() []attribute.KeyValue {
	a.read++
	return a.ReadOnlySpan.Attributes()
}

func (a *appenderSpan) AppendAttributes(kv []attribute.KeyValue) []attribute.KeyValue {
	a.appended++
	return append(kv, a.ReadOnlySpan.Attributes()...)
}

// Why: protobuf strings must be UTF-8, and a receiver rejects the whole
// request over one bad string (the SDK's marshal failed the whole batch).
// Invalid sequences become U+FFFD, everything else is unchanged.
func TestInvalidUTF8(t *testing.T) {
	bad := "gpt\xff-4o\xc3"
	stub := tracetest.SpanStub{
		Name:                 "chat " + bad,
		Attributes:           []attribute.KeyValue{attribute.String(bad, bad), attribute.StringSlice("s", []string{bad})},
		Status:               sdktrace.Status{Code: codes.Error, Description: bad},
		Events:               []sdktrace.Event{{Name: bad}},
		InstrumentationScope: instrumentation.Scope{Name: bad},
	}
	fixed := strings.ToValidUTF8(bad, "\uFFFD")
	want := stub
	want.Name = "chat " + fixed
	want.Attributes = []attribute.KeyValue{attribute.String(fixed, fixed), attribute.StringSlice("s", []string{fixed})}
	want.Status.Description = fixed
	want.Events = []sdktrace.Event{{Name: fixed}}
	want.InstrumentationScope = instrumentation.Scope{Name: fixed}
	var e Encoder
	got := ourRequest(t, &e, []sdktrace.ReadOnlySpan{stub.Snapshot()}) // proto.Unmarshal checks UTF-8
	exp := sdkRequest(t, []sdktrace.ReadOnlySpan{want.Snapshot()})
	if !proto.Equal(exp, got) {
		t.Fatalf("encodings differ\nSDK: %v\nours: %v", exp, got)
	}
}

// Why: spans from two resources and several scopes interleave in a batch;
// each must land under its own resource and scope, in span order.
func TestGroups(t *testing.T) {
	r1 := resource.NewSchemaless(attribute.String("service.name", "a"))
	r2 := resource.NewSchemaless(attribute.String("service.name", "b"))
	a, b := gatewaySpans(r1), gatewaySpans(r2)
	mixed := []sdktrace.ReadOnlySpan{a[0], b[1], a[1], b[0], a[2], b[2]}
	var e Encoder
	requireSame(t, &e, mixed)
	got := ourRequest(t, &e, mixed)
	if n := len(got.ResourceSpans); n != 2 {
		t.Fatalf("%d resource spans, want 2", n)
	}
}

// Why: a randomized oracle over every attribute type and span field the
// SDK can hand an exporter, beyond the shapes the gateway makes today.
func TestMatchesSDKRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	resources := []*resource.Resource{
		nil,
		resource.Empty(),
		resource.NewSchemaless(attribute.String("service.name", "x"), attribute.Int("k", 1)),
		resource.NewWithAttributes("https://example.com/schema", attribute.Bool("b", true)),
		// Same attributes, another pointer and schema: one group, the
		// first span's resource speaks for it.
		resource.NewWithAttributes("https://example.com/other", attribute.Bool("b", true)),
	}
	var e Encoder
	for i := range 2000 {
		n := rng.IntN(6)
		spans := make([]sdktrace.ReadOnlySpan, 0, n)
		for range n {
			if rng.IntN(20) == 0 {
				spans = append(spans, nil)
				continue
			}
			spans = append(spans, randomStub(rng, resources[rng.IntN(len(resources))]).Snapshot())
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { requireSame(t, &e, spans) })
		if t.Failed() {
			return
		}
	}
	if len(e.memo) > maxMemo { // 24 scopes and 4 resources went through it
		t.Fatalf("the encoder remembers %d resources and scopes, more than %d", len(e.memo), maxMemo)
	}
}

func randomStub(rng *rand.Rand, res *resource.Resource) tracetest.SpanStub {
	id := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			if rng.IntN(4) > 0 {
				b[i] = byte(rng.Uint32())
			}
		}
		return b
	}
	sc := func() trace.SpanContext {
		var tid trace.TraceID
		var sid trace.SpanID
		copy(tid[:], id(16))
		copy(sid[:], id(8))
		cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(rng.IntN(256)), Remote: rng.IntN(2) == 0}
		if rng.IntN(3) == 0 {
			ts, err := trace.ParseTraceState("vendor=v" + fmt.Sprint(rng.IntN(100)) + ",other=x")
			if err == nil {
				cfg.TraceState = ts
			}
		}
		return trace.NewSpanContext(cfg)
	}
	scopes := []instrumentation.Scope{
		{},
		{Name: "a"},
		{Name: "b", Version: "1.2.3", SchemaURL: "https://example.com/s"},
		{Name: "c", Attributes: attribute.NewSet(attribute.String("scope.attr", "v"), attribute.Int("n", -3))},
	}
	for i := range 20 { // more scopes than the encoder's memo holds
		scopes = append(scopes, instrumentation.Scope{Name: fmt.Sprint("many-", i)})
	}
	times := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return time.Unix(0, rng.Int64())
		case 2:
			return time.Unix(-5, 0)
		default:
			return time.Unix(1, rng.Int64N(1e9))
		}
	}
	s := tracetest.SpanStub{
		Name:                 strings.Repeat("n", []int{0, 70, 140, 20000}[rng.IntN(4)]), // 1-, 2- and 3-byte lengths
		SpanContext:          sc(),
		SpanKind:             trace.SpanKind(rng.IntN(7)),
		StartTime:            times(),
		EndTime:              times(),
		Attributes:           randomAttrs(rng, rng.IntN(6), 2),
		DroppedAttributes:    rng.IntN(3) * 200,
		DroppedEvents:        rng.IntN(2),
		DroppedLinks:         rng.IntN(2) * 70000,
		Status:               sdktrace.Status{Code: codes.Code(rng.IntN(4)), Description: strings.Repeat("d", rng.IntN(2)*5)},
		InstrumentationScope: scopes[rng.IntN(len(scopes))],
		Resource:             res,
	}
	if rng.IntN(2) == 0 {
		s.Parent = sc()
	}
	for range rng.IntN(3) {
		s.Events = append(s.Events, sdktrace.Event{Name: strings.Repeat("e", rng.IntN(3)), Time: times(), Attributes: randomAttrs(rng, rng.IntN(3), 1), DroppedAttributeCount: rng.IntN(2)})
	}
	for range rng.IntN(3) {
		s.Links = append(s.Links, sdktrace.Link{SpanContext: sc(), Attributes: randomAttrs(rng, rng.IntN(3), 1), DroppedAttributeCount: rng.IntN(2)})
	}
	return s
}

func randomAttrs(rng *rand.Rand, n, depth int) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, n)
	for range n {
		out = append(out, attribute.KeyValue{Key: attribute.Key(strings.Repeat("k", rng.IntN(4))), Value: randomValue(rng, depth)})
	}
	return out
}

func randomValue(rng *rand.Rand, depth int) attribute.Value {
	str := func() string { return strings.Repeat("v", rng.IntN(3)*60) }
	switch k := rng.IntN(13); {
	case k == 0:
		return attribute.BoolValue(rng.IntN(2) == 0)
	case k == 1:
		return attribute.Int64Value(rng.Int64() - rng.Int64())
	case k == 2:
		return attribute.Float64Value([]float64{0, -0.5, math.NaN(), math.MaxFloat64}[rng.IntN(4)])
	case k == 3:
		return attribute.StringValue(str())
	case k == 4:
		return attribute.BoolSliceValue([]bool{true, false}[:rng.IntN(3)])
	case k == 5:
		return attribute.Int64SliceValue([]int64{0, -1, math.MaxInt64}[:rng.IntN(4)])
	case k == 6:
		return attribute.Float64SliceValue([]float64{0, 2.5}[:rng.IntN(3)])
	case k == 7:
		return attribute.StringSliceValue([]string{"", "a", str()}[:rng.IntN(4)])
	case k == 8:
		return attribute.ByteSliceValue([]byte("bytes")[:rng.IntN(6)])
	case k == 9 && depth > 0:
		vs := make([]attribute.Value, rng.IntN(3))
		for i := range vs {
			vs[i] = randomValue(rng, depth-1)
		}
		return attribute.SliceValue(vs...)
	case k == 10 && depth > 0:
		return attribute.MapValue(randomAttrs(rng, rng.IntN(3), depth-1)...)
	case k == 11:
		return attribute.Value{} // EMPTY
	default:
		return attribute.StringValue("")
	}
}

// Why: span names and attribute values carry client-chosen bytes (a model
// name, a path). Whatever they are, the bytes must decode to what the SDK
// makes of the same span once invalid UTF-8 is replaced, as the encoder
// does.
func FuzzEncode(f *testing.F) {
	f.Add("chat gpt-4o-mini", "gen_ai.request.model", "gpt-4o-mini", "", "scope", int64(12), []byte{1, 2})
	f.Add("gpt\xff", "k\xc3", "v\xed\xa0\x80", "503 \x00", "", int64(-1), []byte(nil))
	f.Add("", "", "", "", "s", int64(0), []byte{0xff})
	f.Fuzz(func(t *testing.T, name, key, val, desc, scope string, n int64, raw []byte) {
		stub := func(fix func(string) string) tracetest.SpanStub {
			return tracetest.SpanStub{
				Name: fix(name),
				Attributes: []attribute.KeyValue{
					attribute.String(fix(key), fix(val)),
					attribute.Int64(fix(key)+".n", n),
					attribute.StringSlice("s", []string{fix(val), fix(name)}),
					attribute.String("b", string(raw)), // a string from raw bytes
				},
				Status:               sdktrace.Status{Code: codes.Error, Description: fix(desc)},
				Events:               []sdktrace.Event{{Name: fix(val)}},
				InstrumentationScope: instrumentation.Scope{Name: fix(scope)},
			}
		}
		keep := func(s string) string { return s }
		valid := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
		raws, fixed := stub(keep), stub(valid)
		fixed.Attributes[3] = attribute.String("b", valid(string(raw)))
		var e Encoder
		got := ourRequest(t, &e, []sdktrace.ReadOnlySpan{raws.Snapshot()})
		want := sdkRequest(t, []sdktrace.ReadOnlySpan{fixed.Snapshot()})
		if !proto.Equal(want, got) {
			t.Fatalf("encodings differ\nSDK: %v\nours: %v", want, got)
		}
	})
}

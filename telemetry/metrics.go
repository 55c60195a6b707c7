package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Bucket boundaries, in seconds. Hops range from a fast 429 (tens of ms) to
// image generation bounded by the 240 s header timeout.
var (
	hopDurationBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 240, 300}
	gateWaitBuckets    = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	// GenAI semconv advisory boundaries.
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// interestingKey marks a context whose measurement belongs to a trace the
// tail sampler will keep (a failed hop always makes its trace interesting),
// so the exemplar filter may attach its trace id. See exemplarFilter.
type interestingKey struct{}

// BreakerObservation is one channel's breaker state as seen by the
// hopgate_breaker_state gauge callback.
type BreakerObservation struct {
	Channel, ChannelRegion string
	State                  int // 0 closed, 1 half-open, 2 open
}

// EarlyWarningObservation is one channel's early-warning state as seen by
// the hopgate_early_warning_demoted gauge callback.
type EarlyWarningObservation struct {
	Channel, ChannelRegion string
	Demoted                bool
}

// Metrics records every hopgate metric of DESIGN.md §5. All methods are
// safe for concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	region attribute.KeyValue

	breakerState       metric.Int64ObservableGauge
	breakerTransitions metric.Int64Counter
	breakerSkips       metric.Int64Counter
	hops               metric.Int64Counter
	hopDuration        metric.Float64Histogram
	requests           metric.Int64Counter
	gateDecisions      metric.Int64Counter
	gateWait           metric.Float64Histogram
	headerTimeouts     metric.Int64Counter
	chainExceeded      metric.Int64Counter
	degraded           metric.Int64Counter
	cost               metric.Float64Counter
	malformed          metric.Int64Counter
	interrupted        metric.Int64Counter
	genAIDuration      metric.Float64Histogram
	genAITokens        metric.Int64Histogram
	wallet             walletInstruments // wallet.go
	overload           overloadMetrics   // overload.go
	ratelimit          rateLimitInstruments
	realtime           realtimeMetrics // realtime.go
	ewDemoted          metric.Int64ObservableGauge
	ewDemotions        metric.Int64Counter
	ewReordered        metric.Int64Counter
	ewPremiumRequests  metric.Int64Counter
	ewPremium          metric.Float64Counter

	breakers atomic.Pointer[func() []BreakerObservation]
	warnings atomic.Pointer[func() []EarlyWarningObservation]
	rates    *ErrorRates // the on-call page's per-channel error rate

	// attrs caches the measurement option of each label tuple of the
	// per-request instruments (hop, request, gate, cost, GenAI): building an
	// attribute set sorts and copies the labels and allocates, and the
	// tuples repeat for every request.
	attrs attrCache
}

// Kinds of cached label tuples; each kind has its own label names.
const (
	kindHop uint8 = iota
	kindRequest
	kindGate
	kindChannelModel
	kindGenAIDuration
	kindGenAITokens
)

// attrKey is a label tuple of one kind; unused fields stay "".
type attrKey struct {
	kind          uint8
	a, b, c, d, e string
}

// maxCachedAttrs bounds the cache: labels come from the config (channels,
// models, outcomes) except gen_ai.response.model, which the upstream picks.
// Past the bound, options are built per call as before.
const maxCachedAttrs = 4096

type attrCache struct {
	m sync.Map // attrKey → *measureOpts
	n atomic.Int32
}

// measureOpts holds one attribute set as ready-made variadic arguments:
// passing a single option to Add or Record would allocate its slice.
type measureOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// option returns the options for k, building them from attrs on a miss.
func (c *attrCache) option(k attrKey, attrs func() []attribute.KeyValue) *measureOpts {
	if o, ok := c.m.Load(k); ok {
		return o.(*measureOpts)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(attrs()...))
	o := &measureOpts{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	if c.n.Load() < maxCachedAttrs {
		if _, loaded := c.m.LoadOrStore(k, o); !loaded {
			c.n.Add(1)
		}
	}
	return o
}

// instrumentName turns a Prometheus name of names.go into the instrument name
// the OTel Prometheus exporter translates back to exactly that name: it
// appends _total to monotonic counters itself, and skips a unit suffix the
// name already carries.
func instrumentName(prom string) string { return strings.TrimSuffix(prom, "_total") }

// NewMetrics creates the instruments on mp. region is the gateway's region,
// added as the `region` label to every series.
func NewMetrics(mp metric.MeterProvider, region string) (*Metrics, error) {
	m := &Metrics{region: attribute.String(LabelRegion, region)}
	meter := mp.Meter(ScopeName)
	var errs []error
	counter := func(prom, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(instrumentName(prom), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.breakerTransitions = counter(MetricBreakerTransitions, "Breaker state changes per channel.")
	m.breakerSkips = counter(MetricBreakerSkips, "Hops skipped because the channel's breaker was open.")
	m.hops = counter(MetricHops, "Attempts on one channel, by outcome.")
	m.requests = counter(MetricRequests, "Client requests, by outcome.")
	m.gateDecisions = counter(MetricGateDecisions, "Stream gate decisions.")
	m.headerTimeouts = counter(MetricHeaderTimeouts, "Hops that hit the header timeout.")
	m.chainExceeded = counter(MetricChainExceeded, "Requests that exceeded the chain deadline.")
	m.degraded = counter(MetricDegradedReplies, "Degraded replies served.")
	m.malformed = counter(MetricMalformedFrames, "Malformed SSE frames dropped.")
	m.interrupted = counter(MetricStreamInterrupted, "Committed streams ended with an in-band error.")
	m.ewDemotions = counter(MetricEarlyWarningDemotions, "Early-warning demotions per channel, by the evidence.")
	m.ewReordered = counter(MetricEarlyWarningReordered, "Requests whose chain put this demoted channel last.")
	m.ewPremiumRequests = counter(MetricEarlyWarningPremiumRequests, "Requests a pricier channel served because this channel was demoted.")

	var err error
	m.cost, err = meter.Float64Counter(instrumentName(MetricCost),
		metric.WithUnit("{USD}"), metric.WithDescription("Price times usage, in US dollars."))
	errs = append(errs, err)
	m.ewPremium, err = meter.Float64Counter(instrumentName(MetricEarlyWarningPremium), metric.WithUnit("{USD}"),
		metric.WithDescription("What requests served by a pricier channel because this channel was demoted cost above its price, in US dollars."))
	errs = append(errs, err)
	m.hopDuration, err = meter.Float64Histogram(MetricHopDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of one hop, until its body ended."),
		metric.WithExplicitBucketBoundaries(hopDurationBuckets...))
	errs = append(errs, err)
	m.gateWait, err = meter.Float64Histogram(MetricGateWait, metric.WithUnit("s"),
		metric.WithDescription("Time the stream gate held frames before deciding."),
		metric.WithExplicitBucketBoundaries(gateWaitBuckets...))
	errs = append(errs, err)
	m.genAIDuration, err = meter.Float64Histogram(MetricGenAIDuration, metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."),
		metric.WithExplicitBucketBoundaries(genAIDurationBuckets...))
	errs = append(errs, err)
	m.genAITokens, err = meter.Int64Histogram(MetricGenAITokenUsage, metric.WithUnit("{token}"),
		metric.WithDescription("Measures number of input and output tokens used."),
		metric.WithExplicitBucketBoundaries(genAITokenBuckets...))
	errs = append(errs, err)

	errs = append(errs, m.wallet.init(meter, m.region))
	errs = append(errs, m.ratelimit.init(meter, m.region))

	// One callback for the life of the Metrics; ObserveBreakers swaps the
	// function it calls, so a config reload never has two callbacks racing.
	m.breakerState, err = meter.Int64ObservableGauge(MetricBreakerState,
		metric.WithDescription("Breaker state per channel: 0 closed, 1 half-open, 2 open."),
		metric.WithInt64Callback(m.observeBreakers))
	errs = append(errs, err)
	errs = append(errs, m.initOverload(meter))
	errs = append(errs, m.realtime.init(meter))
	m.ewDemoted, err = meter.Int64ObservableGauge(MetricEarlyWarningDemoted,
		metric.WithDescription("1 while early warning has demoted the channel (moved to the end of its chains), else 0."),
		metric.WithInt64Callback(m.observeWarnings))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// ObserveBreakers sets the function feeding hopgate_breaker_state. Calling it
// again replaces the previous function (config reload).
func (m *Metrics) ObserveBreakers(f func() []BreakerObservation) {
	if m == nil {
		return
	}
	if f == nil {
		m.breakers.Store(nil)
		return
	}
	m.breakers.Store(&f)
}

func (m *Metrics) observeBreakers(_ context.Context, o metric.Int64Observer) error {
	f := m.breakers.Load()
	if f == nil {
		return nil
	}
	for _, b := range (*f)() {
		o.Observe(int64(b.State), metric.WithAttributes(m.region,
			attribute.String(LabelChannel, b.Channel), attribute.String(LabelChannelRegion, b.ChannelRegion)))
	}
	return nil
}

// ObserveEarlyWarning sets the function feeding
// hopgate_early_warning_demoted; calling it again replaces it.
func (m *Metrics) ObserveEarlyWarning(f func() []EarlyWarningObservation) {
	if m == nil {
		return
	}
	if f == nil {
		m.warnings.Store(nil)
		return
	}
	m.warnings.Store(&f)
}

func (m *Metrics) observeWarnings(_ context.Context, o metric.Int64Observer) error {
	f := m.warnings.Load()
	if f == nil {
		return nil
	}
	for _, w := range (*f)() {
		v := int64(0)
		if w.Demoted {
			v = 1
		}
		o.Observe(v, metric.WithAttributes(m.region,
			attribute.String(LabelChannel, w.Channel), attribute.String(LabelChannelRegion, w.ChannelRegion)))
	}
	return nil
}

// EarlyWarningDemotion counts a channel demoted by early warning; reason
// names the evidence.
func (m *Metrics) EarlyWarningDemotion(ctx context.Context, channel, channelRegion, reason string) {
	if m == nil {
		return
	}
	m.ewDemotions.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelChannel, channel), attribute.String(LabelChannelRegion, channelRegion),
		attribute.String(LabelReason, reason)))
}

// EarlyWarningReordered counts a request of model whose chain put the
// demoted channel last.
func (m *Metrics) EarlyWarningReordered(ctx context.Context, channel, model string) {
	if m == nil {
		return
	}
	m.ewReordered.Add(ctx, 1, m.channelModel(channel, model).add...)
}

// EarlyWarningPremium counts a request of model that a pricier channel
// served because channel was demoted, and adds usd, what it cost above
// channel's price (0 when the upstream reported no usage).
func (m *Metrics) EarlyWarningPremium(ctx context.Context, channel, model string, usd float64) {
	if m == nil {
		return
	}
	o := m.channelModel(channel, model)
	m.ewPremiumRequests.Add(ctx, 1, o.add...)
	if usd > 0 {
		m.ewPremium.Add(ctx, usd, o.add...)
	}
}

// BreakerTransition counts one breaker state change (from/to are state names).
func (m *Metrics) BreakerTransition(ctx context.Context, channel, channelRegion, from, to string) {
	if m == nil {
		return
	}
	m.breakerTransitions.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelChannel, channel), attribute.String(LabelChannelRegion, channelRegion),
		attribute.String(LabelFrom, from), attribute.String(LabelTo, to)))
}

// BreakerSkip counts a chain entry skipped because its breaker was open.
func (m *Metrics) BreakerSkip(ctx context.Context, channel, channelRegion, model string) {
	if m == nil {
		return
	}
	m.breakerSkips.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelChannel, channel), attribute.String(LabelChannelRegion, channelRegion),
		attribute.String(LabelModel, model)))
}

// Hop counts one hop and records its duration. The duration carries the
// trace of ctx as an exemplar when that trace is kept by sampling.
func (m *Metrics) Hop(ctx context.Context, channel, channelRegion, model, operation, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	if outcome != HopOK {
		// A failed hop makes its trace interesting: the tail sampler keeps
		// it, so its exemplar link will resolve.
		ctx = context.WithValue(ctx, interestingKey{}, true)
	}
	attrs := m.attrs.option(attrKey{kindHop, channel, channelRegion, model, operation, outcome}, func() []attribute.KeyValue {
		return []attribute.KeyValue{m.region,
			attribute.String(LabelChannel, channel), attribute.String(LabelChannelRegion, channelRegion),
			attribute.String(LabelModel, model), attribute.String(LabelOperation, operation),
			attribute.String(LabelOutcome, outcome)}
	})
	m.hops.Add(ctx, 1, attrs.add...)
	m.hopDuration.Record(ctx, d.Seconds(), attrs.rec...)
	m.rates.observe(channel, outcome)
}

// Request counts one client request by its final outcome.
func (m *Metrics) Request(ctx context.Context, model, operation, outcome string) {
	if m == nil {
		return
	}
	m.requests.Add(ctx, 1, m.attrs.option(attrKey{kindRequest, model, operation, outcome, "", ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{m.region,
			attribute.String(LabelModel, model), attribute.String(LabelOperation, operation),
			attribute.String(LabelOutcome, outcome)}
	}).add...)
}

// GateDecision counts one stream gate decision and how long it held frames.
func (m *Metrics) GateDecision(ctx context.Context, channel, model, decision string, wait time.Duration) {
	if m == nil {
		return
	}
	attrs := m.attrs.option(attrKey{kindGate, channel, model, decision, "", ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{m.region,
			attribute.String(LabelChannel, channel), attribute.String(LabelModel, model),
			attribute.String(LabelDecision, decision)}
	})
	m.gateDecisions.Add(ctx, 1, attrs.add...)
	m.gateWait.Record(ctx, wait.Seconds(), attrs.rec...)
}

// HeaderTimeout counts a hop that hit the header timeout.
func (m *Metrics) HeaderTimeout(ctx context.Context, channel, model string) {
	if m == nil {
		return
	}
	m.headerTimeouts.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelChannel, channel), attribute.String(LabelModel, model)))
}

// ChainExceeded counts a request that hit its chain deadline.
func (m *Metrics) ChainExceeded(ctx context.Context, model string) {
	if m == nil {
		return
	}
	m.chainExceeded.Add(ctx, 1, metric.WithAttributes(m.region, attribute.String(LabelModel, model)))
}

// Degraded counts a degraded reply; reason is "chain_deadline" or "exhausted".
func (m *Metrics) Degraded(ctx context.Context, model, reason string) {
	if m == nil {
		return
	}
	m.degraded.Add(ctx, 1, metric.WithAttributes(m.region,
		attribute.String(LabelModel, model), attribute.String(LabelReason, reason)))
}

// Cost adds usd (price × usage) to the channel's spend. Negative values are
// ignored: a counter cannot go down.
func (m *Metrics) Cost(ctx context.Context, channel, model string, usd float64) {
	if m == nil || !(usd > 0) {
		return
	}
	m.cost.Add(ctx, usd, m.channelModel(channel, model).add...)
}

// MalformedFrame counts an SSE frame dropped because it could not be parsed.
func (m *Metrics) MalformedFrame(ctx context.Context, channel, model string) {
	if m == nil {
		return
	}
	m.malformed.Add(ctx, 1, m.channelModel(channel, model).add...)
}

// StreamInterrupted counts a committed stream ended with an in-band error.
func (m *Metrics) StreamInterrupted(ctx context.Context, channel, model string) {
	if m == nil {
		return
	}
	m.interrupted.Add(ctx, 1, m.channelModel(channel, model).add...)
}

// channelModel is the option of the (region, channel, model) label tuple
// shared by several counters.
func (m *Metrics) channelModel(channel, model string) *measureOpts {
	return m.attrs.option(attrKey{kindChannelModel, channel, model, "", "", ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{m.region, attribute.String(LabelChannel, channel), attribute.String(LabelModel, model)}
	})
}

// GenAI records the GenAI semconv client metrics for one operation.
// responseModel and errorType are omitted when empty; token counts <= 0 are
// not recorded (the provider did not report usage).
func (m *Metrics) GenAI(ctx context.Context, operation, provider, requestModel, responseModel, errorType string, d time.Duration, inTok, outTok int64) {
	if m == nil {
		return
	}
	base := func(extra ...attribute.KeyValue) []attribute.KeyValue {
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, m.region,
			attribute.String(AttrGenAIOperation, operation),
			attribute.String(AttrGenAIProvider, provider),
			attribute.String(AttrGenAIRequestModel, requestModel))
		if responseModel != "" {
			attrs = append(attrs, attribute.String(AttrGenAIResponseMdl, responseModel))
		}
		return append(attrs, extra...)
	}
	m.genAIDuration.Record(ctx, d.Seconds(), m.attrs.option(
		attrKey{kindGenAIDuration, operation, provider, requestModel, responseModel, errorType},
		func() []attribute.KeyValue {
			if errorType != "" {
				return base(attribute.String(AttrErrorType, errorType))
			}
			return base()
		}).rec...)
	// Token usage has no error.type in the semconv.
	if inTok > 0 {
		m.genAITokens.Record(ctx, inTok, m.attrs.option(
			attrKey{kindGenAITokens, operation, provider, requestModel, responseModel, GenAITokenInput},
			func() []attribute.KeyValue { return base(attribute.String(AttrGenAITokenType, GenAITokenInput)) }).rec...)
	}
	if outTok > 0 {
		m.genAITokens.Record(ctx, outTok, m.attrs.option(
			attrKey{kindGenAITokens, operation, provider, requestModel, responseModel, GenAITokenOutput},
			func() []attribute.KeyValue { return base(attribute.String(AttrGenAITokenType, GenAITokenOutput)) }).rec...)
	}
}

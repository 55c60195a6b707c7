package telemetry

// Span names and attribute keys of DESIGN.md §5. They are a contract: the
// dashboards, the docs, the Jaeger end-to-end test and on-call's saved
// searches depend on them. Rename only with a migration note in CHANGELOG.md.

// Instrumentation scope of every hopgate span and metric.
const ScopeName = "github.com/hopgate/hopgate"

// Span names. Hop span names append the upstream model ("chat gpt-4o-mini"),
// dispatch and breaker-skip span names append the model and channel.
const (
	SpanServer         = "POST /v1/chat/completions"
	SpanDispatch       = "dispatch"      // "dispatch {model}"
	SpanBreakerSkip    = "breaker skip"  // "breaker skip {channel}"
	SpanAwaitHeaders   = "await headers" // child of the hop span
	SpanStreamGate     = "stream gate"   // child of the hop span
	SpanDegradedReply  = "degraded reply"
	SpanRetryBackoff   = "retry backoff" // waiting before a same-channel retry
	SpanContinuation   = "mid-stream resume"
	OperationChat      = "chat"
	OperationTextCompl = "text_completion"
	OperationEmbedding = "embeddings"
	OperationGenerate  = "generate_content"
)

// hopgate attribute keys.
const (
	AttrFailoverPath     = "hopgate.failover.path"
	AttrOutcome          = "hopgate.outcome"
	AttrModel            = "hopgate.model"
	AttrServedModel      = "hopgate.served_model"
	AttrChain            = "hopgate.chain"
	AttrHops             = "hopgate.hops"
	AttrChannel          = "hopgate.channel"
	AttrChannelRegion    = "hopgate.channel.region"
	AttrBreakerState     = "hopgate.breaker.state"
	AttrBreakerReopenAt  = "hopgate.breaker.reopen_at"
	AttrBreakerForced    = "hopgate.breaker.forced_trial"
	AttrHopIndex         = "hopgate.hop.index"
	AttrHopOutcome       = "hopgate.hop.outcome"
	AttrHopRetry         = "hopgate.hop.retry"
	AttrGateDecision     = "hopgate.gate.decision"
	AttrGateFramesHeld   = "hopgate.gate.frames_held"
	AttrGateBytesHeld    = "hopgate.gate.bytes_held"
	AttrDegradedReason   = "hopgate.degraded.reason"
	AttrDegradedMode     = "hopgate.degraded.mode"
	AttrErrorCode        = "hopgate.error.code" // the code of a hopgate-produced error reply
	AttrTenant           = "hopgate.tenant"
	AttrStreamDropped    = "hopgate.stream.malformed_frames_dropped"
	AttrStreamEnd        = "hopgate.stream.end"
	AttrPrompt           = "gen_ai.prompt"     // only with record_content
	AttrCompletion       = "gen_ai.completion" // only with record_content
	AttrErrorType        = "error.type"
	AttrRetryAfter       = "hopgate.retry_after_seconds"
	AttrContinuationMode = "hopgate.resume.mode"
	AttrResumeDelivered  = "hopgate.resume.delivered_bytes"
	AttrBackoffMillis    = "hopgate.backoff_ms"
	// AttrTranslationDropped lists the request fields a cross-family hop
	// could not express (JSON paths), AttrBetaDropped the anthropic-beta
	// values a cloud's allow-list refused (DESIGN.md §8).
	AttrTranslationDropped = "hopgate.translate.dropped"
	AttrBetaDropped        = "hopgate.anthropic_beta.dropped"
	// AttrTimedOut marks a root span whose request met a timer that did not
	// fail it (the stream gate committing on timeout): such a trace is kept
	// like a failover, since "slow" is what on-call looks for.
	AttrTimedOut = "hopgate.timed_out"
	// Early warning (DESIGN.md §12): the attributes of the EventEarlyWarning
	// event on the dispatch span of a request whose chain put a demoted
	// channel last (hopgate.channel names it).
	AttrEarlyWarningReason = "hopgate.early_warning.reason" // header_latency | first_token | error_rate
	AttrEarlyWarningDetail = "hopgate.early_warning.detail" // the evidence in words
	AttrEarlyWarningUntil  = "hopgate.early_warning.until"  // RFC 3339: when the demotion ends
)

// EventEarlyWarning is the span event recorded on the dispatch span for
// each demoted channel a request's chain moved to its end; StepDemoted is
// that channel's step on the failover path ("a:demoted -> b:ok").
const (
	EventEarlyWarning = "early warning demotion"
	StepDemoted       = "demoted"
)

// OpenTelemetry GenAI semantic convention keys.
const (
	AttrGenAIOperation    = "gen_ai.operation.name"
	AttrGenAIProvider     = "gen_ai.provider.name"
	AttrGenAIRequestModel = "gen_ai.request.model"
	AttrGenAIResponseMdl  = "gen_ai.response.model"
	AttrGenAIInputTokens  = "gen_ai.usage.input_tokens"
	AttrGenAIOutputTokens = "gen_ai.usage.output_tokens"
)

// Gate decisions (values of hopgate.gate.decision and the decision label).
const (
	GateCommitContent   = "commit_content"
	GateDiscardError    = "discard_error"
	GateDiscardEOF      = "discard_eof"
	GateCommitTimeout   = "commit_timeout"
	GateFailoverTimeout = "failover_timeout"
)

// error.type values produced by hopgate.
const (
	ErrTypeHeaderTimeout = "header_timeout"
	ErrTypeStreamError   = "stream_error"
	ErrTypeStreamEOF     = "stream_eof"
	ErrTypeGateTimeout   = "gate_timeout"
	ErrTypeIdleTimeout   = "stream_idle_timeout"
	ErrTypeBodyError     = "body_error"
	ErrTypeConnect       = "connect_error"
	ErrTypeCanceled      = "canceled"
	// ErrTypeStreamInterrupted: a committed stream died (cut, stall, late
	// error frame); the client got an in-band upstream_stream_interrupted.
	ErrTypeStreamInterrupted = "stream_interrupted"
)

// Metric names (Prometheus form; DESIGN.md §5).
const (
	MetricBreakerState       = "hopgate_breaker_state"
	MetricBreakerTransitions = "hopgate_breaker_transitions_total"
	MetricBreakerSkips       = "hopgate_breaker_skips_total"
	MetricHops               = "hopgate_hops_total"
	MetricHopDuration        = "hopgate_hop_duration_seconds"
	MetricRequests           = "hopgate_requests_total"
	MetricGateDecisions      = "hopgate_stream_gate_decisions_total"
	MetricGateWait           = "hopgate_stream_gate_wait_seconds"
	MetricHeaderTimeouts     = "hopgate_header_timeouts_total"
	MetricChainExceeded      = "hopgate_chain_exceeded_max_time_total"
	MetricDegradedReplies    = "hopgate_degraded_replies_total"
	MetricCost               = "hopgate_cost_total"
	MetricMalformedFrames    = "hopgate_stream_malformed_frames_total"
	MetricStreamInterrupted  = "hopgate_stream_interruptions_total"
	// Overload protection (DESIGN.md §13).
	MetricBudgetUsed  = "hopgate_buffer_budget_used_bytes"
	MetricBudgetLimit = "hopgate_buffer_budget_limit_bytes"
	MetricInFlight    = "hopgate_requests_in_flight"
	MetricStreamsOpen = "hopgate_streams_open"
	MetricShed        = "hopgate_shed_requests_total"
	LabelShedReason   = "reason"
)

// Wallet metrics (DESIGN §9). Money is in currency units of the billing
// currency (the counters are floats: for dashboards, never for accounts,
// which the ledger keeps exactly). The tenant is never a label: it stays
// the span attribute hopgate.tenant.
const (
	// MetricRevenue: what tenants were charged, list price × usage, per
	// requested model.
	MetricRevenue = "hopgate_revenue_total"
	// MetricFailoverPremium: what a channel cost above the model's
	// cheapest entry for the same usage, per serving channel and model.
	MetricFailoverPremium = "hopgate_failover_premium_total"
	// MetricWalletCharges: settled requests per model, by usage basis
	// (reported | estimated).
	MetricWalletCharges = "hopgate_wallet_charges_total"
	// MetricWalletDenied: requests refused with 402 insufficient_balance.
	MetricWalletDenied = "hopgate_wallet_denied_total"
	// MetricWalletStoreDown: charged requests while the store was down,
	// by what they got (refused: 503 | credit: fail-open).
	MetricWalletStoreDown = "hopgate_wallet_store_unavailable_total"
	// MetricWalletErrors: store calls that failed, by operation (hold,
	// settle, release, expire, keys).
	MetricWalletErrors = "hopgate_wallet_store_errors_total"
	// MetricWalletPendingSettles: charges waiting for the store to come
	// back (retried until they land).
	MetricWalletPendingSettles = "hopgate_wallet_pending_settles"
	// MetricWalletExpiredHolds: holds released by expiry (a replica died).
	MetricWalletExpiredHolds = "hopgate_wallet_expired_holds_total"
)

// Wallet label names and values.
const (
	LabelStoreOp      = "op"
	LabelUsageBasis   = "usage"
	LabelResult       = "result"
	UsageReported     = "reported"
	UsageEstimated    = "estimated"
	StoreDownRefused  = "refused"
	StoreDownCredit   = "credit"
	EventWalletDenied = "hopgate.wallet.denied"
	EventWalletHeld   = "hopgate.wallet.held"
	AttrWalletHold    = "hopgate.wallet.hold_micros"
	AttrWalletReason  = "hopgate.wallet.reason"

	// Early warning (DESIGN.md §12). Demoted is 1 while a channel is
	// demoted (its breaker state is unchanged: a fourth, breaker-like
	// state the boards draw blue); demotions count entries into that state
	// by reason; reordered counts requests whose chain put the demoted
	// channel last; the premium counts requests a pricier channel served
	// because of a demotion, and what they cost above the demoted
	// channel's price (USD).
	MetricEarlyWarningDemoted         = "hopgate_early_warning_demoted"
	MetricEarlyWarningDemotions       = "hopgate_early_warning_demotions_total"
	MetricEarlyWarningReordered       = "hopgate_early_warning_reordered_total"
	MetricEarlyWarningPremiumRequests = "hopgate_early_warning_premium_requests_total"
	MetricEarlyWarningPremium         = "hopgate_early_warning_premium_total"
)

// Metric label names.
const (
	LabelRegion        = "region"
	LabelChannel       = "channel"
	LabelChannelRegion = "channel_region"
	LabelModel         = "model"
	LabelOutcome       = "outcome"
	LabelDecision      = "decision"
	LabelFrom          = "from"
	LabelTo            = "to"
	LabelOperation     = "operation"
)

// GenAI client metrics (OpenTelemetry GenAI semantic conventions). The
// instrument names are the OTel ones; the Prom* forms are what /metrics shows.
const (
	MetricGenAIDuration       = "gen_ai.client.operation.duration"
	MetricGenAITokenUsage     = "gen_ai.client.token.usage"
	PromGenAIDuration         = "gen_ai_client_operation_duration_seconds"
	PromGenAITokenUsage       = "gen_ai_client_token_usage"
	AttrGenAITokenType        = "gen_ai.token.type"
	GenAITokenInput           = "input"
	GenAITokenOutput          = "output"
	LabelGenAIOperation       = "gen_ai_operation_name"
	LabelGenAIProvider        = "gen_ai_provider_name"
	LabelGenAIRequestModel    = "gen_ai_request_model"
	LabelGenAIResponseModel   = "gen_ai_response_model"
	LabelGenAITokenType       = "gen_ai_token_type"
	LabelErrorType            = "error_type"
	LabelReason               = "reason"
	LabelTraceDecision        = "decision"
	MetricTraceDecisions      = "hopgate_trace_decisions_total" // tail-sampling outcomes, see sampling.go
	TraceDecisionInteresting  = "kept_interesting"
	TraceDecisionHealthyKept  = "kept_healthy"
	TraceDecisionHealthyDrop  = "dropped_healthy"
	TraceDecisionOverflow     = "overflow_forwarded" // counted per span forwarded early
	TraceDecisionStaleFlushed = "stale_flushed"      // counted per trace flushed without a local root
	TraceDecisionQueueFull    = "dropped_queue_full" // counted per span the export queue had no room for (exportqueue.go)
)

// Request outcomes (values of hopgate.outcome and the requests outcome label).
const (
	OutcomeOK          = "ok"
	OutcomeFailoverOK  = "failover_ok"
	OutcomeFinalError  = "final_error"
	OutcomeExhausted   = "exhausted"
	OutcomeDeadline    = "deadline"
	OutcomeDegraded    = "degraded"
	OutcomeCanceled    = "canceled"
	OutcomeInterrupted = "interrupted"
	OutcomeBadRequest  = "bad_request"
	OutcomeShed        = "shed" // refused by overload protection (DESIGN §13); nothing was tried
)

// Hop outcomes (values of hopgate.hop.outcome and the hops outcome label).
const (
	HopOK            = "ok"
	HopRetryable     = "retryable"
	HopFinal         = "final"
	HopCanceled      = "canceled"
	HopHeaderTimeout = "header_timeout"
)

// PathArrow separates the steps of hopgate.failover.path.
const PathArrow = " -> "

package telemetry

import "testing"

// The names below are written out, not taken from the constants: the
// span-tree and metric tests build their expectations from the constants,
// so only this table fails when a name of DESIGN.md §5 (or one that a shipped artifact
// matches on: the compose collector's tail sampling, the dashboards, the
// docs) is renamed. A rename needs a CHANGELOG migration note and this table.
func TestContractNames(t *testing.T) {
	for got, want := range map[string]string{
		// DESIGN.md §5 span tree.
		SpanServer:        "POST /v1/chat/completions",
		SpanDispatch:      "dispatch",
		SpanBreakerSkip:   "breaker skip",
		SpanAwaitHeaders:  "await headers",
		SpanStreamGate:    "stream gate",
		SpanDegradedReply: "degraded reply",
		OperationChat:     "chat",
		// DESIGN.md §5 attributes.
		AttrFailoverPath:    "hopgate.failover.path",
		AttrOutcome:         "hopgate.outcome",
		AttrModel:           "hopgate.model",
		AttrChain:           "hopgate.chain",
		AttrHops:            "hopgate.hops",
		AttrChannel:         "hopgate.channel",
		AttrChannelRegion:   "hopgate.channel.region",
		AttrBreakerState:    "hopgate.breaker.state",
		AttrBreakerReopenAt: "hopgate.breaker.reopen_at",
		AttrHopIndex:        "hopgate.hop.index",
		AttrHopOutcome:      "hopgate.hop.outcome",
		AttrGateDecision:    "hopgate.gate.decision",
		AttrTenant:          "hopgate.tenant",
		AttrErrorType:       "error.type",
		// GenAI semantic conventions named in DESIGN.md §5.
		AttrGenAIOperation:    "gen_ai.operation.name",
		AttrGenAIProvider:     "gen_ai.provider.name",
		AttrGenAIRequestModel: "gen_ai.request.model",
		AttrGenAIResponseMdl:  "gen_ai.response.model",
		AttrGenAIInputTokens:  "gen_ai.usage.input_tokens",
		AttrGenAIOutputTokens: "gen_ai.usage.output_tokens",
		// Gate decisions of DESIGN.md §5.
		GateCommitContent:   "commit_content",
		GateDiscardError:    "discard_error",
		GateDiscardEOF:      "discard_eof",
		GateCommitTimeout:   "commit_timeout",
		GateFailoverTimeout: "failover_timeout",
		// DESIGN.md §5 metrics (Prometheus names) and their labels; the
		// dashboards query them.
		MetricBreakerState:       "hopgate_breaker_state",
		MetricBreakerTransitions: "hopgate_breaker_transitions_total",
		MetricBreakerSkips:       "hopgate_breaker_skips_total",
		MetricHops:               "hopgate_hops_total",
		MetricHopDuration:        "hopgate_hop_duration_seconds",
		MetricRequests:           "hopgate_requests_total",
		MetricGateDecisions:      "hopgate_stream_gate_decisions_total",
		MetricGateWait:           "hopgate_stream_gate_wait_seconds",
		MetricHeaderTimeouts:     "hopgate_header_timeouts_total",
		MetricChainExceeded:      "hopgate_chain_exceeded_max_time_total",
		MetricDegradedReplies:    "hopgate_degraded_replies_total",
		MetricCost:               "hopgate_cost_total",
		LabelRegion:              "region",
		LabelChannel:             "channel",
		LabelChannelRegion:       "channel_region",
		LabelModel:               "model",
		LabelOutcome:             "outcome",
		LabelDecision:            "decision",
		LabelFrom:                "from",
		LabelTo:                  "to",
		LabelOperation:           "operation",
		// Early warning (DESIGN.md §12): the issue names the reason
		// attribute; the dashboards query the metrics.
		AttrEarlyWarningReason:            "hopgate.early_warning.reason",
		EventEarlyWarning:                 "early warning demotion",
		StepDemoted:                       "demoted",
		MetricEarlyWarningDemoted:         "hopgate_early_warning_demoted",
		MetricEarlyWarningDemotions:       "hopgate_early_warning_demotions_total",
		MetricEarlyWarningPremiumRequests: "hopgate_early_warning_premium_requests_total",
		MetricEarlyWarningPremium:         "hopgate_early_warning_premium_total",
		// Matched by deploy/compose/otel-collector.yaml and the dashboards.
		AttrTimedOut:         "hopgate.timed_out",
		OutcomeOK:            "ok",
		PathArrow:            " -> ",
		ErrTypeHeaderTimeout: "header_timeout",
	} {
		if got != want {
			t.Errorf("contract name %q changed to %q", want, got)
		}
	}
}

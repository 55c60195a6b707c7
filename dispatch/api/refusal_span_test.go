package api_test

import (
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/telemetry"
)

// Why: a refusal at the front door has no dispatch span, so its SERVER
// span is all on-call sees of it; it must say the outcome and the error
// code the client got (recorded through telemetry.Spans like a walked
// request's outcome), with no upstream call.
func TestRefusalSpanAttributes(t *testing.T) {
	gw, up := front(t)
	for _, tc := range []struct {
		name, path, key, body string
		status                int
		outcome, code         string
	}{
		// No model: the client's own error.
		{"missing model", "/v1/chat/completions", clientKey, `{"messages":[]}`, 400, telemetry.OutcomeBadRequest, "invalid_request"},
		// An unknown model is refused before any walk.
		{"unknown model", "/v1/chat/completions", clientKey, `{"model":"nope","messages":[]}`, 404, telemetry.OutcomeBadRequest, "model_not_found"},
		// A bad key.
		{"bad key", "/v1/chat/completions", "wrong", `{"model":"m","messages":[]}`, 401, telemetry.OutcomeBadRequest, "invalid_api_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.Log())
			resp, m := do(t, gw, "POST", tc.path, tc.key, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %v", resp.StatusCode, tc.status, m)
			}
			if len(up.Log()) != before {
				t.Fatal("a refusal reached the upstream")
			}
			got := map[string]string{}
			for _, s := range gw.Trace(resp.Header.Get("X-Request-Id")) {
				if s.SpanKind != trace.SpanKindServer {
					continue
				}
				for _, a := range s.Attributes {
					got[string(a.Key)] = a.Value.Emit()
				}
			}
			if got[telemetry.AttrOutcome] != tc.outcome || got[telemetry.AttrErrorCode] != tc.code {
				t.Errorf("SERVER span %s=%q %s=%q, want %q %q", telemetry.AttrOutcome, got[telemetry.AttrOutcome],
					telemetry.AttrErrorCode, got[telemetry.AttrErrorCode], tc.outcome, tc.code)
			}
		})
	}
}

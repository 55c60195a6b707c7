package dispatch

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/telemetry"
)

// TestDeadlineBetweenLastHopAndReply: the chain deadline may fire after the
// last hop failed and before the exhaustion reply is written. The reply is
// then the deadline's (503 engine_overloaded, outcome "deadline"), never
// "exhausted": the exhaustion reply claims the responder by
// compare-and-swap like every answer. (It once checked the state, then set
// it, and a deadline in between was labelled "exhausted".) The window is
// reproduced exactly: the deadline's claim without its cancellation.
func TestDeadlineBetweenLastHopAndReply(t *testing.T) {
	cfg, err := config.Parse([]byte(`
auth: {mode: none}
channels:
  - {id: a, base_url: "http://127.0.0.1:1/v1"}
models:
  - name: m
    policy: {chain_deadline: 5s}
    chain: [{channel: a, upstream_model: m}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	e := New(Options{Clock: clockwork.NewFakeClock()})
	for _, deadlineFirst := range []bool{true, false} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		c := e.begin(w, r, &Request{Config: cfg, Model: cfg.Model("m"), Operation: config.OpChat, Path: "/chat/completions"})
		last := classify.NewStatus(http.StatusServiceUnavailable)
		c.steps = append(c.steps, stepOf("a", last.Label()))
		c.statuses = append(c.statuses, last.Status)
		if deadlineFirst && !c.rw.expire() {
			t.Fatal("the deadline could not claim an open reply")
		}
		c.finish(last)
		c.release()
		res := c.end(r)
		want, code, status := OutcomeExhausted, "all_channels_failed", http.StatusServiceUnavailable
		if deadlineFirst {
			want, code = OutcomeDeadline, "engine_overloaded"
		}
		if res.Outcome != want || w.Code != status || !strings.Contains(w.Body.String(), code) {
			t.Fatalf("deadline first=%v: outcome %q status %d body %s; want %q %d %s", deadlineFirst, res.Outcome, w.Code, w.Body, want, status, code)
		}
		if !deadlineFirst && c.rw.expire() {
			t.Fatal("the deadline claimed a reply that was already written")
		}
	}
}

func stepOf(channel, result string) telemetry.Step {
	return telemetry.Step{Channel: channel, Result: result}
}

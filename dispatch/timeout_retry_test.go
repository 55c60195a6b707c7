package dispatch_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// TestNoSameChannelRetryAfterTimeout: a channel that cost the caller a
// timeout is never retried, whatever its retries: the next entry answers
// (DESIGN.md §2 L2). Before, only the header timeout skipped the retry: a
// first token slower than the gate (on_timeout: failover) or a stalled
// body was tried twice on the same channel, which burned the chain
// deadline while the next channel was healthy.
func TestNoSameChannelRetryAfterTimeout(t *testing.T) {
	policy := "    policy: {header_timeout: 8s, stream_gate: {timeout: 8s, on_timeout: failover}, stream_idle_timeout: 8s}\n"
	cases := []struct {
		name, fault string
		stream      bool
		path        string
	}{
		{"first token slower than the gate", "m|slow-first-token=20s", true, "a:gate_timeout -> b:ok"},
		{"non-stream body slower than the idle timeout", "m|slow-first-token=20s", false, "a:stream_idle_timeout -> b:ok"},
		{"non-stream body that stalls halfway", "m|stall=20s", false, "a:stream_idle_timeout -> b:ok"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(twoChannels(tc.fault, "m", policy),
				"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 1}", 1)
			h := gwtest.New(t, cfg, "a", "b")
			done := h.Async(chat(tc.stream))
			h.WaitAttempts("a", tc.fault, 1)
			h.WaitInGate(1, 1) // headers arrived; the gate (stream) or idle (body) timer is armed
			h.Clock.Advance(8 * time.Second)
			r := testkit.Recv(t, done, "the reply")
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != tc.path {
				t.Fatalf("status %d path %q, want %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), tc.path, r.Body)
			}
			if got := h.Attempts("a", tc.fault); got != 1 {
				t.Fatalf("a saw %d attempts: a channel is never retried after a timeout", got)
			}
			if got := h.Attempts("b", "m"); got != 1 {
				t.Fatalf("b saw %d attempts, want 1", got)
			}
		})
	}
}

// roleThenStall answers a stream with its role chunk, then nothing until
// the client leaves: a provider that stalls before its first token.
type roleThenStall struct{ n atomic.Int32 }

func (s *roleThenStall) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.n.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n"))
	http.NewResponseController(w).Flush()
	<-r.Context().Done()
}

// TestNoSameChannelRetryAfterStallBeforeCommit: a stream that sent its
// role chunk and stalled (nothing decisive) fails over at the gate timeout
// and is not retried on the same channel.
func TestNoSameChannelRetryAfterStallBeforeCommit(t *testing.T) {
	stall := &roleThenStall{}
	cfg := strings.Replace(twoChannels("m", "m", "    policy: {stream_gate: {timeout: 8s, on_timeout: failover}}\n"),
		"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 1}", 1)
	h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": stall}}, cfg, "b")
	done := h.Async(chat(true))
	h.WaitInGate(1, 1)
	h.Clock.Advance(8 * time.Second)
	r := testkit.Recv(t, done, "the reply")
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:gate_timeout -> b:ok" {
		t.Fatalf("status %d path %q: %.300s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	if got := stall.n.Load(); got != 1 {
		t.Fatalf("a saw %d attempts: a channel is never retried after a timeout", got)
	}
}

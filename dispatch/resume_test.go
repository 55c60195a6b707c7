package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// resumeChannels: a cut cheap channel "a" and a fallback "b" whose channel
// entry carries the prefill capability given.
func resumeChannels(upA, upB string, prefill bool, policy string) string {
	cfg := twoChannels(upA, upB, policy)
	if prefill {
		cfg = strings.Replace(cfg, "region: r-b}", "region: r-b, prefill: true}", 1)
	}
	return cfg
}

// failoverPath is the full path of the last request from the failover log:
// steps after commit (the cut, resume hops) are not in the response header,
// which was sent at commit.
func failoverPath(t *testing.T, h *gwtest.Gateway) (path, outcome string) {
	t.Helper()
	list := h.Tel.Failovers.List()
	if len(list) == 0 {
		t.Fatal("failover log is empty")
	}
	return list[0].Path, list[0].Outcome // newest first
}

// lastMessageRole is the role of the last message the provider received.
func lastMessage(t *testing.T, body []byte) (role, content string) {
	t.Helper()
	var req struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("request body %s: %v", body, err)
	}
	m := req.Messages[len(req.Messages)-1]
	return m.Role, m.Content
}

// TestMidStreamCut is DESIGN.md "After commit": a stream cut after 40 of 60
// tokens is never presented as complete; with mid_stream: resume it is
// completed exactly once by prefill or by a verified replay, and a
// continuation that fails never masks the original cut. Every case commits
// on a (header: path "a:ok", attempts 1); the full path is in the failover log.
func TestMidStreamCut(t *testing.T) {
	const cut = "m|tokens=60|cut=40"
	resume := "    policy: {mid_stream: resume}\n"
	for _, tc := range []struct {
		name     string // why the case exists
		upA, upB string
		prefill  bool
		policy   string
		oneChan  bool
		complete bool   // the client gets Answer(60) and [DONE]
		path     string // failover log path
		bAsked   int    // requests b received
	}{
		// No fallback at all: 40 tokens, then the in-band error.
		{name: "no_fallback", upA: cut, oneChan: true, path: "a:cut"},
		// mid_stream: error (default) never resumes, even with a fallback.
		{name: "policy_error", upA: cut, upB: "m|tokens=60", prefill: true, path: "a:cut"},
		// Prefill: b continues the delivered text as an assistant prefix.
		{name: "prefill", upA: cut, upB: "m|tokens=60", prefill: true, policy: resume, complete: true,
			path: "a:cut -> b:prefill_ok", bAsked: 1},
		// b refuses prefill (400): replay on b instead; the 400 never shows.
		{name: "prefill_rejected_replay", upA: cut, upB: "m|tokens=60|reject-prefill", prefill: true, policy: resume,
			complete: true, path: "a:cut -> b:prefill_400 -> b:replay_ok", bAsked: 2},
		// No prefill capability: replay, forward only what follows the prefix.
		{name: "replay", upA: cut, upB: "m|tokens=60", policy: resume, complete: true,
			path: "a:cut -> b:replay_ok", bAsked: 1},
		// The replay ends before reaching the delivered text: divergence,
		// the original cut is reported, nothing of b reaches the client.
		{name: "replay_diverges", upA: cut, upB: "m|tokens=30", policy: resume,
			path: "a:cut -> b:replay_diverged", bAsked: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h *gwtest.Gateway
			if tc.oneChan {
				h = gwtest.New(t, `
region: test-1
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - name: m
    chain: [{channel: a, upstream_model: "`+tc.upA+`"}]
`+resume, "a")
			} else {
				h = gwtest.New(t, resumeChannels(tc.upA, tc.upB, tc.prefill, tc.policy), "a", "b")
			}
			r := h.Post(chat(true))
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" || r.Header.Get("X-Hopgate-Attempts") != "1" {
				t.Fatalf("%d path %q attempts %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"))
			}
			if tc.complete {
				if got := gwtest.StreamText(r.Body); got != upstream.Answer(60) {
					t.Fatalf("resumed answer %q, want the 60 tokens exactly once", got)
				}
				if strings.Count(r.Body, "data: [DONE]") != 1 || !strings.HasSuffix(r.Body, "data: [DONE]\n\n") {
					t.Fatalf("want exactly one final [DONE]: %q", r.Body)
				}
				if strings.Contains(r.Body, `"error"`) || strings.Contains(r.Body, "does not support") {
					t.Fatalf("a continuation error leaked: %q", r.Body)
				}
				if strings.Count(r.Body, `"finish_reason":"stop"`) != 1 {
					t.Fatalf("want one finish chunk: %q", r.Body)
				}
			} else {
				assertInterrupted(t, r.Body, upstream.Answer(40), "channel a: upstream stream ended before the answer was complete")
			}
			path, outcome := failoverPath(t, h)
			if path != tc.path {
				t.Fatalf("failover path %q, want %q", path, tc.path)
			}
			wantOutcome := "interrupted"
			if tc.complete {
				wantOutcome = "failover_ok"
			}
			if outcome != wantOutcome {
				t.Fatalf("outcome %q, want %q", outcome, wantOutcome)
			}
			if !tc.oneChan {
				if got := len(h.Ups["b"].Log()); got != tc.bAsked {
					t.Fatalf("b received %d requests, want %d", got, tc.bAsked)
				}
			}
			if tc.name == "prefill" {
				role, content := lastMessage(t, h.LastSent("b"))
				if role != "assistant" || content != upstream.Answer(40) {
					t.Fatalf("prefill request ends with %s %q, want the delivered text as assistant prefix", role, content)
				}
			}
		})
	}
}

// TestNoResumeAfterToolCalls: tool-call deltas cannot be verified against a
// replay, so a stream cut after them ends with the error even under
// mid_stream: resume, and the fallback is never asked.
func TestNoResumeAfterToolCalls(t *testing.T) {
	h := gwtest.New(t, resumeChannels("m|tool-calls|cut=2", "m|tool-calls", true, "    policy: {mid_stream: resume}\n"), "a", "b")
	r := h.Post(chat(true))
	if r.Status != 200 || !strings.Contains(r.Body, `"tool_calls"`) {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if strings.Contains(r.Body, "[DONE]") || !strings.Contains(r.Body, `"code":"upstream_stream_interrupted"`) {
		t.Fatalf("want the interruption and no [DONE]: %q", r.Body)
	}
	if got := len(h.Ups["b"].Log()); got != 0 {
		t.Fatalf("b received %d requests: no resume after tool calls", got)
	}
	if path, _ := failoverPath(t, h); path != "a:cut" {
		t.Fatalf("path %q", path)
	}
}

// TestStallResumedByReplay: a stream interrupted by stream_idle_timeout under
// mid_stream: resume is completed by a verified replay (a stall is a cut like
// any other). Failover log path "a:cut -> b:replay_ok".
func TestStallResumedByReplay(t *testing.T) {
	h := gwtest.New(t, resumeChannels("m|tokens=10|stall=60s", "m|tokens=10", false,
		"    policy: {mid_stream: resume, stream_idle_timeout: 5s}\n"), "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := h.Open(ctx, chat(true))
	defer resp.Body.Close()
	var seen strings.Builder
	// a delivers 5 tokens and stalls; once the client has them the gate
	// timer is stopped and only the idle timer is left.
	gwtest.ReadTokens(t, sse.NewReader(io.TeeReader(resp.Body, &seen), 0), 5)
	h.WaitTimers(1)
	h.Clock.Advance(5 * time.Second)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := seen.String() + string(rest)
	if got := gwtest.StreamText(body); got != upstream.Answer(10) {
		t.Fatalf("answer %q", got)
	}
	if !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("no [DONE]: %q", body)
	}
	if path, outcome := failoverPath(t, h); path != "a:cut -> b:replay_ok" || outcome != "failover_ok" {
		t.Fatalf("path %q outcome %q", path, outcome)
	}
}

// Why: a continuation the next channel refuses (a final status to the
// replay, the last mode) is recorded as excluded and frees the channel's
// half-open trial slot; the walk must not then take the slot again for a
// mode that does not follow. It did, and a healthy channel was skipped
// ("b:open") by every request until the breaker's trial timeout.
func TestResumeRejectedReplayAnswersTheTrial(t *testing.T) {
	h := gwtest.New(t, resumeChannels("m|tokens=60|cut=40", "m|404", false, "    policy: {mid_stream: resume}\n"), "a", "b")
	br := h.Engine.Breakers().Get("b", dispatch.BreakerPolicy(h.Config.Channel("b").Breaker))
	br.RetryAfter(time.Second)
	h.Clock.Advance(time.Second) // b half-open: one trial
	h.Post(chat(true))
	if p, _ := failoverPath(t, h); p != "a:cut -> b:replay_404" {
		t.Fatalf("path %q, want the replay refused", p)
	}
	if s := br.Snapshot(); s.TrialInFlight {
		t.Errorf("no request in flight, yet b's trial slot is taken: %+v", s)
	}
	h.Post(chat(true))
	if p, _ := failoverPath(t, h); p == "a:cut -> b:open" {
		t.Errorf("b is skipped after its refused replay answered the trial: path %q", p)
	}
}

package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// TestHeaderTimeoutPerModel: L4 fires after exactly the model's
// header_timeout when the model overrides it, else after the global one, for
// streaming and non-streaming requests alike. Path
// "a:header_timeout -> b:ok", attempts 2.
func TestHeaderTimeoutPerModel(t *testing.T) {
	cfg := `
region: test-1
auth: {mode: none}
policy: {header_timeout: 30s}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
  - {id: b, base_url: "{{url:b}}", api_key_env: CHANNEL_KEY}
models:
  - name: fast
    chain:
      - {channel: a, upstream_model: "m|no-headers", price: {input: 1, output: 1}}
      - {channel: b, upstream_model: m, price: {input: 2, output: 2}}
    policy: {header_timeout: 5s}
  - name: plain
    chain:
      - {channel: a, upstream_model: "m|no-headers", price: {input: 1, output: 1}}
      - {channel: b, upstream_model: m, price: {input: 2, output: 2}}
`
	for _, tc := range []struct {
		model string
		want  time.Duration
	}{{"fast", 5 * time.Second}, {"plain", 30 * time.Second}} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.model, stream), func(t *testing.T) {
				h := gwtest.New(t, cfg, "a", "b")
				done := h.Async(strings.Replace(chat(stream), `"model":"m"`, `"model":"`+tc.model+`"`, 1))
				h.WaitAttempts("a", "m|no-headers", 1)
				h.WaitTimers(1)
				h.Clock.Advance(tc.want - time.Millisecond)
				h.WaitTimers(1) // still waiting for headers
				if h.Attempts("b", "m") != 0 {
					t.Fatal("failed over before the header timeout")
				}
				h.Clock.Advance(time.Millisecond)
				r := testkit.Recv(t, done, "the reply")
				h.WantArmed(tc.want, 30*time.Second) // (the default gate timeout of b's stream)
				if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:header_timeout -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "2" {
					t.Fatalf("%d path %q attempts %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"))
				}
				if !strings.Contains(r.Body, "tok1 ") {
					t.Fatalf("answer: %s", r.Body)
				}
			})
		}
	}
}

// hangingChain: both channels accept and never answer; header_timeout (60s)
// is above chain_deadline (10s), so only the deadline can end the request.
func hangingChain(extra string) string {
	return twoChannels("m|no-headers", "m|no-headers", "    policy: {header_timeout: 60s, chain_deadline: 10s"+extra+"}\n")
}

// TestChainDeadlineDegradedReply: a chain of hanging channels ends exactly at
// chain_deadline with the degraded reply: 503 engine_overloaded with
// Retry-After by default, a 200 message marked X-Hopgate-Degraded: 1 when
// opted in, for streams and non-streams. Path "a:deadline" (the hop in
// flight when time ran out), attempts 1; b is never asked.
func TestChainDeadlineDegradedReply(t *testing.T) {
	for _, mode := range []string{"error", "message"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", mode, stream), func(t *testing.T) {
				h := gwtest.New(t, hangingChain(", degraded_reply: {mode: "+mode+"}"), "a", "b")
				done := h.Async(chat(stream))
				h.WaitAttempts("a", "m|no-headers", 1)
				h.WaitTimers(2) // chain deadline + header timeout
				h.Clock.Advance(10*time.Second - time.Millisecond)
				h.WaitTimers(2)
				h.Clock.Advance(time.Millisecond)
				r := testkit.Recv(t, done, "the reply")
				if p, a := r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"); p != "a:deadline" || a != "1" {
					t.Fatalf("path %q attempts %s", p, a)
				}
				if h.Attempts("b", "m|no-headers") != 0 {
					t.Fatal("b asked after the deadline")
				}
				// The deadline is the caller's budget, not a verdict on a:
				// counting it would open healthy channels in an incident.
				for _, br := range h.Engine.Breakers().All() {
					if s := br.Snapshot(); s.Failures != 0 {
						t.Fatalf("breaker %s counted %d failures for a hop the chain deadline ended", s.Name, s.Failures)
					}
				}
				if mode == "error" {
					if r.Status != 503 || !strings.Contains(r.Body, `"code":"engine_overloaded"`) || r.Header.Get("Retry-After") != "10" {
						t.Fatalf("%d Retry-After %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
					}
					if r.Header.Get("X-Hopgate-Degraded") != "" {
						t.Fatal("an error reply must not be marked degraded")
					}
					return
				}
				if r.Status != 200 || r.Header.Get("X-Hopgate-Degraded") != "1" {
					t.Fatalf("%d degraded=%q: %s", r.Status, r.Header.Get("X-Hopgate-Degraded"), r.Body)
				}
				if stream {
					if got := gwtest.StreamText(r.Body); got != config.DefaultDegradedMessage || !strings.HasSuffix(r.Body, "data: [DONE]\n\n") {
						t.Fatalf("degraded stream %q", r.Body)
					}
				} else if !strings.Contains(r.Body, config.DefaultDegradedMessage) || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("degraded body %q", r.Body)
				}
			})
		}
	}
}

// TestCommittedStreamOutlivesDeadline: once the first decisive frame is
// committed, the chain deadline no longer applies: a stream that pauses past
// it completes. Path "a:ok", attempts 1.
func TestCommittedStreamOutlivesDeadline(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|stall=60s", "m", "    policy: {chain_deadline: 10s}\n"), "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := h.Open(ctx, chat(true))
	defer resp.Body.Close()
	if resp.Header.Get("X-Hopgate-Path") != "a:ok" || resp.Header.Get("X-Hopgate-Attempts") != "1" {
		t.Fatalf("path %q", resp.Header.Get("X-Hopgate-Path"))
	}
	var seen strings.Builder
	rd := sse.NewReader(io.TeeReader(resp.Body, &seen), 0)
	gwtest.ReadTokens(t, rd, upstream.DefaultTokens/2)
	h.WaitTimers(1) // only the deadline timer is left
	h.Clock.Advance(20 * time.Second)
	h.WaitUpstreamTimers(1)
	h.UpClock.Advance(60 * time.Second)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := seen.String() + string(rest)
	if got := gwtest.StreamText(body); got != upstream.Answer(upstream.DefaultTokens) || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("the deadline cut a committed stream: %q", body)
	}
}

// held answers with a role chunk, then waits for release before its content:
// the test decides when the decisive frame reaches the gate.
type held struct{ release, wrote chan struct{} }

func (u *held) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"))
	_ = http.NewResponseController(w).Flush()
	select {
	case <-u.release:
	case <-r.Context().Done():
		return
	}
	for _, f := range [][]byte{chunkFrame("Hello", false), chunkFrame("", true), []byte("data: [DONE]\n\n")} {
		if _, err := w.Write(f); err != nil {
			return
		}
	}
	_ = http.NewResponseController(w).Flush()
	close(u.wrote)
}

// TestDeadlineCommitRace: the decisive frame and the chain deadline arrive at
// the same moment; exactly one wins and the client gets one consistent reply:
// the full answer (path "a:ok") or the deadline reply (503 engine_overloaded,
// path "a:deadline") — never an exhaustion error, an empty 200 or a mix.
func TestDeadlineCommitRace(t *testing.T) {
	won := map[int]int{}
	for i := 0; i < 25; i++ {
		up := &held{release: make(chan struct{}), wrote: make(chan struct{})}
		h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": up}},
			twoChannels("m", "m", "    policy: {chain_deadline: 10s}\n"), "b")
		done := h.Async(chat(true))
		h.WaitInGate(1, 2) // gate timer + chain deadline
		// Rotate who starts first: the commit (the gate has decided before
		// the deadline fires), the deadline (it fires while the upstream
		// still holds its frame), and both at once, where either may win
		// (and the lost-commit path in between is exercised). The first two
		// make sure both winners are seen whatever the scheduler does.
		var r gwtest.Reply
		switch i % 3 {
		case 0:
			gated := h.SpanEnds(telemetry.SpanStreamGate)
			close(up.release)
			<-gated
			h.Clock.Advance(10 * time.Second)
			r = testkit.Recv(t, done, "the reply")
		case 1:
			h.Clock.Advance(10 * time.Second)
			r = testkit.Recv(t, done, "the reply")
			close(up.release)
		default:
			go close(up.release)
			runtime.Gosched()
			h.Clock.Advance(10 * time.Second)
			r = testkit.Recv(t, done, "the reply")
		}
		won[r.Status]++
		if want := [...]int{200, 503, r.Status}[i%3]; r.Status != want {
			t.Fatalf("iteration %d: status %d, want %d: %s", i, r.Status, want, r.Body)
		}
		switch r.Status {
		case 200:
			if r.Header.Get("X-Hopgate-Path") != "a:ok" || gwtest.StreamText(r.Body) != "Hello" || !strings.HasSuffix(r.Body, "data: [DONE]\n\n") {
				t.Fatalf("commit won but the reply is %q %q", r.Header.Get("X-Hopgate-Path"), r.Body)
			}
		case 503:
			if r.Header.Get("X-Hopgate-Path") != "a:deadline" || !strings.Contains(r.Body, `"code":"engine_overloaded"`) {
				t.Fatalf("deadline won but the reply is %q %q", r.Header.Get("X-Hopgate-Path"), r.Body)
			}
		default:
			t.Fatalf("iteration %d: status %d path %q: %s", i, r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		if h.Attempts("b", "m") != 0 {
			t.Fatal("b asked: the walk went on after the deadline")
		}
	}
	// Alternating the order must have exercised both winners, or the race
	// this test exists for was never run.
	if won[200] == 0 || won[503] == 0 {
		t.Fatalf("only one side of the race was exercised: %v", won)
	}
}

// TestChatProfile: `profile: chat` on a model is the interactive preset,
// checked through the engine: header_timeout 8s, gate 8s with failover,
// stream_idle_timeout 30s, chain_deadline 12s with the degraded reply.
func TestChatProfile(t *testing.T) {
	profile := "    policy: {profile: chat}\n"
	t.Run("resolved", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m", "m", profile), "a", "b")
		p := h.Config.Model("m").Policy
		if p.HeaderTimeout != 8*time.Second || p.GateTimeout != 8*time.Second || p.GateOnTimeout != config.OnTimeoutFailover ||
			p.StreamIdleTimeout != 30*time.Second || p.ChainDeadline != 12*time.Second {
			t.Fatalf("chat profile resolved to %+v", p)
		}
	})
	// No headers: the next channel after exactly 8s.
	// Path "a:header_timeout -> b:ok", attempts 2.
	t.Run("header_timeout_8s", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|no-headers", "m", profile), "a", "b")
		done := h.Async(chat(true))
		h.WaitAttempts("a", "m|no-headers", 1)
		h.WaitTimers(2) // deadline + header timeout
		h.Clock.Advance(8*time.Second - time.Millisecond)
		h.WaitTimers(2)
		if h.Attempts("b", "m") != 0 {
			t.Fatal("failed over before 8s")
		}
		h.Clock.Advance(time.Millisecond)
		r := testkit.Recv(t, done, "the reply")
		h.WantArmed(8*time.Second, 12*time.Second, 30*time.Second) // header (a, b), gate (b); deadline; b's idle
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:header_timeout -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "2" {
			t.Fatalf("%d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
		}
	})
	// Nothing decisive within 8s: fail over (per-hop SLO), not commit.
	// Path "a:gate_timeout -> b:ok", attempts 2.
	t.Run("gate_8s_failover", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|slow-first-token=60s", "m", profile), "a", "b")
		done := h.Async(chat(true))
		h.WaitInGate(1, 2) // gate + deadline
		h.Clock.Advance(8*time.Second - time.Millisecond)
		h.WaitTimers(2)
		h.Clock.Advance(time.Millisecond)
		r := testkit.Recv(t, done, "the reply")
		h.WantArmed(8*time.Second, 12*time.Second, 30*time.Second) // header, gate; deadline; b's idle
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:gate_timeout -> b:ok" {
			t.Fatalf("%d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
		}
		if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
			t.Fatalf("answer %q", got)
		}
	})
	// A committed stream silent for 30s is interrupted in-band (the 12s
	// deadline passes meanwhile without effect). Header path "a:ok".
	t.Run("idle_30s", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|stall=60s", "m", profile), "a", "b")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp := h.Open(ctx, chat(true))
		defer resp.Body.Close()
		var seen strings.Builder
		rd := sse.NewReader(io.TeeReader(resp.Body, &seen), 0)
		gwtest.ReadTokens(t, rd, upstream.DefaultTokens/2)
		h.WaitTimers(2) // idle + deadline
		h.Clock.Advance(30*time.Second - time.Millisecond)
		h.WaitTimers(1) // the deadline fired (no effect); the idle timer waits on
		h.Clock.Advance(time.Millisecond)
		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		assertInterrupted(t, seen.String()+string(rest), upstream.Answer(upstream.DefaultTokens/2), "stalled for 30s")
		h.WantArmed(30*time.Second, 8*time.Second, 12*time.Second) // idle; header and gate; deadline
	})
	// Both channels hang: a costs 8s (header timeout), b gets the 4s left;
	// at 12s the degraded reply. Path "a:header_timeout -> b:deadline".
	t.Run("deadline_12s", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|no-headers", "m|no-headers", profile), "a", "b")
		done := h.Async(chat(false))
		h.WaitAttempts("a", "m|no-headers", 1)
		h.WaitTimers(2)
		h.Clock.Advance(8 * time.Second)
		h.WaitAttempts("b", "m|no-headers", 1)
		h.WaitTimers(2) // deadline + b's header timeout
		h.Clock.Advance(4 * time.Second)
		r := testkit.Recv(t, done, "the reply")
		if r.Status != 503 || !strings.Contains(r.Body, `"code":"engine_overloaded"`) || r.Header.Get("Retry-After") != "12" {
			t.Fatalf("%d %q: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
		}
		if p := r.Header.Get("X-Hopgate-Path"); p != "a:header_timeout -> b:deadline" || r.Header.Get("X-Hopgate-Attempts") != "2" {
			t.Fatalf("path %q attempts %s", p, r.Header.Get("X-Hopgate-Attempts"))
		}
	})
}

// TestNonStreamBodyStall: a non-streaming 200 whose body stalls past
// stream_idle_timeout (mid-body, or before the first byte) is a failed hop
// and the next channel answers. Path "a:stream_idle_timeout -> b:ok".
func TestNonStreamBodyStall(t *testing.T) {
	for _, fault := range []string{"m|stall=60s", "m|slow-first-token=60s"} {
		t.Run(fault, func(t *testing.T) {
			h := gwtest.New(t, twoChannels(fault, "m", "    policy: {stream_idle_timeout: 5s}\n"), "a", "b")
			done := h.Async(chat(false))
			h.WaitSpanEnd("await headers", 1)
			h.WaitUpstreamTimers(1)
			h.WaitTimers(1) // the body idle timer
			h.Clock.Advance(5 * time.Second)
			r := testkit.Recv(t, done, "the reply")
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:stream_idle_timeout -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "2" {
				t.Fatalf("%d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			if !strings.Contains(r.Body, upstream.Answer(upstream.DefaultTokens)) {
				t.Fatalf("answer: %s", r.Body)
			}
		})
	}
}

// TestStreamRequestErrorBodies: a stream request answered by a 200 JSON error
// object or by a non-JSON body fails over like its non-streaming twin.
// Paths "a:error_body -> b:ok" and "a:bad_json -> b:ok".
func TestStreamRequestErrorBodies(t *testing.T) {
	for fault, label := range map[string]string{"m|error-body": "error_body", "m|bad-json": "bad_json"} {
		t.Run(fault, func(t *testing.T) {
			h := gwtest.New(t, twoChannels(fault, "m", ""), "a", "b")
			r := h.Post(chat(true))
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:"+label+" -> b:ok" {
				t.Fatalf("%d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
				t.Fatalf("answer %q", got)
			}
		})
	}
}

// TestChainDeadlineEndsBackoff: the chain deadline also ends the wait
// before a same-channel retry: the degraded reply comes at the deadline,
// not when the Retry-After the walk was waiting out is over, and the
// channel is not asked again.
func TestChainDeadlineEndsBackoff(t *testing.T) {
	cfg := strings.Replace(twoChannels("m|429:ra=4-once", "m", "    policy: {chain_deadline: 2s}\n"),
		"api_key_env: CHANNEL_KEY, region: r-a}", "api_key_env: CHANNEL_KEY, region: r-a, retries: 1}", 1)
	h := gwtest.New(t, cfg, "a", "b")
	done := h.Async(chat(false))
	h.WaitSpanEnd(telemetry.SpanAwaitHeaders, 1) // a's 429 arrived
	h.WaitTimers(2)                              // the chain deadline and the backoff
	h.Clock.Advance(2 * time.Second)
	r := testkit.Recv(t, done, "the reply")
	if r.Status != 503 || !strings.Contains(r.Body, `"code":"engine_overloaded"`) {
		t.Fatalf("%d: %s", r.Status, r.Body)
	}
	if p, a := r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"); p != "a:429" || a != "1" {
		t.Fatalf("path %q attempts %s", p, a)
	}
	if n := h.Attempts("a", "m|429:ra=4-once") + h.Attempts("b", "m"); n != 1 {
		t.Fatalf("%d upstream attempts, want a's one", n)
	}
}

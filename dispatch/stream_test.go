package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// reference is what a fresh fake provider named name answers to body, read
// directly (no gateway): the bytes a channel "alone" produces.
func reference(t *testing.T, name string, body []byte) []byte {
	t.Helper()
	u := upstream.New(upstream.Options{Clock: clockwork.NewFakeClockAt(gwtest.Epoch), Name: name, APIKey: channelKey})
	srv := httptest.NewServer(u)
	defer func() { u.Close(); srv.Close() }()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+channelKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frames splits an SSE body into its raw frames.
func frames(t *testing.T, body []byte) [][]byte {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(body), 0)
	var out [][]byte
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
		out = append(out, bytes.Clone(f.Raw))
	}
}

// without drops the frames containing any of the markers.
func without(fs [][]byte, markers ...string) []byte {
	var b []byte
next:
	for _, f := range fs {
		for _, m := range markers {
			if bytes.Contains(f, []byte(m)) {
				continue next
			}
		}
		b = append(b, f...)
	}
	return b
}

// usageChunk marks the include_usage chunk of the fake (choices [] + usage).
const usageChunk = `"choices":[],"usage":{`

// TestStreamErrorAfter200IsInvisible: a 200 whose stream carries an error
// before any content fails over before commit; the client stream is byte for
// byte what the next channel alone produces, with the usage chunk only for a
// client that asked for it (the gateway asks upstreams for usage itself).
// Path "a:stream_error -> b:ok", attempts 2.
func TestStreamErrorAfter200IsInvisible(t *testing.T) {
	for _, fault := range []string{"stream-error", "stream-error-event"} {
		for _, askUsage := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/include_usage=%v", fault, askUsage), func(t *testing.T) {
				h := gwtest.New(t, twoChannels("m|"+fault, "m", ""), "a", "b")
				body := chat(true)
				if askUsage {
					body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
				}
				r := h.Post(body)
				if r.Status != 200 {
					t.Fatalf("status %d: %s", r.Status, r.Body)
				}
				if p, a := r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"); p != "a:stream_error -> b:ok" || a != "2" {
					t.Fatalf("path %q attempts %s", p, a)
				}
				// The gateway always asks b for usage; replaying exactly what it
				// sent on a fresh "b" gives b's own bytes.
				sent := h.LastSent("b")
				if !bytes.Contains(sent, []byte(`"include_usage":true`)) {
					t.Fatalf("gateway did not ask the upstream for usage: %s", sent)
				}
				ref := frames(t, reference(t, "b", sent))
				want := without(ref)
				if !askUsage {
					want = without(ref, usageChunk)
				}
				if r.Body != string(want) {
					t.Fatalf("client stream differs from channel b alone\n got: %q\nwant: %q", r.Body, want)
				}
				if got := strings.Contains(r.Body, usageChunk); got != askUsage {
					t.Fatalf("usage chunk present=%v, client asked=%v", got, askUsage)
				}
				if strings.Contains(r.Body, "error") {
					t.Fatalf("the discarded error leaked: %s", r.Body)
				}
			})
		}
	}
}

// lockstep is an upstream that sends one frame, then waits until the test
// has read that frame from the gateway before sending the next: a gateway
// that buffered would deadlock it (the test then fails on its timeout).
type lockstep struct {
	frames [][]byte
	read   chan struct{} // the test read the last frame sent
}

func (l *lockstep) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for i, f := range l.frames {
		if _, err := w.Write(f); err != nil || rc.Flush() != nil {
			return
		}
		if i == len(l.frames)-1 {
			return
		}
		select {
		case <-l.read:
		case <-r.Context().Done():
			return
		}
	}
}

func chunkFrame(content string, finish bool) []byte {
	fin := "null"
	delta := fmt.Sprintf(`{"content":%q}`, content)
	if finish {
		fin, delta = `"stop"`, `{}`
	}
	return []byte(`data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + fin + `}]}` + "\n\n")
}

// TestStreamFlushesPerFrame: after commit every frame reaches the client on
// its own, unbuffered and byte-identical (the upstream sends the next frame
// only once the client has read the previous one). Path "a:ok", attempts 1.
func TestStreamFlushesPerFrame(t *testing.T) {
	up := &lockstep{read: make(chan struct{}), frames: [][]byte{
		chunkFrame("Hello", false), chunkFrame(" wor", false), chunkFrame("ld", false),
		chunkFrame("", true), []byte("data: [DONE]\n\n"),
	}}
	h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": up}},
		twoChannels("m", "m", ""), "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := h.Open(ctx, chat(true))
	defer resp.Body.Close()
	if p := resp.Header.Get("X-Hopgate-Path"); p != "a:ok" || resp.Header.Get("X-Hopgate-Attempts") != "1" {
		t.Fatalf("path %q attempts %s", p, resp.Header.Get("X-Hopgate-Attempts"))
	}
	rd := sse.NewReader(resp.Body, 0)
	for i, want := range up.frames {
		f, err := rd.Next()
		if err != nil {
			t.Fatalf("frame %d: %v (the gateway held it back)", i, err)
		}
		if !bytes.Equal(f.Raw, want) {
			t.Fatalf("frame %d = %q, want %q", i, f.Raw, want)
		}
		if i == len(up.frames)-1 {
			break
		}
		select {
		case up.read <- struct{}{}:
		case <-ctx.Done():
			t.Fatal("upstream gone")
		}
	}
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after [DONE]: %v", err)
	}
}

// TestGateTimeout: a model slow to its first token (keep-alives only) is
// committed after stream_gate.timeout with on_timeout commit (headers reach
// the client, path "a:ok", attempts 1, then the whole answer once the tokens
// come), and failed over with on_timeout failover (path
// "a:gate_timeout -> b:ok", attempts 2, nothing of a's stream delivered).
func TestGateTimeout(t *testing.T) {
	t.Run("commit", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|slow-first-token=60s", "m",
			"    policy: {stream_gate: {timeout: 5s, on_timeout: commit}}\n"), "a", "b")
		headers := make(chan *http.Response, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/v1/chat/completions", strings.NewReader(chat(true)))
			resp, err := h.Client.Do(req)
			if err != nil {
				close(headers)
				return
			}
			headers <- resp
		}()
		h.WaitInGate(1, 1)
		h.Clock.Advance(5*time.Second - time.Millisecond)
		select {
		case r := <-headers:
			if r != nil {
				r.Body.Close()
			}
			t.Fatal("committed before the gate timeout")
		default:
		}
		h.Clock.Advance(time.Millisecond)
		resp := <-headers
		if resp == nil {
			t.Fatal("request failed")
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Hopgate-Path") != "a:ok" || resp.Header.Get("X-Hopgate-Attempts") != "1" {
			t.Fatalf("commit on timeout: %d path %q attempts %s", resp.StatusCode, resp.Header.Get("X-Hopgate-Path"), resp.Header.Get("X-Hopgate-Attempts"))
		}
		// The provider's first token arrives on its own clock.
		if err := h.UpClock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		h.UpClock.Advance(60 * time.Second)
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got := gwtest.StreamText(string(b)); got != upstream.Answer(upstream.DefaultTokens) {
			t.Fatalf("answer %q", got)
		}
		if !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
			t.Fatalf("no [DONE]: %q", b)
		}
		if h.Attempts("b", "m") != 0 {
			t.Fatal("b was asked although a was committed")
		}
		h.WantArmed(5*time.Second, 240*time.Second) // the gate; the default header timeout
	})
	t.Run("failover", func(t *testing.T) {
		h := gwtest.New(t, twoChannels("m|slow-first-token=60s", "m",
			"    policy: {stream_gate: {timeout: 5s, on_timeout: failover}}\n"), "a", "b")
		done := h.Async(chat(true))
		h.WaitInGate(1, 1)
		h.Clock.Advance(5 * time.Second)
		r := testkit.Recv(t, done, "the reply")
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:gate_timeout -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "2" {
			t.Fatalf("failover on timeout: %d path %q attempts %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"))
		}
		ref := frames(t, reference(t, "b", h.LastSent("b")))
		if want := string(without(ref, usageChunk)); r.Body != want {
			t.Fatalf("client stream is not b's alone\n got: %q\nwant: %q", r.Body, want)
		}
		h.WantArmed(5*time.Second, 240*time.Second) // the gate (a, b); the default header timeout
	})
}

// TestStallAfterCommit: a stream that stalls past stream_idle_timeout after
// commit ends with the in-band interruption frame and no [DONE]; the
// delivered tokens stay exactly what was delivered. Path header "a:ok",
// attempts 1.
func TestStallAfterCommit(t *testing.T) {
	h := gwtest.New(t, twoChannels("m|stall=60s", "m", "    policy: {stream_idle_timeout: 5s}\n"), "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := h.Open(ctx, chat(true))
	defer resp.Body.Close()
	if resp.Header.Get("X-Hopgate-Path") != "a:ok" || resp.Header.Get("X-Hopgate-Attempts") != "1" {
		t.Fatalf("path %q attempts %s", resp.Header.Get("X-Hopgate-Path"), resp.Header.Get("X-Hopgate-Attempts"))
	}
	var buf bytes.Buffer
	rd := sse.NewReader(io.TeeReader(resp.Body, &buf), 0)
	gwtest.ReadTokens(t, rd, upstream.DefaultTokens/2) // the fake stalls at half
	h.WaitTimers(1)                                    // the idle timer alone: the gate timer was stopped at commit
	h.Clock.Advance(5 * time.Second)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := buf.String() + string(rest)
	assertInterrupted(t, body, upstream.Answer(upstream.DefaultTokens/2), "stalled for 5s")
	h.WantArmed(5*time.Second, 240*time.Second, 30*time.Second) // idle; default header and gate timeouts
}

// assertInterrupted checks a stream that was cut: exactly the delivered text,
// then one in-band upstream_stream_interrupted error frame, and no [DONE].
func assertInterrupted(t *testing.T, body, text, why string) {
	t.Helper()
	if got := gwtest.StreamText(body); got != text {
		t.Fatalf("delivered text %q, want %q", got, text)
	}
	if strings.Contains(body, "[DONE]") {
		t.Fatalf("a truncated answer presented as complete: %q", body)
	}
	data := gwtest.SSEData(body)
	last := data[len(data)-1]
	if !strings.Contains(last, `"code":"upstream_stream_interrupted"`) || !strings.Contains(last, why) {
		t.Fatalf("last frame %q: want the interruption error naming %q", last, why)
	}
	if n := strings.Count(body, `"error"`); n != 1 {
		t.Fatalf("%d error frames, want 1", n)
	}
}

// TestStreamRepairs: frames that cannot reach the client are dropped and a
// clean end without [DONE] is finished by the gateway, without any wait: the
// client stream is the provider's own minus the malformed frame (and the
// usage chunk it did not ask for), plus [DONE] when missing. Path "a:ok".
func TestStreamRepairs(t *testing.T) {
	for _, tc := range []struct {
		fault, drop, add string
	}{
		{"malformed", "{not json", ""},
		{"no-done", "", "data: [DONE]\n\n"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			h := gwtest.New(t, twoChannels("m|"+tc.fault, "m", ""), "a", "b")
			r := h.Post(chat(true))
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
				t.Fatalf("%d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			ref := frames(t, reference(t, "a", h.LastSent("a")))
			drop := []string{usageChunk}
			if tc.drop != "" {
				drop = append(drop, tc.drop)
			}
			want := string(without(ref, drop...)) + tc.add
			if r.Body != want {
				t.Fatalf("client stream\n got: %q\nwant: %q", r.Body, want)
			}
			if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
				t.Fatalf("answer %q", got)
			}
		})
	}
}

// TestEndlessFrameIsBounded: a data line that never ends is cut at MaxFrame
// and classified as a failed hop before commit; the next channel answers.
// Path "a:frame_too_large -> b:ok", attempts 2.
func TestEndlessFrameIsBounded(t *testing.T) {
	h := gwtest.NewWith(t, gwtest.Options{MaxFrame: 64 << 10}, twoChannels("m|endless-frame", "m", ""), "a", "b")
	r := h.Post(chat(true))
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:frame_too_large -> b:ok" || r.Header.Get("X-Hopgate-Attempts") != "2" {
		t.Fatalf("%d path %q attempts %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"))
	}
	if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
		t.Fatalf("answer %q", got)
	}
}

// rawStream answers a stream with body, then ends it.
type rawStream string

func (b rawStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, string(b))
}

// TestGateDiscardsUndecidedStreams: a stream that ends, or says [DONE],
// before anything decisive is an empty answer, and one that would make
// the gate hold more than its bound (1 MiB of keep-alives) a broken one:
// both fail the hop before commit (DESIGN.md §2 L3), nothing held
// reaches the client, and the next channel answers.
func TestGateDiscardsUndecidedStreams(t *testing.T) {
	role := `data: {"id":"x","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}` + "\n\n"
	for _, tc := range []struct {
		name  string
		a     http.Handler
		label string
	}{
		// [DONE] decides even while the upstream keeps the body open.
		{"role chunk then [DONE]", newParked([]byte(role), []byte("data: [DONE]\n\n")), "stream_eof"},
		{"role chunk then the end", rawStream(role), "stream_eof"},
		{"more keep-alives than the gate holds", keepAlives{n: dispatch.DefaultMaxHeld/len(": keep-alive\n\n") + 1}, "gate_overflow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": tc.a}}, twoChannels("m", "m", ""), "b")
			r := h.Post(chat(true))
			if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:"+tc.label+" -> b:ok" {
				t.Fatalf("%d path %q, want a:%s -> b:ok", r.Status, r.Header.Get("X-Hopgate-Path"), tc.label)
			}
			if got := gwtest.StreamText(r.Body); got != upstream.Answer(upstream.DefaultTokens) {
				t.Fatalf("answer %q", got)
			}
			if n := strings.Count(r.Body, `"role":"assistant"`); n != 1 || strings.Contains(r.Body, "keep-alive") {
				t.Fatalf("held frames of a reached the client: %q", r.Body)
			}
		})
	}
}

// parked is an upstream that streams a prefix, then holds the request open
// until its context ends, and reports that end: the proof that the gateway
// cancelled the upstream request.
type parked struct {
	prefix   [][]byte
	sent     chan struct{} // closed once the prefix was flushed
	canceled chan struct{} // closed when the request context ended
}

func newParked(prefix ...[]byte) *parked {
	return &parked{prefix: prefix, sent: make(chan struct{}), canceled: make(chan struct{})}
}

func (p *parked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, f := range p.prefix {
		_, _ = w.Write(f)
	}
	_ = rc.Flush()
	close(p.sent)
	<-r.Context().Done()
	close(p.canceled)
}

// TestClientDisconnectCancelsUpstream: a client leaving while the upstream is
// idle (after commit, and while the gate still holds frames) cancels the
// upstream request at once, never fails over, and leaves no goroutine behind.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix [][]byte
	}{
		{"after_commit", [][]byte{chunkFrame("Hel", false)}},
		{"in_gate", [][]byte{[]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newParked(tc.prefix...)
			h := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"a": up}}, twoChannels("m", "m", ""), "b")
			leaks := goleak.IgnoreCurrent()
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel) // a failure below still ends the client
			done := make(chan struct{})
			var frameErr error // read after done: the client may outlive a failed test
			go func() {
				defer close(done)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/v1/chat/completions", strings.NewReader(chat(true)))
				resp, err := h.Client.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if _, err := sse.NewReader(resp.Body, 0).Next(); err != nil {
					frameErr = err
				}
				<-ctx.Done()
			}()
			if tc.name == "after_commit" {
				h.WaitSpanEnd(telemetry.SpanStreamGate, 1) // the gate decided
			}
			testkit.Recv(t, up.sent, "the upstream's first frames")
			cancel()
			testkit.Recv(t, up.canceled, "the upstream request's cancellation")
			testkit.Recv(t, done, "the request's end")
			if frameErr != nil {
				t.Fatalf("first frame: %v", frameErr)
			}
			h.WaitNoTimers()
			if h.Attempts("b", "m") != 0 {
				t.Fatal("a client that left caused a failover")
			}
			h.Client.CloseIdleConnections()
			h.Transport.CloseIdleConnections()
			goleak.VerifyNone(t, leaks)
		})
	}
}

// TestCommittedStreamHeaders: a committed stream tells caches and
// buffering proxies (nginx's X-Accel-Buffering) to pass it through as it
// comes, or flushing per frame gains the client nothing; a buffered
// answer does not.
func TestCommittedStreamHeaders(t *testing.T) {
	h := gwtest.New(t, twoChannels("m", "m", ""), "a", "b")
	r := h.Post(chat(true))
	if r.Status != 200 || r.Header.Get("Cache-Control") != "no-cache" || r.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("stream: %d Cache-Control %q X-Accel-Buffering %q", r.Status, r.Header.Get("Cache-Control"), r.Header.Get("X-Accel-Buffering"))
	}
	r = h.Post(chat(false))
	if r.Status != 200 || r.Header.Get("X-Accel-Buffering") != "" {
		t.Fatalf("buffered answer: %d X-Accel-Buffering %q", r.Status, r.Header.Get("X-Accel-Buffering"))
	}
}

// TestStreamOutcomeReachesBreaker: the walk returns once a stream commits,
// and the hop's breaker ticket waits for the stream's end (Answer.End): a
// stream cut after commit counts against its channel's breaker, as a hop
// of the walk does; a complete one counts nothing.
func TestStreamOutcomeReachesBreaker(t *testing.T) {
	failures := func(h *gwtest.Gateway, name string) int {
		for _, br := range h.Engine.Breakers().All() {
			if br.Name() == name {
				return int(br.Snapshot().Failures)
			}
		}
		return 0 // not asked yet
	}
	h := gwtest.New(t, twoChannels("m|cut=3", "m", ""), "a", "b")
	for i := 1; i <= 2; i++ {
		r := h.Post(chat(true))
		if !strings.Contains(r.Body, "upstream_stream_interrupted") || r.Header.Get("X-Hopgate-Path") != "a:ok" {
			t.Fatalf("path %q, no in-band interruption: %s", r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		testkit.Eventually(t, func() bool { return failures(h, "a") == i }, fmt.Sprintf("%d cut streams counted against a's breaker", i))
	}
	if n := failures(h, "b"); n != 0 {
		t.Fatalf("b counted %d failures", n)
	}
}

// TestIdleTimerStoppedAtStreamEnd: the stream's idle timer, armed when the
// commit is written (Answer.Pump), is stopped when the stream ends,
// complete or cut: no timer is left on the gateway's clock afterwards (an
// armed one would keep the request's call and hop alive until it fired).
func TestIdleTimerStoppedAtStreamEnd(t *testing.T) {
	for _, model := range []string{"m", "m|cut=3"} {
		h := gwtest.New(t, twoChannels(model, "m", "    policy: {stream_idle_timeout: 5m}\n"), "a", "b")
		r := h.Post(chat(true))
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
			t.Fatalf("%s: status %d path %q", model, r.Status, r.Header.Get("X-Hopgate-Path"))
		}
		h.WantArmed(5*time.Minute, 30*time.Second, 240*time.Second) // the idle timer; the default gate and header timeouts
		h.WaitNoTimers()
	}
}

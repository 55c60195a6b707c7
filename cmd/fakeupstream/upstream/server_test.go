package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The exact healthy stream is the contract tests assert bytes against.
func TestHealthyStream(t *testing.T) {
	fx := newFixture(t, Options{Name: "a"})
	resp := fx.chat(t, "m|tokens=3", true)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got, err := frames(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(delta, finish string) string {
		return `data: {"id":"chatcmpl-a-1","object":"chat.completion.chunk","created":1767323045,"model":"m|tokens=3",` +
			`"system_fingerprint":"fp_a","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]}`
	}
	want := []string{
		chunk(`{"role":"assistant","content":""}`, "null"),
		chunk(`{"content":"tok1 "}`, "null"),
		chunk(`{"content":"tok2 "}`, "null"),
		chunk(`{"content":"tok3 "}`, "null"),
		chunk(`{}`, `"stop"`),
		"data: [DONE]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("stream\n got %q\nwant %q", got, want)
	}
}

// include_usage adds exactly one usage chunk with empty choices before [DONE].
func TestStreamUsageChunk(t *testing.T) {
	fx := newFixture(t, Options{})
	body := chatBody("m", true)
	body["stream_options"] = map[string]any{"include_usage": true}
	resp, err := fx.post(t.Context(), "/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := frames(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n != 1+8+1+1+1 || got[n-1] != "data: [DONE]" {
		t.Fatalf("frames %q", got)
	}
	var u struct {
		Choices []any `json:"choices"`
		Usage   usage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(got[len(got)-2], "data: ")), &u); err != nil {
		t.Fatal(err)
	}
	if u.Choices == nil || len(u.Choices) != 0 || u.Usage != (usage{PromptTokens: 2, CompletionTokens: 8, TotalTokens: 10}) {
		t.Fatalf("usage chunk %+v", u)
	}
	if contentOf(t, got) != Answer(8) {
		t.Fatalf("content %q", contentOf(t, got))
	}
}

// Non-stream answers carry the same text as streams and echo the model.
func TestHealthyNonStream(t *testing.T) {
	fx := newFixture(t, Options{})
	resp := fx.chat(t, "m|tokens=5", false)
	var c struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	decode(t, resp.Body, &c)
	if c.Object != "chat.completion" || c.Model != "m|tokens=5" || c.Choices[0].Message.Content != "tok1 tok2 tok3 tok4 tok5 " ||
		c.Choices[0].FinishReason != "stop" || c.Usage.CompletionTokens != 5 {
		t.Fatalf("answer %+v", c)
	}
}

// Status faults arrive as a gateway sees them: status, error code, headers.
func TestStatusFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	tests := []struct {
		model  string
		status int
		code   string // "" for HTML bodies
		header string // expected Retry-After
	}{
		{"m|503", 503, "engine_overloaded", ""},
		{"m|429", 429, "rate_limit_exceeded", ""},
		{"m|429:ra=7", 429, "rate_limit_exceeded", "7"}, // L1 keeps the channel out for 7 s
		{"m|503:ra=0", 503, "engine_overloaded", "0"},
		{"m|500", 500, "server_error", ""},
		{"m|502", 502, "", ""}, // load balancer HTML
		{"m|504", 504, "", ""},
		{"m|529", 529, "overloaded", ""},
		{"m|401", 401, "invalid_api_key", ""},
		{"m|402", 402, "payment_required", ""},
		{"m|403", 403, "unsupported_country_region_territory", ""},
		{"m|400", 400, "invalid_request", ""},
		{"m|404", 404, "model_not_found", ""},
		{"m|413", 413, "request_too_large", ""},
		{"m|422", 422, "unprocessable_entity", ""},
		{"m|418", 418, "status_418", ""},                         // any status, for classification tables
		{"m|context-length", 400, "context_length_exceeded", ""}, // context_fallback trigger
		{"m|content-filter", 400, "content_filter", ""},          // final, returned unchanged
		{"m|typo-fault", 400, "unknown_fault", ""},               // typos never pass as healthy
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				resp := fx.chat(t, tt.model, stream)
				if resp.StatusCode != tt.status || resp.Header.Get("Retry-After") != tt.header {
					t.Fatalf("stream=%v: status %d Retry-After %q", stream, resp.StatusCode, resp.Header.Get("Retry-After"))
				}
				if tt.code == "" {
					if ct := resp.Header.Get("Content-Type"); ct != "text/html" {
						t.Fatalf("content type %q", ct)
					}
					continue
				}
				if code := errorCode(t, resp.Body); code != tt.code {
					t.Fatalf("stream=%v: code %q", stream, code)
				}
			}
		})
	}
}

// once/times fail the first attempts for a model name, then heal; attempts
// are counted per exact name.
func TestOnceAndTimes(t *testing.T) {
	fx := newFixture(t, Options{})
	for i, want := range []int{503, 200, 200} {
		if got := fx.chat(t, "m|503-once", false).StatusCode; got != want {
			t.Fatalf("once attempt %d: %d, want %d", i+1, got, want)
		}
	}
	for i, want := range []int{502, 502, 200} {
		if got := fx.chat(t, "m|502-times=2", true).StatusCode; got != want {
			t.Fatalf("times attempt %d: %d, want %d", i+1, got, want)
		}
	}
	if fx.fake.Attempts("m|503-once") != 3 || fx.fake.Attempts("m|502-times=2") != 3 || fx.fake.Attempts("m") != 0 {
		t.Fatalf("attempts %d %d", fx.fake.Attempts("m|503-once"), fx.fake.Attempts("m|502-times=2"))
	}
}

// reset: the gateway sees a transport error before any header.
func TestReset(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, stream := range []bool{false, true} {
		resp, err := fx.post(t.Context(), "/v1/chat/completions", chatBody("m|reset", stream))
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got status %d, want a connection error", resp.StatusCode)
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v, want ECONNRESET or EOF", err)
		}
	}
}

// no-headers: nothing arrives until the client gives up (L4 header timeout).
func TestNoHeaders(t *testing.T) {
	fx := newFixture(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		resp, err := fx.post(ctx, "/v1/chat/completions", chatBody("m|no-headers", true))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-fx.seen // the request was read; now it hangs
	select {
	case err := <-errc:
		t.Fatalf("answered before cancel: %v", err)
	default:
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// Close must free parked handlers, or httptest.Server.Close hangs forever.
func TestCloseReleasesParkedHandlers(t *testing.T) {
	fx := newFixture(t, Options{})
	errc := make(chan error, 1)
	go func() {
		resp, err := fx.post(t.Context(), "/v1/chat/completions", chatBody("m|no-headers", false))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-fx.seen
	fx.fake.Close()
	if err := <-errc; err == nil {
		t.Fatal("parked request got an answer after Close; want an aborted connection")
	}
}

// slow-first-token: headers at once, then only a keep-alive until the
// injected clock passes the delay.
func TestSlowFirstToken(t *testing.T) {
	fx := newFixture(t, Options{})
	resp := fx.chat(t, "m|tokens=2|slow-first-token=5s", true)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if got := readFrames(t, br, 1); got[0] != ": keep-alive" {
		t.Fatalf("first frame %q", got[0])
	}
	if err := fx.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(5 * time.Second)
	rest, err := frames(br)
	if err != nil || contentOf(t, rest) != Answer(2) || rest[len(rest)-1] != "data: [DONE]" {
		t.Fatalf("after delay: %q, %v", rest, err)
	}
}

// header-delay: nothing at all, not even headers, until the injected clock
// passes the delay; then the fault (here a 503) as usual.
func TestHeaderDelay(t *testing.T) {
	fx := newFixture(t, Options{})
	got := make(chan int, 1)
	go func() {
		resp, err := fx.post(t.Context(), "/v1/chat/completions", chatBody("m|503|header-delay=3s", false))
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	if err := fx.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		t.Fatalf("answered %d before the clock moved", s)
	default:
	}
	fx.clock.Advance(3 * time.Second)
	if s := <-got; s != http.StatusServiceUnavailable {
		t.Fatalf("status %d after the delay, want 503", s)
	}
}

// stall: half the tokens, silence until the clock moves, then the rest.
func TestStall(t *testing.T) {
	fx := newFixture(t, Options{})
	resp := fx.chat(t, "m|stall=10s", true)
	br := bufio.NewReader(resp.Body)
	first := readFrames(t, br, 1+4)
	if contentOf(t, first) != Answer(4) {
		t.Fatalf("before stall: %q", first)
	}
	if err := fx.clock.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(10 * time.Second)
	rest, err := frames(br)
	if err != nil || contentOf(t, append(first, rest...)) != Answer(8) || rest[len(rest)-1] != "data: [DONE]" {
		t.Fatalf("after stall: %q, %v", rest, err)
	}
}

// FrameDelay paces every frame on the injected clock.
func TestFrameDelay(t *testing.T) {
	fx := newFixture(t, Options{FrameDelay: time.Second})
	resp := fx.chat(t, "m|tokens=2", true)
	br := bufio.NewReader(resp.Body)
	readFrames(t, br, 1) // the role chunk goes out at once
	for range 4 {        // tok1, tok2, finish, [DONE]
		if err := fx.clock.BlockUntilContext(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		fx.clock.Advance(time.Second)
		readFrames(t, br, 1)
	}
}

// cut: content then a body read error, no finish, no [DONE].
func TestCut(t *testing.T) {
	fx := newFixture(t, Options{})
	resp := fx.chat(t, "m|tokens=6|cut=3", true)
	got, err := frames(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read error %v, want unexpected EOF", err)
	}
	if len(got) != 4 || contentOf(t, got) != Answer(3) {
		t.Fatalf("frames before the cut: %q", got)
	}
	// Non-streaming: half the body, then the connection dies.
	resp = fx.chat(t, "m|cut=3", false)
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("non-stream read error %v", err)
	}
}

// Tool-call deltas are decisive and carry JSON arguments split per token.
func TestToolCalls(t *testing.T) {
	fx := newFixture(t, Options{})
	got, err := frames(fx.chat(t, "m|tokens=2|tool-calls", true).Body)
	if err != nil {
		t.Fatal(err)
	}
	var args strings.Builder
	for _, f := range got[1 : len(got)-2] {
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []toolCall `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &c); err != nil {
			t.Fatal(err)
		}
		args.WriteString(c.Choices[0].Delta.ToolCalls[0].Function.Arguments)
	}
	if args.String() != `{"q":"tok1 tok2 "}` || !strings.Contains(got[len(got)-2], `"finish_reason":"tool_calls"`) {
		t.Fatalf("arguments %q, frames %q", args.String(), got)
	}
}

// In-stream errors after a 200: the L3 gate must discard these.
func TestStreamErrors(t *testing.T) {
	fx := newFixture(t, Options{})
	tests := []struct {
		model string
		last  string
	}{
		{"m|stream-error", `data: {"error":`},
		{"m|stream-error-event", "event: error\ndata: {\"error\":"},
	}
	for _, tt := range tests {
		got, err := frames(fx.chat(t, tt.model, true).Body)
		if err != nil || len(got) != 2 || deltaText(t, got[0]) != "" || !strings.HasPrefix(got[1], tt.last) {
			t.Fatalf("%s: %q, %v", tt.model, got, err)
		}
	}
}

// malformed and no-done damage an otherwise valid stream.
func TestMalformedAndNoDone(t *testing.T) {
	fx := newFixture(t, Options{})
	got, err := frames(fx.chat(t, "m|tokens=4|malformed", true).Body)
	if err != nil || got[3] != "data: {not json" || got[len(got)-1] != "data: [DONE]" {
		t.Fatalf("malformed: %q, %v", got, err)
	}
	got, err = frames(fx.chat(t, "m|no-done", true).Body)
	if err != nil || !strings.Contains(got[len(got)-1], `"finish_reason":"stop"`) {
		t.Fatalf("no-done: %q, %v", got, err)
	}
}

// 200 with a broken body: what L3 treats as a failed non-streaming hop.
func TestBrokenBodies(t *testing.T) {
	fx := newFixture(t, Options{})
	resp := fx.chat(t, "m|error-body", false)
	if resp.StatusCode != 200 || errorCode(t, resp.Body) != "stream_error" {
		t.Fatalf("error-body status %d", resp.StatusCode)
	}
	resp = fx.chat(t, "m|bad-json", false)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Valid(b) {
		t.Fatalf("bad-json: %d %q", resp.StatusCode, b)
	}
	for _, stream := range []bool{false, true} {
		resp = fx.chat(t, "m|short-body", stream)
		if _, err := io.ReadAll(resp.Body); resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("short-body stream=%v: %d, %v", stream, resp.StatusCode, err)
		}
	}
}

// Endless bodies must not be buffered whole: the reader stops them.
func TestEndless(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, tt := range []struct {
		model  string
		stream bool
	}{{"m|endless-frame", true}, {"m|endless-body", false}} {
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := fx.post(ctx, "/v1/chat/completions", chatBody(tt.model, tt.stream))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		wantLines := 0
		if tt.stream {
			wantLines = 2 // the role chunk, then one line that never ends
		}
		if err != nil || len(b) != 1<<20 || strings.Count(string(b), "\n") != wantLines {
			t.Fatalf("%s: %d bytes, %v", tt.model, len(b), err)
		}
		cancel()
		resp.Body.Close()
	}
}

// redirect: a provider moved; the gateway must not follow blindly.
func TestRedirect(t *testing.T) {
	fx := newFixture(t, Options{})
	fx.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp := fx.chat(t, "m|redirect", false)
	if resp.StatusCode != 302 || resp.Header.Get("Location") != "http://127.0.0.2:1/elsewhere" {
		t.Fatalf("redirect %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// flap: down for the window after the first request, on the injected clock.
func TestFlap(t *testing.T) {
	fx := newFixture(t, Options{})
	steps := []struct {
		advance time.Duration
		want    int
	}{{0, 503}, {29 * time.Second, 503}, {time.Second, 200}, {time.Hour, 200}}
	for i, s := range steps {
		fx.clock.Advance(s.advance)
		if got := fx.chat(t, "m|flap=30s", false).StatusCode; got != s.want {
			t.Fatalf("step %d: %d, want %d", i, got, s.want)
		}
	}
	periodic := []struct {
		advance time.Duration
		want    int
	}{{0, 503}, {30 * time.Second, 200}, {29 * time.Second, 200}, {time.Second, 503}, {30 * time.Second, 200}}
	for i, s := range periodic {
		fx.clock.Advance(s.advance)
		if got := fx.chat(t, "m|flap=30s/60s", true).StatusCode; got != s.want {
			t.Fatalf("periodic step %d: %d, want %d", i, got, s.want)
		}
	}
}

// reject-prefill refuses an assistant-last conversation only; a healthy
// model continues an assistant prefix (mid-stream resume by prefill).
func TestPrefill(t *testing.T) {
	fx := newFixture(t, Options{})
	prefilled := func(model string) map[string]any {
		return map[string]any{"model": model, "stream": true, "messages": []map[string]any{
			{"role": "user", "content": "say something"},
			{"role": "assistant", "content": "tok1 tok2 to"},
		}}
	}
	resp, err := fx.post(t.Context(), "/v1/chat/completions", prefilled("m|tokens=4|reject-prefill"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 {
		t.Fatalf("prefill status %d", resp.StatusCode)
	}
	resp.Body.Close()
	if got := fx.chat(t, "m|tokens=4|reject-prefill", true).StatusCode; got != 200 {
		t.Fatalf("plain request status %d", got)
	}
	resp, err = fx.post(t.Context(), "/v1/chat/completions", prefilled("m|tokens=4"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := frames(resp.Body)
	if err != nil || contentOf(t, got) != "k3 tok4 " {
		t.Fatalf("continuation %q, %v", contentOf(t, got), err)
	}
}

// The request log is what tests use to check the channel credential and
// trace propagation reached the upstream.
func TestLogAttemptsReset(t *testing.T) {
	fx := newFixture(t, Options{})
	fx.chat(t, "m|503-once", true)
	fx.chat(t, "m|503-once", true)
	fx.chat(t, "other", false)
	log := fx.fake.Log()
	if len(log) != 3 {
		t.Fatalf("log has %d entries", len(log))
	}
	r := log[1]
	if r.Model != "m|503-once" || r.Attempt != 2 || !r.Stream || r.Path != "/v1/chat/completions" || r.Method != "POST" ||
		r.Header.Get("Authorization") != "Bearer sk-channel" || !strings.HasPrefix(r.Header.Get("Traceparent"), "00-4bf92f") ||
		!strings.Contains(string(r.Body), `"say something"`) || !r.Time.Equal(epoch) {
		t.Fatalf("log entry %+v", r)
	}
	log[1].Header.Set("Authorization", "changed") // a copy: must not alter the server's log
	if fx.fake.Log()[1].Header.Get("Authorization") != "Bearer sk-channel" {
		t.Fatal("Log returned shared headers")
	}
	fx.fake.Reset()
	if len(fx.fake.Log()) != 0 || fx.fake.Attempts("m|503-once") != 0 {
		t.Fatal("Reset kept state")
	}
	if got := fx.chat(t, "m|503-once", false).StatusCode; got != 503 {
		t.Fatalf("after Reset once fires again: got %d", got)
	}
}

// A soak test must not grow the log without bound.
func TestLogLimit(t *testing.T) {
	fx := newFixture(t, Options{LogLimit: 2})
	for _, m := range []string{"a", "b", "c"} {
		fx.chat(t, m, false)
	}
	log := fx.fake.Log()
	if len(log) != 2 || log[0].Model != "b" || log[1].Model != "c" || fx.fake.Attempts("a") != 1 {
		t.Fatalf("log %+v", log)
	}
}

// SetFault drives the demo's incident: a healthy name starts failing, once
// counts from the override, and clearing it heals the model.
func TestSetFault(t *testing.T) {
	fx := newFixture(t, Options{})
	if fx.chat(t, "gpt-4o-mini", false).StatusCode != 200 {
		t.Fatal("healthy before override")
	}
	if err := fx.fake.SetFault("gpt-4o-mini", "503-once"); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{503, 200} {
		if got := fx.chat(t, "gpt-4o-mini", false).StatusCode; got != want {
			t.Fatalf("override attempt %d: %d, want %d", i+1, got, want)
		}
	}
	if err := fx.fake.SetFault("gpt-4o-mini", "reset"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.post(t.Context(), "/v1/chat/completions", chatBody("gpt-4o-mini", false)); err == nil {
		t.Fatal("override to reset still answered")
	}
	if r := fx.fake.Log()[3]; r.Model != "gpt-4o-mini" || r.Effective != "gpt-4o-mini|reset" || r.Attempt != 4 {
		t.Fatalf("log entry %+v", r)
	}
	if err := fx.fake.SetFault("gpt-4o-mini", ""); err != nil {
		t.Fatal(err)
	}
	if fx.chat(t, "gpt-4o-mini", false).StatusCode != 200 {
		t.Fatal("still failing after clearing the override")
	}
	if err := fx.fake.SetFault("gpt-4o-mini", "5o3"); !errors.Is(err, ErrFault) {
		t.Fatalf("invalid override accepted: %v", err)
	}
}

// APIKey lets a test prove the gateway sends the channel's credential.
func TestAPIKey(t *testing.T) {
	fx := newFixture(t, Options{APIKey: "sk-other"})
	resp := fx.chat(t, "m", false)
	if resp.StatusCode != 401 || errorCode(t, resp.Body) != "invalid_api_key" {
		t.Fatalf("status %d", resp.StatusCode)
	}
	fx2 := newFixture(t, Options{APIKey: "sk-channel"})
	if got := fx2.chat(t, "m", false).StatusCode; got != 200 {
		t.Fatalf("right key: %d", got)
	}
}

// Bad requests get OpenAI-shaped errors, not a healthy answer.
func TestBadRequests(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.client.Post(fx.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 400 || errorCode(t, resp.Body) != "invalid_request" {
		t.Fatalf("bad JSON: %d", resp.StatusCode)
	}
	if got := fx.chat(t, "", false); got.StatusCode != 400 || errorCode(t, got.Body) != "missing_model" {
		t.Fatalf("missing model: %d", got.StatusCode)
	}
	resp2, err := fx.client.Get(fx.ts.URL + "/v1/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 404 {
		t.Fatalf("unknown path: %d", resp2.StatusCode)
	}
}

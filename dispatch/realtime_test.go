package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/realtime"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// rtConfig is a realtime model on two regions; A and B are the chain
// entries' upstream models (a fault after "|").
const rtConfig = `
auth: {mode: none}
realtime: {hold_bytes: 4096}
channels:
  - {id: eu, base_url: "{{url:eu}}", api_key_env: CHANNEL_KEY, region: eu-west-1}
  - {id: us, base_url: "{{url:us}}", api_key_env: CHANNEL_KEY, region: us-east-1}
models:
  - name: voice
    operations: [realtime]
    policy: {header_timeout: 10s}
    chain:
      - {channel: eu, upstream_model: "A"}
      - {channel: us, upstream_model: "B"}
`

func newRealtime(t *testing.T, a, b string) *gwtest.Gateway {
	t.Helper()
	return gwtest.New(t, strings.NewReplacer(`"A"`, `"`+a+`"`, `"B"`, `"`+b+`"`).Replace(rtConfig), "eu", "us")
}

// dialRealtime opens a client session on the gateway.
func dialRealtime(t *testing.T, g *gwtest.Gateway, model string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	opts.HTTPClient = g.Client
	c, resp, err := websocket.Dial(ctx, g.URL+"/v1/realtime?model="+model, opts)
	if err != nil {
		t.Fatalf("dial: %v (%+v)", err, resp)
	}
	c.SetReadLimit(1 << 20)
	return c, resp
}

type rtEvent struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	Error   struct {
		Code, Message string
	} `json:"error"`
	Response struct {
		ID string `json:"id"`
	} `json:"response"`
}

func readEvent(t *testing.T, c *websocket.Conn) (rtEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil {
		return rtEvent{}, err
	}
	var ev rtEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("event %q: %v", b, err)
	}
	return ev, nil
}

func sendEvent(t *testing.T, c *websocket.Conn, ev string) {
	t.Helper()
	if err := c.Write(t.Context(), websocket.MessageText, []byte(ev)); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads events until one of type typ, and returns the types seen.
func readUntil(t *testing.T, c *websocket.Conn, typ string) []string {
	t.Helper()
	var seen []string
	for {
		ev, err := readEvent(t, c)
		if err != nil {
			t.Fatalf("reading until %s (seen %v): %v", typ, seen, err)
		}
		seen = append(seen, ev.Type)
		if ev.Type == typ {
			return seen
		}
	}
}

// The post-mortem's first layer: the eu-west-1 realtime channel refuses
// sessions; the walk opens the session on the next region before the
// client sees anything but session.created. The client's events sent
// before the commit are replayed in order; X-Request-Id names the trace,
// whose hop spans and path say what happened.
func TestRealtimeFailsOverAtOpen(t *testing.T) {
	for _, fault := range []string{"rt-refuse", "rt-refuse=429", "rt-error", "rt-close"} {
		t.Run(fault, func(t *testing.T) {
			g := newRealtime(t, "gpt-realtime|"+fault, "gpt-realtime")
			c, resp := dialRealtime(t, g, "voice", nil)
			defer c.CloseNow()
			id := resp.Header.Get("X-Request-Id")
			if id == "" || resp.Header.Get("X-Hopgate-Model") != "voice" {
				t.Fatalf("upgrade headers %v", resp.Header)
			}
			// Sent at once: held until a channel commits, then replayed.
			sendEvent(t, c, `{"type":"session.update","session":{"type":"realtime"}}`)
			sendEvent(t, c, `{"type":"response.create"}`)
			seen := readUntil(t, c, "response.done")
			want := "session.created session.updated response.created response.output_audio_transcript.delta response.done"
			if strings.Join(seen, " ") != want {
				t.Fatalf("events %v, want %s", seen, want)
			}
			if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
				t.Fatal(err)
			}
			spans := g.Trace(id)
			var path string
			hops := 0
			for _, s := range spans {
				for _, a := range s.Attributes {
					if string(a.Key) == telemetry.AttrFailoverPath {
						path = a.Value.AsString()
					}
				}
				if strings.HasPrefix(s.Name, "realtime ") {
					hops++
				}
			}
			if hops != 2 || !strings.HasPrefix(path, "eu:") || !strings.HasSuffix(path, " -> us:ok") {
				t.Fatalf("path %q, %d realtime hop spans", path, hops)
			}
		})
	}
}

// The official openai-go realtime client (its WebSocket transport)
// against /v1/realtime through a failover: it connects, gets its typed
// session.created and response.done, and closes cleanly.
func TestRealtimeOpenAISDKThroughFailover(t *testing.T) {
	g := newRealtime(t, "gpt-realtime|rt-refuse", "gpt-realtime")
	client := openai.NewClient(oaoption.WithBaseURL(g.URL+"/v1/"), oaoption.WithAPIKey("unused"),
		oaoption.WithHTTPClient(g.Client), oaoption.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	conn, err := client.Realtime.Connect(ctx, realtime.RealtimeConnectionOptions{}, oaoption.WithQuery("model", "voice"))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := conn.Recv(ctx)
	if err != nil || ev.Type != "session.created" || ev.AsSessionCreatedEvent().Session.AsRealtimeSessionCreateRequest().Model != "gpt-realtime" {
		t.Fatalf("first event %s, %v", ev.Type, err)
	}
	if err := conn.SendRaw(ctx, json.RawMessage(`{"type":"response.create"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := conn.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "response.done" {
			if d := ev.AsResponseDoneEvent(); d.Response.Usage.OutputTokens != 20 || !strings.HasPrefix(d.Response.ID, "resp_us_") {
				t.Fatalf("response.done %+v", d.Response)
			}
			break
		}
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if n := g.Attempts("eu", "gpt-realtime|rt-refuse") + g.Attempts("us", "gpt-realtime"); n != 2 {
		t.Fatalf("%d upgrades, want 2", n)
	}
}

// After commit, an upstream that drops ends the client's session with
// the upstream_session_interrupted error event and close 1011, never a
// silent half-open socket, and the breaker counts the drop.
func TestRealtimeDropAfterCommit(t *testing.T) {
	g := newRealtime(t, "gpt-realtime|rt-drop=1", "gpt-realtime")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	if ev, _ := readEvent(t, c); ev.Type != "session.created" {
		t.Fatalf("first event %s", ev.Type)
	}
	sendEvent(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	sendEvent(t, c, `{"type":"response.create"}`) // the fake cuts the socket now
	ev, err := readEvent(t, c)
	if err != nil || ev.Type != "error" || ev.Error.Code != "upstream_session_interrupted" {
		t.Fatalf("after the drop: %+v, %v", ev, err)
	}
	_, err = readEvent(t, c)
	if websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Fatalf("close %v, want 1011", err)
	}
	testkit.Eventually(t, func() bool { return breakerFailures(g, "eu") == 1 }, "the breaker counted the drop")
}

// A channel that accepts the upgrade and never speaks fails at the
// model's header_timeout (L4: the upgrade and the first server event),
// and the walk moves on; a channel slow to session.created likewise.
func TestRealtimeHeaderTimeout(t *testing.T) {
	for _, fault := range []string{"rt-silent", "rt-slow=30s"} {
		t.Run(fault, func(t *testing.T) {
			g := newRealtime(t, "gpt-realtime|"+fault, "gpt-realtime")
			type res struct {
				ev  rtEvent
				err error
			}
			c, _ := dialRealtime(t, g, "voice", nil)
			defer c.CloseNow()
			got := make(chan res, 1)
			go func() {
				ev, err := readEvent(t, c)
				got <- res{ev, err}
			}()
			g.WaitAttempts("eu", "gpt-realtime|"+fault, 1)
			g.WaitTimers(2) // max_session and L4
			g.Clock.Advance(10 * time.Second)
			r := testkit.Recv(t, got, "the first event")
			if r.err != nil || r.ev.Type != "session.created" {
				t.Fatalf("first event %+v, %v", r.ev, r.err)
			}
			if g.Attempts("us", "gpt-realtime") != 1 {
				t.Fatal("the session was not opened on the next region")
			}
		})
	}
}

// breakerFailures is the failures in the window of channel's breaker.
func breakerFailures(g *gwtest.Gateway, channel string) int {
	for _, b := range g.Engine.Breakers().All() {
		if b.Name() == channel {
			return b.Snapshot().Failures
		}
	}
	return 0
}

// closeOf reads until the session's close and returns its code and the
// last error event's code.
func closeOf(t *testing.T, c *websocket.Conn) (websocket.StatusCode, string) {
	t.Helper()
	last := ""
	for {
		ev, err := readEvent(t, c)
		if err != nil {
			return websocket.CloseStatus(err), last
		}
		if ev.Type == "error" {
			last = ev.Error.Code
		}
	}
}

// Hostile and mistaken clients end their own session with a close code
// that says why, and take its upstream down with it (goleak, TestMain).
func TestRealtimeHostileClients(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a      string
		client func(t *testing.T, c *websocket.Conn)
		code   websocket.StatusCode
		event  string
		// outcome is the session's hopgate.outcome: a client's mistake
		// before the commit is a bad request, not a failover exhausted
		// (no channel failed); after the commit the session was served.
		outcome string
		// realtime replaces rtConfig's realtime block ("": kept).
		realtime string
	}{
		// why: after the commit, one event larger than realtime.max_event_bytes is refused by the framing (1009).
		{"oversized event", "gpt-realtime", func(t *testing.T, c *websocket.Conn) {
			_ = c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"x","pad":"`+strings.Repeat("a", 9000)+`"}`))
		}, websocket.StatusMessageTooBig, "", "ok", "{hold_bytes: 4096, max_event_bytes: 8192}"},
		// why: before it, one larger than realtime.hold_bytes could never be held (1009).
		{"oversized before commit", "gpt-realtime|rt-slow=1h", func(t *testing.T, c *websocket.Conn) {
			_ = c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"x","pad":"`+strings.Repeat("a", 5000)+`"}`))
		}, websocket.StatusMessageTooBig, "", "bad_request", ""},
		// why: realtime events are JSON text; binary is a client mistake (1003), said in an error event.
		{"binary after commit", "gpt-realtime", func(t *testing.T, c *websocket.Conn) {
			_ = c.Write(t.Context(), websocket.MessageBinary, []byte{0, 1, 2})
		}, websocket.StatusUnsupportedData, "invalid_event", "ok", ""},
		// why: before the commit, too: nothing of it reaches a channel.
		{"binary before commit", "gpt-realtime|rt-slow=1h", func(t *testing.T, c *websocket.Conn) {
			_ = c.Write(t.Context(), websocket.MessageBinary, []byte{0, 1, 2})
		}, websocket.StatusUnsupportedData, "invalid_event", "bad_request", ""},
		// why: what a client sends before session.created is held within hold_bytes, no more (1008).
		{"hold exceeded", "gpt-realtime|rt-slow=1h", func(t *testing.T, c *websocket.Conn) {
			for range 3 {
				_ = c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"input_audio_buffer.append","audio":"`+strings.Repeat("A", 2000)+`"}`))
			}
		}, websocket.StatusPolicyViolation, "realtime_hold_exceeded", "bad_request", ""},
		// why: within hold_bytes but over the process's buffer budget (below): shed, retry later (1013).
		{"budget", "gpt-realtime|rt-slow=1h", func(t *testing.T, c *websocket.Conn) {
			_ = c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"input_audio_buffer.append","audio":"`+strings.Repeat("A", 2000)+`"}`))
		}, websocket.StatusTryAgainLater, "engine_overloaded", "shed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o gwtest.Options
			if tc.name == "budget" {
				o.Budget = overload.NewBudget(1024)
			}
			yml := rtConfig
			if tc.realtime != "" {
				yml = strings.ReplaceAll(yml, "{hold_bytes: 4096}", tc.realtime)
			}
			g := gwtest.NewWith(t, o, strings.NewReplacer(`"A"`, `"`+tc.a+`"`, `"B"`, `"gpt-realtime"`).Replace(yml), "eu", "us")
			c, resp := dialRealtime(t, g, "voice", nil)
			defer c.CloseNow()
			if !strings.Contains(tc.a, "rt-slow") {
				if ev, _ := readEvent(t, c); ev.Type != "session.created" {
					t.Fatalf("first event %s", ev.Type)
				}
			}
			tc.client(t, c)
			if code, ev := closeOf(t, c); code != tc.code || ev != tc.event {
				t.Fatalf("closed with %v after error event %q; want %v after %q", code, ev, tc.code, tc.event)
			}
			outcome := ""
			for _, sp := range g.Trace(resp.Header.Get("X-Request-Id")) {
				if sp.Name != "dispatch voice" {
					continue
				}
				for _, kv := range sp.Attributes {
					if kv.Key == telemetry.AttrOutcome {
						outcome = kv.Value.AsString()
					}
				}
			}
			if outcome != tc.outcome {
				t.Errorf("the session's %s is %q, want %q", telemetry.AttrOutcome, outcome, tc.outcome)
			}
		})
	}
}

// A ping flood is answered by the framing and changes nothing: the
// session still relays.
func TestRealtimePingFlood(t *testing.T) {
	g := newRealtime(t, "gpt-realtime", "gpt-realtime")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	events := make(chan string, 16)
	go func() {
		defer close(events)
		for {
			ev, err := readEvent(t, c)
			if err != nil {
				return
			}
			events <- ev.Type
		}
	}()
	if ev := testkit.Recv(t, events, "session.created"); ev != "session.created" {
		t.Fatalf("first event %s", ev)
	}
	for range 500 {
		if err := c.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	sendEvent(t, c, `{"type":"response.create"}`)
	for ev := ""; ev != "response.done"; {
		ev = testkit.Recv(t, events, "the response")
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	for range events {
	}
}

// flooder is an upstream that opens the session, then writes 512 KiB
// events as fast as the gateway takes them.
func flooder() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := c.CloseRead(r.Context()) // it reads (a close frame), as real providers do
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"session.created","session":{"type":"realtime"}}`))
		big := []byte(`{"type":"response.output_audio.delta","delta":"` + strings.Repeat("A", 512<<10) + `"}`)
		for c.Write(ctx, websocket.MessageText, big) == nil {
		}
	})
}

// A client that never reads cannot hold a session past
// realtime.max_session: the gateway's write to it ends there, and with it
// the session and its upstream.
func TestRealtimeClientNeverReads(t *testing.T) {
	yml := strings.ReplaceAll(rtConfig, "{hold_bytes: 4096}", "{hold_bytes: 4096, max_session: 1m}")
	yml = strings.ReplaceAll(strings.ReplaceAll(yml, `"A"`, `"flood"`), `"B"`, `"x"`)
	g := gwtest.NewWith(t, gwtest.Options{Custom: map[string]http.Handler{"eu": flooder()}}, yml, "us")
	ended := g.SpanEnds("dispatch voice")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	g.WaitTimers(1) // max_session (L4 stopped at session.created)
	g.Clock.Advance(time.Minute)
	g.WaitTimers(1) // the blocked write's bound (finalWrite)
	g.Clock.Advance(5 * time.Second)
	testkit.Recv(t, ended, "the session's end")
}

// realtime.max_session ends a committed session with session_expired and
// a normal close; the client's close of its own session closes the
// upstream (the session's hop ends ok).
func TestRealtimeMaxSessionAndClientClose(t *testing.T) {
	yml := strings.ReplaceAll(rtConfig, "{hold_bytes: 4096}", "{hold_bytes: 4096, max_session: 1m}")
	g := gwtest.New(t, strings.NewReplacer(`"A"`, `"gpt-realtime"`, `"B"`, `"gpt-realtime"`).Replace(yml), "eu", "us")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	if ev, _ := readEvent(t, c); ev.Type != "session.created" {
		t.Fatalf("first event %s", ev.Type)
	}
	// The client may read session.created before max_session's timer is
	// armed: move the clock only once it is (L4 stopped at the commit).
	g.WaitTimers(1)
	g.Clock.Advance(time.Minute)
	if code, ev := closeOf(t, c); code != websocket.StatusNormalClosure || ev != "session_expired" {
		t.Fatalf("max_session: closed %v after %q", code, ev)
	}

	ended := g.SpanEnds("dispatch voice")
	c2, resp := dialRealtime(t, g, "voice", nil)
	defer c2.CloseNow()
	readEvent(t, c2)
	if err := c2.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, ended, "the session's end")
	hopEnd := func(resp *http.Response) (hopOutcome, closeCode string) {
		for _, s := range g.Trace(resp.Header.Get("X-Request-Id")) {
			if strings.HasPrefix(s.Name, "realtime ") {
				for _, a := range s.Attributes {
					switch string(a.Key) {
					case telemetry.AttrHopOutcome:
						hopOutcome = a.Value.Emit()
					case telemetry.AttrRealtimeCloseCode:
						closeCode = a.Value.Emit()
					}
				}
			}
		}
		return hopOutcome, closeCode
	}
	if hopOutcome, closeCode := hopEnd(resp); hopOutcome != telemetry.HopOK || closeCode != "1000" {
		t.Fatalf("hop outcome %q close code %q", hopOutcome, closeCode)
	}

	// A client whose socket drops without a close frame: the span says
	// 1006 (it said nothing), and the hop is still the channel's success.
	ended = g.SpanEnds("dispatch voice")
	c3, resp := dialRealtime(t, g, "voice", nil)
	readEvent(t, c3)
	_ = c3.CloseNow()
	testkit.Recv(t, ended, "the session's end")
	if hopOutcome, closeCode := hopEnd(resp); hopOutcome != telemetry.HopOK || closeCode != "1006" {
		t.Fatalf("dropped client: hop outcome %q close code %q", hopOutcome, closeCode)
	}
}

// No channel opens the session: the client gets all_channels_failed and
// 1011 after the whole walk, and the front door refuses what is not a
// realtime session before any upgrade.
func TestRealtimeRefusals(t *testing.T) {
	g := newRealtime(t, "gpt-realtime|rt-refuse", "gpt-realtime|rt-refuse")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	if code, ev := closeOf(t, c); code != websocket.StatusInternalError || ev != "all_channels_failed" {
		t.Fatalf("exhausted: closed %v after %q", code, ev)
	}
	for _, tc := range []struct {
		name, url string
		upgrade   bool
		status    int
	}{
		// why: a plain GET is a client mistake, said in the OpenAI error shape.
		{"no upgrade", "/v1/realtime?model=voice", false, http.StatusBadRequest},
		{"no model", "/v1/realtime", true, http.StatusBadRequest},
		{"unknown model", "/v1/realtime?model=nope", true, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.upgrade {
				_, resp, err := websocket.Dial(t.Context(), g.URL+tc.url, &websocket.DialOptions{HTTPClient: g.Client})
				if err == nil || resp == nil || resp.StatusCode != tc.status || resp.Header.Get("X-Request-Id") == "" {
					t.Fatalf("dial: %v %+v", err, resp)
				}
				return
			}
			resp, err := g.Client.Get(g.URL + tc.url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

// One trace per session (DESIGN.md §15): a realtime hop span per attempt,
// each with an await session child carrying the gate's decision; the
// serving hop counts events both ways and response.done events, and sums
// their usage.
func TestRealtimeTrace(t *testing.T) {
	g := newRealtime(t, "gpt-realtime|rt-error", "gpt-realtime")
	ended := g.SpanEnds("dispatch voice")
	c, resp := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	readEvent(t, c)
	for range 2 {
		sendEvent(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "response.done")
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	testkit.Recv(t, ended, "the session's end")
	attrs := func(name string) []map[string]string {
		var out []map[string]string
		for _, s := range g.Trace(resp.Header.Get("X-Request-Id")) {
			if s.Name == name {
				m := map[string]string{}
				for _, a := range s.Attributes {
					m[string(a.Key)] = a.Value.Emit()
				}
				out = append(out, m)
			}
		}
		return out
	}
	gates := attrs(telemetry.SpanAwaitSession)
	if len(gates) != 2 || gates[0][telemetry.AttrGateDecision] != telemetry.GateDiscardError || gates[1][telemetry.AttrGateDecision] != telemetry.GateCommitSession {
		t.Fatalf("await session spans %v", gates)
	}
	served := attrs("realtime gpt-realtime")
	want := map[string]string{
		telemetry.AttrRealtimeEventsIn: "2", telemetry.AttrRealtimeEventsOut: "7", telemetry.AttrRealtimeResponses: "2",
		telemetry.AttrGenAIOutputTokens: "40", telemetry.AttrGenAIInputTokens: "20", telemetry.AttrChannel: "us",
		"gen_ai.operation.name": "realtime",
	}
	if len(served) != 1 {
		t.Fatalf("serving hop spans %v", served)
	}
	for k, v := range want {
		if served[0][k] != v {
			t.Errorf("%s = %q, want %q", k, served[0][k], v)
		}
	}
	if failed := attrs("realtime gpt-realtime|rt-error"); len(failed) != 1 || failed[0][telemetry.AttrHopOutcome] != telemetry.HopRetryable {
		t.Fatalf("failed hop spans %v", failed)
	}
}

// Clients authenticate with Authorization: Bearer, or, from a browser,
// with the openai-insecure-api-key.<key> subprotocol; hopgate selects the
// "realtime" subprotocol and never echoes the key. No key: 401 before
// any upgrade.
func TestRealtimeAuth(t *testing.T) {
	yml := strings.Replace(rtConfig, "auth: {mode: none}", "auth: {keys: [{id: k, sha256: f56e55616b752a361b30b142c781c3078ca55538f7258bd774500361bf279b5e}]}", 1)
	g := gwtest.New(t, strings.NewReplacer(`"A"`, `"gpt-realtime"`, `"B"`, `"gpt-realtime"`).Replace(yml), "eu", "us")
	c, resp := dialRealtime(t, g, "voice", &websocket.DialOptions{Subprotocols: []string{"realtime", "openai-insecure-api-key.sk-client-key"}})
	if c.Subprotocol() != "realtime" || strings.Contains(resp.Header.Get("Sec-Websocket-Protocol"), "sk-client-key") {
		t.Fatalf("subprotocol %q, header %q", c.Subprotocol(), resp.Header.Get("Sec-Websocket-Protocol"))
	}
	if ev, _ := readEvent(t, c); ev.Type != "session.created" {
		t.Fatalf("first event %s", ev.Type)
	}
	_ = c.Close(websocket.StatusNormalClosure, "")
	c, _ = dialRealtime(t, g, "voice", &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer sk-client-key"}}})
	_ = c.Close(websocket.StatusNormalClosure, "")
	for _, opts := range []*websocket.DialOptions{
		{HTTPClient: g.Client},
		{HTTPClient: g.Client, Subprotocols: []string{"realtime", "openai-insecure-api-key.wrong"}},
	} {
		_, resp, err := websocket.Dial(t.Context(), g.URL+"/v1/realtime?model=voice", opts)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("without a valid key: %v %+v", err, resp)
		}
	}
}

// After the commit a single event may be far larger than the hold or a
// stream's frame limit: a client's conversation.item.create with seconds
// of audio, the upstream's conversation.item.retrieved carrying it back.
// Both pass through (the session is not cut, the breaker counts no
// failure), bounded by realtime.max_event_bytes instead.
func TestRealtimeLargeEventsAfterCommit(t *testing.T) {
	g := newRealtime(t, "gpt-realtime", "gpt-realtime")
	c, _ := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	c.SetReadLimit(-1)
	if ev, _ := readEvent(t, c); ev.Type != "session.created" {
		t.Fatalf("first event %s", ev.Type)
	}
	audio := strings.Repeat("QUFB", 3<<18) // 3 MiB of base64: 3 × the engine's frame limit, 768 × hold_bytes
	sendEvent(t, c, `{"type":"conversation.item.create","item":{"id":"item_big","type":"message","role":"user","content":[{"type":"input_audio","audio":"`+audio+`"}]}}`)
	if ev, err := readEvent(t, c); err != nil || ev.Type != "conversation.item.created" {
		t.Fatalf("after a large client event: %+v, %v", ev, err)
	}
	sendEvent(t, c, `{"type":"conversation.item.retrieve","item_id":"item_big"}`)
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	_, b, err := c.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"conversation.item.retrieved"`) || !strings.Contains(string(b), audio) {
		t.Fatalf("conversation.item.retrieved: %d bytes, %v", len(b), err)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, func() bool { return g.Engine.Sessions().Open()["voice"] == 0 }, "the session ended")
	if n := breakerFailures(g, "eu"); n != 0 {
		t.Fatalf("the breaker counted %d failures for a healthy session", n)
	}
}

// A channel whose first event is not decisive (a relay's keep-alive)
// and then says nothing fails over at the model's stream_gate.timeout,
// armed at that first event as a stream's is at its headers: the
// session is not held until max_session.
func TestRealtimeGateTimeout(t *testing.T) {
	yml := strings.ReplaceAll(rtConfig, "policy: {header_timeout: 10s}", "policy: {header_timeout: 10s, stream_gate: {timeout: 5s}}")
	g := gwtest.New(t, strings.NewReplacer(`"A"`, `"gpt-realtime|rt-stall"`, `"B"`, `"gpt-realtime"`).Replace(yml), "eu", "us")
	c, resp := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	got := make(chan rtEvent, 1)
	go func() {
		ev, _ := readEvent(t, c)
		got <- ev
	}()
	g.WaitArmed(5 * time.Second)
	g.Clock.Advance(5 * time.Second)
	if ev := testkit.Recv(t, got, "the first event"); ev.Type != "session.created" {
		t.Fatalf("first event %+v", ev)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	path, decisions := "", []string{}
	for _, s := range g.Trace(resp.Header.Get("X-Request-Id")) {
		for _, a := range s.Attributes {
			switch string(a.Key) {
			case telemetry.AttrFailoverPath:
				path = a.Value.AsString()
			case telemetry.AttrGateDecision:
				decisions = append(decisions, a.Value.AsString())
			}
		}
	}
	if path != "eu:gate_timeout -> us:ok" || !slices.Contains(decisions, telemetry.GateFailoverTimeout) {
		t.Fatalf("path %q, gate decisions %v", path, decisions)
	}
}

// lateL4 is a clock whose header-timeout timer, once fired, runs its
// function only when release closes: the moment between L4 firing and
// its cancel reaching the hop, held open.
type lateL4 struct {
	*clockwork.FakeClock
	d       time.Duration
	release chan struct{}
}

func (c *lateL4) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	if d == c.d {
		return c.FakeClock.AfterFunc(d, func() { <-c.release; f() })
	}
	return c.FakeClock.AfterFunc(d, f)
}

// session.created arriving as L4 fires, before its cancel reached the
// hop: the hop timed out (header_timeout, the next entry opens the
// session), not "ok" with no session opened.
func TestRealtimeHeaderTimeoutRace(t *testing.T) {
	fc := clockwork.NewFakeClockAt(gwtest.Epoch)
	clock := &lateL4{FakeClock: fc, d: 10 * time.Second, release: make(chan struct{})}
	t.Cleanup(func() { close(clock.release) })
	g := gwtest.NewWith(t, gwtest.Options{Clock: clock, UpstreamClock: fc},
		strings.NewReplacer(`"A"`, `"gpt-realtime|rt-slow=10s"`, `"B"`, `"gpt-realtime"`).Replace(rtConfig), "eu", "us")
	c, resp := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	got := make(chan rtEvent, 1)
	go func() {
		ev, _ := readEvent(t, c)
		got <- ev
	}()
	ctx, cancel := context.WithTimeout(t.Context(), testkit.Bound)
	defer cancel()
	// max_session, L4 and the fake's wait before session.created.
	if err := fc.BlockUntilContext(ctx, 3); err != nil {
		t.Fatal(err)
	}
	fc.Advance(10 * time.Second) // L4 fires (held) as eu sends session.created
	if ev := testkit.Recv(t, got, "the first event"); ev.Type != "session.created" {
		t.Fatalf("first event %+v", ev)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	path := ""
	for _, s := range g.Trace(resp.Header.Get("X-Request-Id")) {
		for _, a := range s.Attributes {
			if string(a.Key) == telemetry.AttrFailoverPath {
				path = a.Value.AsString()
			}
		}
	}
	if path != "eu:header_timeout -> us:ok" {
		t.Fatalf("path %q", path)
	}
}

// A realtime session never crosses to fallback_models: its 101, sent
// before the walk, named the requested model, so a session opened on
// another would be a silent substitution. The client hears why instead.
func TestRealtimeNoFallbackModels(t *testing.T) {
	yml := strings.ReplaceAll(rtConfig, "    operations: [realtime]\n", "    operations: [realtime]\n    fallback_models: [voice2]\n") + `
  - name: voice2
    operations: [realtime]
    chain:
      - {channel: x, upstream_model: gpt-realtime}
`
	yml = strings.ReplaceAll(yml, "channels:\n", "channels:\n  - {id: x, base_url: \"{{url:x}}\", api_key_env: CHANNEL_KEY}\n")
	g := gwtest.New(t, strings.NewReplacer(`"A"`, `"gpt-realtime|rt-refuse"`, `"B"`, `"gpt-realtime|rt-refuse"`).Replace(yml), "eu", "us", "x")
	c, resp := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	if resp.Header.Get("X-Hopgate-Model") != "voice" {
		t.Fatalf("X-Hopgate-Model %q", resp.Header.Get("X-Hopgate-Model"))
	}
	// hopgate's own error event has its event_id, as every server event
	// (openai-go's RealtimeErrorEvent requires one).
	if ev, err := readEvent(t, c); err != nil || ev.Type != "error" || ev.Error.Code != "all_channels_failed" || !strings.HasPrefix(ev.EventID, "event_") {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	if n := g.Attempts("x", "gpt-realtime"); n != 0 {
		t.Fatalf("the fallback model's channel got %d upgrades", n)
	}
}

// An upstream that ends a committed session on purpose (a close frame
// with 1000, as OpenAI does at its session limit) closes the client's
// session the same way: no interrupted error, and no breaker failure, so
// a wave of sessions reaching the provider's limit together cannot open
// the channel's breaker.
func TestRealtimeUpstreamEndsSession(t *testing.T) {
	g := newRealtime(t, "gpt-realtime|rt-end=1", "gpt-realtime")
	c, resp := dialRealtime(t, g, "voice", nil)
	defer c.CloseNow()
	if ev, _ := readEvent(t, c); ev.Type != "session.created" {
		t.Fatalf("first event %s", ev.Type)
	}
	sendEvent(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	sendEvent(t, c, `{"type":"response.create"}`) // the fake ends the session now
	if code, ev := closeOf(t, c); code != websocket.StatusNormalClosure || ev != "" {
		t.Fatalf("closed with %v after error event %q; want 1000 and none", code, ev)
	}
	testkit.Eventually(t, func() bool { return g.Engine.Sessions().Open()["voice"] == 0 }, "the session ended")
	if n := breakerFailures(g, "eu"); n != 0 {
		t.Fatalf("the breaker counted %d failures for a session the channel ended on purpose", n)
	}
	outcome, code := "", int64(-1)
	for _, sp := range g.Trace(resp.Header.Get("X-Request-Id")) {
		for _, kv := range sp.Attributes {
			switch kv.Key {
			case telemetry.AttrOutcome:
				if sp.Name == "dispatch voice" {
					outcome = kv.Value.AsString()
				}
			case telemetry.AttrRealtimeCloseCode:
				code = kv.Value.AsInt64()
			}
		}
	}
	if outcome != "ok" || code != 1000 {
		t.Fatalf("outcome %q, close code on the hop %d", outcome, code)
	}
}

// A session that opens as a half-open channel's trial answers the trial
// when it opens: a session lasts minutes, and held to its end the trial
// slot would keep every other request off the recovered channel. Its end
// still reaches the breaker (a drop would reopen it).
func TestRealtimeTrialAnsweredAtOpen(t *testing.T) {
	yml := strings.Replace(rtConfig, "region: eu-west-1}", "region: eu-west-1, breaker: {mode: count, window: 5m, failures: 1, cooldown: 60s}}", 1)
	g := gwtest.New(t, strings.NewReplacer(`"A"`, `"gpt-realtime"`, `"B"`, `"gpt-realtime"`).Replace(yml), "eu", "us")
	state := func() breaker.State {
		for _, br := range g.Engine.Breakers().All() {
			if s := br.Snapshot(); s.Name == "eu" {
				return s.State
			}
		}
		t.Fatal("no breaker for eu")
		return 0
	}
	c0, _ := dialRealtime(t, g, "voice", nil) // the breaker is made on first use
	if ev, _ := readEvent(t, c0); ev.Type != "session.created" {
		t.Fatalf("first session: %s", ev.Type)
	}
	c0.CloseNow()
	testkit.Eventually(t, func() bool { return g.Engine.Sessions().Open()["voice"] == 0 }, "the first session ended")
	for _, br := range g.Engine.Breakers().All() {
		if br.Name() == "eu" {
			tk, _ := br.Allow()
			br.Done(tk, breaker.Failure) // one failure opens it (failures: 1)
		}
	}
	if s := state(); s != breaker.Open {
		t.Fatalf("eu's breaker is %v after its failure", s)
	}
	g.Clock.Advance(61 * time.Second) // past the cooldown: the next session is eu's trial
	c1, _ := dialRealtime(t, g, "voice", nil)
	defer c1.CloseNow()
	if ev, _ := readEvent(t, c1); ev.Type != "session.created" {
		t.Fatalf("trial session: %s", ev.Type)
	}
	testkit.Eventually(t, func() bool { return state() == breaker.Closed }, "the trial session's open closes eu's breaker")
	before := g.Attempts("eu", "gpt-realtime")
	c2, _ := dialRealtime(t, g, "voice", nil)
	defer c2.CloseNow()
	if ev, _ := readEvent(t, c2); ev.Type != "session.created" {
		t.Fatalf("second session: %s", ev.Type)
	}
	if n := g.Attempts("eu", "gpt-realtime"); n != before+1 {
		t.Fatalf("the session beside the open trial was not sent to eu (%d upgrades, %d before)", n, before)
	}
}

// newKeepalive is rtConfig pinging a committed session's silent sides
// every 15s and waiting 7s for a pong: a timeout no other timer of these
// sessions has, so the count of its arms says which side is being pinged
// (the client first, then the channel).
func newKeepalive(t *testing.T, a, b, keys string) *gwtest.Gateway {
	t.Helper()
	yml := strings.ReplaceAll(rtConfig, "{hold_bytes: 4096}", "{hold_bytes: 4096, "+keys+"}")
	return gwtest.New(t, strings.NewReplacer(`"A"`, `"`+a+`"`, `"B"`, `"`+b+`"`).Replace(yml), "eu", "us")
}

// arms counts the timers the gateway armed for d.
func arms(g *gwtest.Gateway, d time.Duration) int {
	k := 0
	for _, a := range g.Armed.Armed() {
		if a == d {
			k++
		}
	}
	return k
}

func waitArms(t *testing.T, g *gwtest.Gateway, d time.Duration, n int) {
	t.Helper()
	testkit.Eventually(t, func() bool { return arms(g, d) >= n }, fmt.Sprintf("%d timers armed for %s", n, d))
}

// liveClient reads a client's session on a goroutine of its own, as a
// live client's socket does (answering pings meanwhile): the types of its
// events, then the close code and the last error event's code.
type liveClient struct {
	types chan string
	end   chan closeResult
}

type closeResult struct {
	code          websocket.StatusCode
	last, message string // the last error event's code and message
}

func readLive(c *websocket.Conn) liveClient {
	l := liveClient{types: make(chan string, 64), end: make(chan closeResult, 1)}
	go func() {
		last, message := "", ""
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				l.end <- closeResult{websocket.CloseStatus(err), last, message}
				return
			}
			var ev rtEvent
			_ = json.Unmarshal(b, &ev)
			if ev.Type == "error" {
				last, message = ev.Error.Code, ev.Error.Message
			}
			select {
			case l.types <- ev.Type:
			default:
			}
		}
	}()
	return l
}

// rtHopSpan returns the attributes and status of the trace's realtime hop.
func rtHopSpan(t *testing.T, g *gwtest.Gateway, resp *http.Response) (attrs map[string]string, status string) {
	t.Helper()
	attrs = map[string]string{}
	for _, s := range g.Trace(resp.Header.Get("X-Request-Id")) {
		if strings.HasPrefix(s.Name, "realtime ") {
			for _, a := range s.Attributes {
				attrs[string(a.Key)] = a.Value.Emit()
			}
			return attrs, s.Status.Description
		}
	}
	t.Fatal("no realtime hop span")
	return nil, ""
}

// The keepalive (realtime.ping_interval, ping_timeout): a committed
// session's side that answers neither a ping nor with an event is gone,
// whether its host died or the network dropped its packets (no FIN ever
// comes), and the session does not stay half-open until TCP gives up.
func TestRealtimeKeepalive(t *testing.T) {
	const keys = "ping_interval: 15s, ping_timeout: 7s"
	open := func(t *testing.T, g *gwtest.Gateway) (*websocket.Conn, *http.Response) {
		t.Helper()
		c, resp := dialRealtime(t, g, "voice", nil)
		t.Cleanup(func() { _ = c.CloseNow() })
		if ev, _ := readEvent(t, c); ev.Type != "session.created" {
			t.Fatalf("first event %s", ev.Type)
		}
		return c, resp
	}

	// The channel stops reading: no pong. The client (which answers) gets
	// upstream_session_interrupted and 1011, the channel's breaker counts
	// it, and the hop's status says why.
	t.Run("channel gone", func(t *testing.T) {
		g := newKeepalive(t, "gpt-realtime|rt-hang=1", "gpt-realtime", keys)
		c, resp := open(t, g)
		sendEvent(t, c, `{"type":"response.create"}`)
		readUntil(t, c, "response.done") // the channel's last answer: it hangs now
		l := readLive(c)
		waitArms(t, g, 15*time.Second, 1)
		g.Clock.Advance(15 * time.Second) // both spoke since the commit: no ping
		waitArms(t, g, 15*time.Second, 2)
		if n := arms(g, 7*time.Second); n != 0 {
			t.Fatalf("%d pings after a keepalive both sides had spoken before", n)
		}
		g.Clock.Advance(15 * time.Second)
		waitArms(t, g, 7*time.Second, 2) // the client answered; the channel's ping waits
		g.Clock.Advance(7 * time.Second)
		r := testkit.Recv(t, l.end, "the session's end")
		if r.code != websocket.StatusInternalError || r.last != "upstream_session_interrupted" {
			t.Fatalf("closed %v after %q, want 1011 after upstream_session_interrupted", r.code, r.last)
		}
		if !strings.Contains(r.message, "ping_timeout") {
			t.Errorf("the error event's message %q does not say why", r.message)
		}
		testkit.Eventually(t, func() bool { return breakerFailures(g, "eu") == 1 }, "the breaker counted the silent channel")
		if attrs, _ := rtHopSpan(t, g, resp); attrs[telemetry.AttrHopOutcome] == telemetry.HopOK {
			t.Errorf("hop span outcome %q for a silent channel", attrs[telemetry.AttrHopOutcome])
		}
	})

	// The client stops reading (its socket answers no ping): the session
	// ends as a dropped client's, its channel closed and not blamed.
	t.Run("client gone", func(t *testing.T) {
		g := newKeepalive(t, "gpt-realtime", "gpt-realtime", keys)
		ended := g.SpanEnds("dispatch voice")
		_, resp := open(t, g)
		waitArms(t, g, 15*time.Second, 1)
		g.Clock.Advance(15 * time.Second)
		waitArms(t, g, 7*time.Second, 1)
		g.Clock.Advance(7 * time.Second)
		testkit.Recv(t, ended, "the session's end")
		if attrs, _ := rtHopSpan(t, g, resp); attrs[telemetry.AttrHopOutcome] != telemetry.HopOK || attrs[telemetry.AttrRealtimeCloseCode] != "1006" {
			t.Fatalf("hop outcome %q close code %q, want ok and 1006", attrs[telemetry.AttrHopOutcome], attrs[telemetry.AttrRealtimeCloseCode])
		}
		if n := breakerFailures(g, "eu"); n != 0 {
			t.Fatalf("the channel's breaker counted %d failures for a client that left", n)
		}
	})

	// Both sides answer: the session goes on, and the next keepalive is
	// armed once both pongs came. A side that sent an event since the
	// last keepalive is not pinged at all.
	t.Run("both answer", func(t *testing.T) {
		g := newKeepalive(t, "gpt-realtime", "gpt-realtime", keys)
		c, _ := open(t, g)
		l := readLive(c)
		waitArms(t, g, 15*time.Second, 1)
		g.Clock.Advance(15 * time.Second)
		waitArms(t, g, 15*time.Second, 2) // both pongs came: the next keepalive is armed
		if n := arms(g, 7*time.Second); n != 2 {
			t.Fatalf("%d pings waited for, want 2 (the client, the channel)", n)
		}
		g.Clock.Advance(7 * time.Second) // no ping is waiting for this
		sendEvent(t, c, `{"type":"session.update","session":{}}`)
		for typ := ""; typ != "session.updated"; {
			typ = testkit.Recv(t, l.types, "session.updated")
		}
		g.Clock.Advance(8 * time.Second) // the second keepalive: both sides spoke since the first
		waitArms(t, g, 15*time.Second, 3)
		if n := arms(g, 7*time.Second); n != 2 {
			t.Fatalf("%d pings waited for, want still 2: sides that spoke are not pinged", n)
		}
		select {
		case r := <-l.end:
			t.Fatalf("the session ended (%v after %q) though both sides answered", r.code, r.last)
		default:
		}
		if n := breakerFailures(g, "eu"); n != 0 {
			t.Fatalf("breaker failures %d", n)
		}
	})

	// ping_interval: 0s turns the keepalive off; the default arms it at
	// the commit (before the session's first answer to the client).
	t.Run("off", func(t *testing.T) {
		for _, tc := range []struct {
			keys string
			want int
		}{{"ping_interval: 0s", 0}, {"ping_timeout: 7s", 1}} {
			g := newKeepalive(t, "gpt-realtime", "gpt-realtime", tc.keys)
			c, _ := open(t, g)
			sendEvent(t, c, `{"type":"session.update","session":{}}`)
			readUntil(t, c, "session.updated")
			if n := arms(g, 15*time.Second); n != tc.want {
				t.Errorf("%s: keepalive armed %d times, want %d", tc.keys, n, tc.want)
			}
		}
	})
}

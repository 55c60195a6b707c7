package dispatch

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/testkit"
)

// panickyWriter panics on the first write of the answer's bytes.
type panickyWriter struct{ *httptest.ResponseRecorder }

func (p panickyWriter) Write([]byte) (int, error) { panic("a bug while writing the stream") }

// contentFrame is a chat chunk the gate commits on.
const contentFrame = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok\"}}]}\n\n"

// startStream starts a streamed chat request to model m, whose one
// channel is served by upstream, answered on w; Start has returned.
func startStream(t *testing.T, w http.ResponseWriter, upstream http.HandlerFunc) *Answer {
	t.Helper()
	return startStreamOn(t, New(Options{}), nil, w, upstream)
}

// startStreamOn is startStream on engine e; before (if set) runs on the
// parsed config before the request starts.
func startStreamOn(t *testing.T, e *Engine, before func(*config.Config), w http.ResponseWriter, upstream http.HandlerFunc) *Answer {
	t.Helper()
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	cfg, err := config.Parse([]byte(`
auth: {mode: none}
channels:
  - {id: a, base_url: "`+up.URL+`/v1"}
models:
  - name: m
    chain: [{channel: a, upstream_model: m}]
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	f, err := reqbody.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(cfg)
	}
	return e.Start(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil),
		&Request{Config: cfg, Model: cfg.Model("m"), Operation: config.OpChat, Path: "/chat/completions", Body: body, Fields: f, Stream: true})
}

// A panic while an open stream is passed on (Pump) still releases what the
// walk would have on its way out: the upstream request is cancelled and its
// response closed, and the call stops. End must not run after it.
func TestPumpPanicReleasesTheStream(t *testing.T) {
	upstreamDone := make(chan struct{})
	a := startStream(t, panickyWriter{httptest.NewRecorder()}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(contentFrame))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the gateway let go of the request
		close(upstreamDone)
	})
	if !a.open {
		t.Fatal("the stream was not committed")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Pump did not pass the writer's panic on")
			}
		}()
		a.Pump()
	}()
	testkit.Recv(t, upstreamDone, "the upstream request's end after the panic")
	if a.c.stop.err() == nil {
		t.Error("the call is still live after the panic")
	}
	defer func() {
		if recover() == nil {
			t.Error("End after a panic in Pump did not refuse")
		}
	}()
	a.End()
}

// A panic in Pump hands the stream's breaker ticket back (excluded): when
// the stream was a half-open channel's trial, the channel is tried again
// at once, not skipped by every request until the trial timeout.
func TestPumpPanicAnswersTheTrial(t *testing.T) {
	clock := clockwork.NewFakeClock()
	e := New(Options{Clock: clock})
	var br *breaker.Breaker
	a := startStreamOn(t, e, func(cfg *config.Config) {
		br = e.breakerFor(cfg.Channel("a"))
		br.RetryAfter(time.Second) // open: its cooldown is the provider's
		clock.Advance(time.Second) // half-open: one trial
	}, panickyWriter{httptest.NewRecorder()}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(contentFrame))
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	if !a.open || !br.Snapshot().TrialInFlight {
		t.Fatalf("want the committed stream to be the channel's trial: open %v, %+v", a.open, br.Snapshot())
	}
	func() {
		defer func() { _ = recover() }()
		a.Pump()
	}()
	if s := br.Snapshot(); s.TrialInFlight {
		t.Errorf("after the panic the trial slot is still taken: %+v", s)
	}
	if _, ok := br.Allow(); !ok {
		t.Error("the channel refuses its next trial after a panicked one")
	}
}

// End on an open stream whose caller did not call Pump passes the stream
// on first: the client gets the whole answer, and the Result says so.
func TestEndWithoutPumpPassesTheStreamOn(t *testing.T) {
	w := httptest.NewRecorder()
	a := startStream(t, w, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(contentFrame))
		_, _ = w.Write([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	})
	res := a.End()
	if res.Outcome != OutcomeOK || w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "tok") || !strings.HasSuffix(w.Body.String(), "data: [DONE]\n\n") {
		t.Fatalf("outcome %q, status %d, body %q", res.Outcome, w.Code, w.Body)
	}
}

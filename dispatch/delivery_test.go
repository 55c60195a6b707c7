package dispatch_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/translate"
)

// Why: the delivery rule (docs/tenants.md): a charge is final only once
// the answer's last byte was handed to the socket. The hook a wallet marks
// its hold with runs once, just before that last write, with the usage
// the charge will be made of: for a buffered body before any of it is
// written (and the body is flushed before Serve returns, so the charge
// made after it follows the hand-over); for a stream before its closing
// frame; for a stream cut after commit before its in-band error frame
// (the cut stream's last write, charged for what it delivered).
func TestDeliveringRunsOnceBeforeTheLastWrite(t *testing.T) {
	for _, tc := range []struct {
		name, model, body string
		called            bool
		before            func(written string) bool // what was written when the hook ran
	}{
		{"buffered", "m|tokens=5", `{"model":"m",` + prompt + `}`, true,
			func(w string) bool { return w == "" }},
		{"stream", "m|tokens=6", `{"model":"m","stream":true,` + prompt + `}`, true,
			func(w string) bool { return strings.Contains(w, "tok") && !strings.Contains(w, "[DONE]") }},
		{"stream without [DONE] upstream", "m|tokens=6|no-done", `{"model":"m","stream":true,` + prompt + `}`, true,
			func(w string) bool { return strings.Contains(w, "tok") && !strings.Contains(w, "[DONE]") }},
		{"stream cut after commit", "m|cut=3", `{"model":"m","stream":true,` + prompt + `}`, true,
			func(w string) bool { return strings.Contains(w, "tok") && !strings.Contains(w, `"error"`) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var written string
			var usage dispatch.Usage
			var delivered dispatch.Delivered
			res, rec, _, _ := serveWith(t, config.OpChat, tc.model, tc.body, func(req *dispatch.Request, rec *httptest.ResponseRecorder) {
				req.Delivering = func(u dispatch.Usage, d dispatch.Delivered) {
					calls++
					written, usage, delivered = rec.Body.String(), u, d
				}
			})
			if !tc.called {
				if calls != 0 {
					t.Fatalf("Delivering called %d times for an answer that did not complete", calls)
				}
				return
			}
			if calls != 1 {
				t.Fatalf("Delivering called %d times, want once", calls)
			}
			if !tc.before(written) {
				t.Fatalf("written when Delivering ran: %q", written)
			}
			if !rec.Flushed {
				t.Fatal("the answer was not flushed before Serve returned")
			}
			if tc.name == "stream cut after commit" {
				if usage.Present || delivered != res.Delivered || delivered.TextBytes == 0 ||
					!strings.Contains(rec.Body.String(), translate.CodeStreamInterrupted) {
					t.Fatalf("Delivering saw %+v %+v, the Result has %+v %+v (a cut stream is charged for what it delivered)",
						usage, delivered, res.Usage, res.Delivered)
				}
				return
			}
			if usage != res.Usage || !usage.Present {
				t.Fatalf("Delivering saw usage %+v, the Result has %+v", usage, res.Usage)
			}
		})
	}
}

// Why: a binary body (audio) cannot tell its last write from the others
// (its end is seen after its last bytes went out), and it is charged the
// same however much of it went out (no usage comes with it): the hook
// runs before its first byte, so a kill anywhere in the body leaves the
// charge in doubt, not silently released — complete or cut alike.
func TestDeliveringBeforeABinaryBody(t *testing.T) {
	const speech = `{"model":"m","input":"Hello there","voice":"alloy"}`
	for _, tc := range []struct{ name, model string }{
		{"complete", "tts"},
		{"cut", "tts|short-body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var written string
			var usage dispatch.Usage
			var delivered dispatch.Delivered
			res, rec, _, _ := serveWith(t, config.OpAudioSpeech, tc.model, speech, func(req *dispatch.Request, rec *httptest.ResponseRecorder) {
				req.Delivering = func(u dispatch.Usage, d dispatch.Delivered) {
					calls++
					written, usage, delivered = rec.Body.String(), u, d
				}
			})
			if calls != 1 || written != "" || rec.Body.Len() == 0 {
				t.Fatalf("Delivering called %d times, with %q written (of %d bytes); want once, before the body", calls, written, rec.Body.Len())
			}
			if usage != res.Usage || delivered != res.Delivered || usage.Present {
				t.Fatalf("Delivering saw %+v %+v, the Result has %+v %+v", usage, delivered, res.Usage, res.Delivered)
			}
			if cut := res.Outcome == dispatch.OutcomeInterrupted; cut != (tc.name == "cut") {
				t.Fatalf("outcome %s for the %s body", res.Outcome, tc.name)
			}
		})
	}
}

// Why: a stream cut after commit and completed by the next channel
// (mid_stream: resume) ends with the continuation's closing frame, and
// that is its last write: the delivery rule marks it just before, as for
// any completed stream. The continuation wrote it unmarked, so a process
// killed before the charge left a completed answer neither charged nor
// in doubt (the hold expired).
func TestDeliveringBeforeAResumedStreamsLastWrite(t *testing.T) {
	for _, prefill := range []bool{true, false} {
		pf := ""
		if prefill {
			pf = ", prefill: true"
		}
		calls, written := 0, ""
		res, rec, _, _ := serveYAML(t, config.OpChat, func(urlA, urlB string) string {
			return `auth: {mode: none}
channels:
  - {id: a, base_url: "` + urlA + `/v1"}
  - {id: b, base_url: "` + urlB + `/v1"` + pf + `}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: "m|tokens=60|cut=40", price: {input: 1, output: 2}}
      - {channel: b, upstream_model: "m|tokens=60", price: {input: 3, output: 4}}
    policy: {mid_stream: resume}
`
		}, `{"model":"m","stream":true,`+prompt+`}`, func(req *dispatch.Request, rec *httptest.ResponseRecorder) {
			req.Delivering = func(dispatch.Usage, dispatch.Delivered) { calls++; written = rec.Body.String() }
		})
		if !strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") || res.Outcome != dispatch.OutcomeFailoverOK {
			t.Fatalf("prefill %v: not resumed: outcome %s, body %q", prefill, res.Outcome, rec.Body.String())
		}
		if calls != 1 || strings.Contains(written, "[DONE]") || !strings.Contains(written, "tok") {
			t.Errorf("prefill %v: Delivering ran %d times, after %q was written; want once, before the closing frame", prefill, calls, written)
		}
	}
}

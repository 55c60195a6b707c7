package dispatch_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
)

// Why: the delivery rule (docs/tenants.md): a charge is final only once
// the answer's last byte was handed to the socket. The hook a wallet marks
// its hold with runs once, just before that last write, with the usage
// the charge will be made of: for a buffered body before any of it is
// written (and the body is flushed before Serve returns, so the charge
// made after it follows the hand-over); for a stream before its closing
// frame. A stream that does not complete never calls it: there is no
// last byte of a complete answer to be in doubt about.
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
		{"stream cut after commit", "m|cut=3", `{"model":"m","stream":true,` + prompt + `}`, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var written string
			var usage dispatch.Usage
			res, rec, _, _ := serveWith(t, config.OpChat, tc.model, tc.body, func(req *dispatch.Request, rec *httptest.ResponseRecorder) {
				req.Delivering = func(u dispatch.Usage, _ dispatch.Delivered) {
					calls++
					written, usage = rec.Body.String(), u
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
			if usage != res.Usage || !usage.Present {
				t.Fatalf("Delivering saw usage %+v, the Result has %+v", usage, res.Usage)
			}
		})
	}
}

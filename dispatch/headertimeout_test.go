package dispatch

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/testkit"
)

// arrivingTransport answers every request with a 200 whose body records
// its Close; before it answers it advances the clock by advance (the
// header wait that long) and then fails with err when set.
type arrivingTransport struct {
	clock   *clockwork.FakeClock
	advance time.Duration
	err     error
	closed  bool
}

func (t *arrivingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	if t.advance > 0 {
		t.clock.Advance(t.advance)
	}
	if t.err != nil {
		return nil, t.err
	}
	return &http.Response{StatusCode: http.StatusOK, Body: &closeRecorder{ReadCloser: io.NopCloser(strings.NewReader("{}")), closed: &t.closed}}, nil
}

type closeRecorder struct {
	io.ReadCloser
	closed *bool
}

func (c *closeRecorder) Close() error { *c.closed = true; return c.ReadCloser.Close() }

// TestHeaderTimeoutRace pins L4's three endings (DESIGN.md §2), the race
// branch included: headers that arrive as the timer fires come with a
// context the timer already cancelled, so their body is unreadable; the
// hop is a header timeout (retryable, next channel), its response closed,
// never an answer that dies on its first read.
func TestHeaderTimeoutRace(t *testing.T) {
	const timeout = 10 * time.Second
	refused := errors.New("connection refused")
	cases := []struct {
		name    string
		advance time.Duration // how long the headers take, on the fake clock
		err     error         // the transport's own failure
		wantErr error
		// wantResp: the response is passed on (open); fired: the timer
		// cancelled the hop.
		wantResp, fired bool
	}{
		// Why: the ordinary case, headers in time: nothing is cancelled.
		{name: "headers in time", advance: timeout - time.Nanosecond, wantResp: true},
		// Why: the race branch; the timer fired while the transport
		// returned the headers: a timeout, and the response is closed.
		{name: "headers as the timer fires", advance: timeout, wantErr: errHeaderTimeout, fired: true},
		// Why: long past the timer, same branch: Stop reports it fired.
		{name: "headers after the timer", advance: 2 * timeout, wantErr: errHeaderTimeout, fired: true},
		// Why: a transport failure after the timer fired is passed on as
		// it is: the hop's context cause tells the walk it was L4.
		{name: "failure after the timer", advance: timeout, err: refused, wantErr: refused, fired: true},
		// Why: a failure in time is the transport's, with no cancel.
		{name: "failure in time", err: refused, wantErr: refused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := clockwork.NewFakeClock()
			next := &arrivingTransport{clock: clock, advance: tc.advance, err: tc.err}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			l := headerTimeout{next: next, clock: clock, timeout: timeout, cancel: cancel}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/v1/chat/completions", nil)
			resp, err := l.RoundTrip(req)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if (resp != nil) != tc.wantResp {
				t.Fatalf("response %v, want one: %v", resp, tc.wantResp)
			}
			if tc.wantResp && next.closed {
				t.Fatal("a response in time was closed")
			}
			if tc.err == nil && !tc.wantResp && !next.closed {
				t.Fatal("the response that raced the timer was not closed")
			}
			if tc.fired {
				// The timer's function runs on its own goroutine.
				testkit.Recv(t, ctx.Done(), "the timer's cancel of the hop")
				if cause := context.Cause(ctx); cause != errHeaderTimeout {
					t.Fatalf("hop context cause %v, want errHeaderTimeout", cause)
				}
			} else if ctx.Err() != nil {
				t.Fatalf("the hop was cancelled without a timeout: %v", context.Cause(ctx))
			}
		})
	}
}

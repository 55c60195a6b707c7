package dispatch

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jonboulle/clockwork"
)

// errHeaderTimeout is the cause of a hop context ended by L4.
var errHeaderTimeout = errors.New("header timeout: no response headers in time")

// headerTimeout is L4 (DESIGN.md §2): it bounds the wait from sending a
// hop to its response headers, with the model's header_timeout (240 s by
// default: image and video generation legitimately take minutes). It never
// bounds the body: a long stream is not a hung upstream (the stream idle
// timeout is about bodies).
//
// It is an http.RoundTripper around the engine's transport, built for one
// hop (a value inside the attempt, so it costs no allocation): when the
// timer fires it cancels the hop's context with errHeaderTimeout, which the
// transport turns into an error, and the hop fails as retryable.
type headerTimeout struct {
	next    http.RoundTripper
	clock   clockwork.Clock
	timeout time.Duration
	cancel  context.CancelCauseFunc // the hop's
}

var _ http.RoundTripper = (*headerTimeout)(nil)

// RoundTrip sends req and waits for its headers at most l.timeout.
func (l *headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	t := l.clock.AfterFunc(l.timeout, func() { l.cancel(errHeaderTimeout) })
	resp, err := l.next.RoundTrip(req)
	if !t.Stop() && err == nil {
		// The timer fired as the headers arrived: the hop's context is
		// already cancelled, so the body is unreadable. It timed out.
		_ = resp.Body.Close()
		return nil, errHeaderTimeout
	}
	return resp, err
}

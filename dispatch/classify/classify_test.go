package classify

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
)

// TestStatus pins DESIGN.md §3 row by row: a change here changes failover.
func TestStatus(t *testing.T) {
	cases := map[int]Class{
		200: Success, 204: Success,
		408: Retryable, 409: Retryable, 425: Retryable, 429: Retryable,
		500: Retryable, 502: Retryable, 503: Retryable, 504: Retryable, 529: Retryable,
		401: Retryable, 402: Retryable, 403: Retryable,
		400: Final, 404: Final, 413: Final, 422: Final,
		405: Final, 418: Final, // unlisted client errors stay the client's
		501: Retryable, 599: Retryable, // unlisted server errors are the server's
		302: Retryable, 301: Retryable, // redirects are not followed: the hop failed
	}
	for status, want := range cases {
		if got := Status(status); got != want {
			t.Errorf("Status(%d) = %v, want %v", status, got, want)
		}
	}
}

// TestError separates the client's cancellation (no breaker effect) from
// network failures and hop timeouts (breaker failures).
func TestError(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	deadline, cancelD := context.WithCancelCause(context.Background())
	cancelD(errors.New("chain deadline"))

	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want Class
	}{
		{"nil error is success", context.Background(), nil, Success},
		{"reset is retryable", context.Background(), syscall.ECONNRESET, Retryable},
		{"refused is retryable", context.Background(), syscall.ECONNREFUSED, Retryable},
		{"body cut is retryable", context.Background(), io.ErrUnexpectedEOF, Retryable},
		{"client cancel is canceled", canceled, context.Canceled, Canceled},
		{"our own deadline cause is not a client cancel", deadline, context.Canceled, Retryable},
	}
	for _, c := range cases {
		if got := Error(c.ctx, c.err); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// BenchmarkStatus proves classification on the request path is allocation-free.
func BenchmarkStatus(b *testing.B) {
	b.ReportAllocs()
	var n int
	for i := 0; b.Loop(); i++ {
		if Status(400+i%200) == Retryable {
			n++
		}
	}
	_ = n
}

// BenchmarkError proves transport-error classification is allocation-free.
func BenchmarkError(b *testing.B) {
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		_ = Error(ctx, io.ErrUnexpectedEOF)
	}
}

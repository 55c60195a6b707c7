package dispatch

import (
	"context"
	"testing"
)

// Why: the walk's stop keeps its first cause, as the call's own context
// did. A client that left before the chain deadline fired makes a
// canceled request, not a timed-out one (a deadline outcome would count
// it as chain_exceeded and keep its trace as interesting); a hop started
// after a stop is cancelled at once, with that cause.
func TestWalkStopFirstCauseWins(t *testing.T) {
	client, leave := context.WithCancel(context.Background())
	defer leave()
	s := walkStop{client: client}
	if err := s.err(); err != nil {
		t.Fatalf("err %v before anything stopped the walk", err)
	}
	leave()
	s.cancel(errChainDeadline)
	if err := s.err(); err != context.Canceled {
		t.Fatalf("client left, then the deadline: err %v, want the client's", err)
	}
	hop, stop := context.WithCancelCause(context.Background())
	s.watch(stop)
	if cause := context.Cause(hop); cause != context.Canceled {
		t.Fatalf("hop watched after the stop: cause %v, want the client's", cause)
	}

	s = walkStop{client: context.Background()}
	s.cancel(errChainDeadline)
	s.cancel(context.Canceled) // the call's end
	if err := s.err(); err != errChainDeadline {
		t.Fatalf("deadline, then the call's end: err %v, want the deadline", err)
	}
	hop, stop = context.WithCancelCause(context.Background())
	s.watch(stop)
	if cause := context.Cause(hop); cause != errChainDeadline {
		t.Fatalf("hop watched after the deadline: cause %v, want the deadline", cause)
	}
}

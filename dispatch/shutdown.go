package dispatch

import (
	"context"
	"errors"
	"sync"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/telemetry"
)

// errShuttingDown is the cause of a committed stream's hop context ended
// because the process is shutting down (Engine.CutStreams).
var errShuttingDown = errors.New("the gateway is shutting down")

// openStreams is the engine's set of committed streams being passed on
// (Answer.Pump), so a shutdown can end each one in band instead of
// letting the closed connection cut it mid-frame (DESIGN.md §2, after
// commit). An intrusive list under one lock: two short critical sections
// per stream, no allocation.
type openStreams struct {
	mu      sync.Mutex
	head    *Answer
	n       int
	closing bool
	idle    chan struct{} // closed when n drops to 0 while CutStreams waits
}

// add lists s; once the engine is closing, s is cut at once.
func (o *openStreams) add(s *Answer) {
	o.mu.Lock()
	s.listed = true
	s.next = o.head
	if o.head != nil {
		o.head.prev = s
	}
	o.head = s
	o.n++
	closing := o.closing
	o.mu.Unlock()
	if closing {
		s.a.cancel(errShuttingDown)
	}
}

// remove unlists s (a no-op when it is not listed).
func (o *openStreams) remove(s *Answer) {
	o.mu.Lock()
	if s.listed {
		if s.prev != nil {
			s.prev.next = s.next
		} else {
			o.head = s.next
		}
		if s.next != nil {
			s.next.prev = s.prev
		}
		s.prev, s.next, s.listed = nil, nil, false
		o.n--
		if o.n == 0 && o.idle != nil {
			close(o.idle)
			o.idle = nil
		}
	}
	o.mu.Unlock()
}

// CutStreams ends every committed stream still being passed on, and every
// stream committed from now on, with the in-band error frame
// `gateway_shutting_down` in its client's dialect and no end marker: the
// gateway is going away (a drain that ran out of time), so the client
// must not read a truncated answer as a complete one, nor the request log
// as a client that left. Nothing counts on a breaker. It waits until
// those streams' handlers have written their frame, or ctx ends, and
// returns how many streams it cut.
func (e *Engine) CutStreams(ctx context.Context) int {
	o := &e.streams
	o.mu.Lock()
	o.closing = true
	var cut []*Answer
	for s := o.head; s != nil; s = s.next {
		cut = append(cut, s)
	}
	var idle chan struct{}
	if o.n > 0 {
		if o.idle == nil {
			o.idle = make(chan struct{})
		}
		idle = o.idle
	}
	o.mu.Unlock()
	for _, s := range cut {
		// Outside the lock: the cancel wakes the stream's read, and
		// the stream unlists itself.
		s.a.cancel(errShuttingDown)
	}
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
		}
	}
	return len(cut)
}

// shutdownCut ends a committed stream whose hop the shutdown cut (nil
// when it did not): the gateway's doing, not the channel's (no breaker or
// early-warning effect, no stream-interrupted count against the channel)
// nor the client's (not canceled, not 499). finish writes the frame. A
// function of this file's concept, not one more method of the hop.
func shutdownCut(a *attempt) *classify.HopError {
	if context.Cause(a.ctx) != errShuttingDown {
		return nil
	}
	a.span.StreamEnd(telemetry.StreamShutdown, "")
	return &classify.HopError{Kind: classify.KindShutdown, Status: a.status, Cause: errShuttingDown}
}

// shutdownFrame is the in-band error that ends a stream the shutdown cut,
// in req's client dialect (Anthropic's `event: error`; Responses' own
// error event, from the codec k that numbers them; else the OpenAI
// `data: {"error":…}` frame that chat and completions clients read as a
// stream error), with no end marker.
func shutdownFrame(req *Request, requestID string, k codec) []byte {
	e := apierror.ShuttingDown("the gateway is shutting down; the answer above is incomplete: retry the request")
	if in, ok := k.(interrupter); ok {
		return in.interrupt(e.Code, e.Message)
	}
	if req.Events == MessagesEvents {
		b := make([]byte, 0, 256)
		b = append(b, "event: error\ndata: "...)
		b = append(b, e.AnthropicJSON(requestID)...)
		return append(b, "\n\n"...)
	}
	return apierror.StreamFrame(requestID, e)
}

// isClosing reports that CutStreams ran: a stream cut now is not resumed
// on another channel (the process is going away under it).
func (o *openStreams) isClosing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closing
}

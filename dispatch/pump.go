package dispatch

import (
	"net/http"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/sse"
)

// errStreamOpen is what a hop of the walk returns once its stream is
// committed: the walk unwinds without ending the hop, and Start returns
// with the stream open (Answer.open). It never reaches a breaker, a span
// or a client.
var errStreamOpen = &classify.HopError{Kind: classify.KindCut}

// Answer is a request that Start walked: answered, or with a committed
// stream still open (the hop's response, its frame reader and its context).
// The caller calls Pump, which passes an open stream on (and does nothing
// otherwise), then End, which returns the Result; both from the goroutine
// that called Start.
type Answer struct {
	c    *call
	r    *http.Request
	open bool // a committed stream waits for Pump
	a    *attempt
	rd   frameSource
	resp *http.Response
	// The hop's breaker ticket: its result is recorded by End.
	br     *breaker.Breaker
	ticket breaker.Ticket

	// The commit, written by Pump first.
	head    head
	headers gatewayHeaders
	held    [][]byte
	hold    overload.Hold // the held frames against the buffer budget
	// decisive is the decisive frame, nil when the gate committed on its
	// timer; Pump writes it and lets go of it.
	decisive *frameItem
	// begun: the gate's timer committed during a read and wrote the
	// commit (gateHold.fire); afterFrame (or afterErr) is what that read
	// brought, the stream's first frame after the commit.
	begun      bool
	afterFrame sse.Frame
	afterErr   error

	idle idleTimer
	// err is how the stream ended (nil: complete); done: Pump returned
	// normally, ended: End ran.
	err         *classify.HopError
	done, ended bool

	// The engine's list of streams being passed on (shutdown.go).
	prev, next *Answer
	listed     bool
}

// Pump writes the commit of an open stream and passes its frames to the
// client until the stream ends: complete, cut, or its client gone. The
// caller's goroutine parks here, in the read of the next frame, for as
// long as the upstream is silent, so Pump's own frame holds nothing but
// the loop, and everything done per frame or once runs in calls of their
// own (docs/performance.md, memory per idle stream).
//
//go:noinline
func (s *Answer) Pump() {
	if !s.open || s.done {
		return
	}
	defer s.unwind()
	if s.begin() {
		s.done = true
		return
	}
	s.c.rw.joinRuns(s.rd) // the reader is the pump's now (runs.go)
	for {
		read := !s.rd.Buffered() // the next frame needs a read
		if read && s.c.rw.pending {
			// Nothing more has arrived: the client gets what we have now.
			if s.flush() {
				break
			}
		}
		f, err := s.rd.Next()
		if s.step(&f, err, read) {
			break
		}
	}
	s.c.rw.stopRuns()
	s.done = true
}

// begin writes the commit (status line, headers, held frames, the
// decisive frame) and arms the idle timer, or passes on the frame read
// when the gate's timer wrote the commit. True when that already ended
// the stream.
//
//go:noinline
func (s *Answer) begin() bool {
	if s.begun {
		f, err := s.afterFrame, s.afterErr
		s.afterFrame, s.afterErr = sse.Frame{}, nil
		return s.step(&f, err, true)
	}
	timed := s.decisive == nil
	s.start()
	if timed {
		// Committed on the gate's timer: what was held goes now. After a
		// decisive frame the loop flushes the commit as soon as no
		// further frame is buffered, so a burst sends it with the frames
		// after it in one write.
		_ = s.c.rw.flush()
	}
	return false
}

// start lists the stream for a shutdown, writes the commit without
// flushing it and arms the idle timer: from Pump, or from the gate's timer
// while the hop's goroutine waits in a read (gateHold.fire).
func (s *Answer) start() {
	s.c.e.streams.add(s) // a shutdown now ends it in band
	s.c.rw.writeHead(s.head, &s.headers)
	s.writeCommit()
	s.idle.arm(s.a)
}

// writeCommit writes the held frames and the decisive one without
// flushing (begin or the loop flushes them): a client already gone is
// seen by the first flush.
func (s *Answer) writeCommit() {
	c := s.c
	held, decisive := s.held, s.decisive
	s.held, s.decisive = nil, nil
	defer s.hold.Release()
	c.rw.pending = true // the status line and headers at least
	for _, f := range held {
		if c.rw.write(f) != nil {
			return
		}
	}
	if decisive != nil {
		s.a.note(decisive)
		if len(decisive.raw) > 0 {
			_ = c.rw.write(decisive.raw)
		}
	}
}

// flush sends what was written; true when the client is gone (the stream
// ended).
//
//go:noinline
func (s *Answer) flush() bool {
	if s.c.rw.flush() != nil {
		s.err = s.a.clientGone()
		return true
	}
	return false
}

// step passes on what the last read returned (frame f or err; read: it
// came from a read, not from the buffer); true when the stream ended.
//
//go:noinline
func (s *Answer) step(f *sse.Frame, err error, read bool) bool {
	var it frameItem
	readItem(&it, s.a.codec, f, err, &s.idle, read)
	herr, end := s.a.afterCommit(&it)
	s.err = herr
	return end
}

// unwind releases the stream when Pump did not return normally (a panic
// in it): the hop's context and response, its breaker ticket (excluded: a
// half-open channel's trial slot must not stay taken), the call's timer
// and its walk's stop, as the walk's deferred calls did before Start
// returned with the stream open. End must not be called then.
func (s *Answer) unwind() {
	if s.done {
		return
	}
	s.ended = true
	if s.br != nil {
		s.br.Done(s.ticket, breaker.Excluded)
	}
	s.c.rw.join, s.c.rw.run = nil, nil
	s.c.e.streams.remove(s)
	s.idle.stop()
	s.hold.Release()
	_ = s.resp.Body.Close()
	s.a.cancel(nil)
	s.c.release()
}

// End finishes the request after Pump (which it calls first if its
// caller did not) and returns its Result: for a stream, the hop (its
// span, metrics, step, the resume or in-band error of a cut stream, its
// breaker ticket); then the call (its span, the request counter, the
// failover log).
//
//go:noinline
func (s *Answer) End() Result {
	if s.ended {
		panic("dispatch: Answer.End called twice, or after a panic in Pump")
	}
	if s.open && !s.done {
		s.Pump() // its caller did not: the stream is passed on here
	}
	s.ended = true
	c := s.c
	defer c.release()
	if s.open {
		s.endStream()
	}
	return c.end(s.r)
}

// endStream ends the hop of a stream Pump passed on, as the walk ends a
// hop: its response drained (complete) and closed, then its record and
// its breaker ticket.
func (s *Answer) endStream() {
	c, a := s.c, s.a
	s.idle.stop()
	s.hold.Release()
	if s.err == nil {
		drain(s.resp, a.cancel)
	}
	_ = s.resp.Body.Close()
	a.cancel(nil)
	releaseFrames(s.rd) // the pump wrote its last run
	s.rd = nil
	err := a.finish(s.err)
	c.e.streams.remove(s) // after its last frame: CutStreams waits for it
	c.recordBreaker(s.br, s.ticket, err)
}

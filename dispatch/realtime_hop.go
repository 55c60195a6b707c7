package dispatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/coder/websocket"
	"go.opentelemetry.io/otel/propagation"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/rtevent"
	"github.com/hopgate/hopgate/telemetry"
)

// rtAttempt is a realtime hop: the attempt, and what its session
// relayed (the hop span's session attributes).
type rtAttempt struct {
	*attempt
	in, out, responses int64
}

// session runs a realtime hop: the dial and the first server event under
// L4, the session gate (upstream events held until session.created, the
// client's held until then too), the commit, then the relay both ways
// until one side ends. nil: a committed session ended without the
// channel's fault (the client closed, or realtime.max_session).
func (a *rtAttempt) session() *classify.HopError {
	c, s := a.c, a.c.rt
	defer a.cancel(nil)
	if a.upErr != nil {
		return a.transportError(fmt.Errorf("%w: %w", provider.ErrCredential, a.upErr))
	}
	defer func() {
		a.span.Session(telemetry.SessionEnd{EventsIn: a.in, EventsOut: a.out, Responses: a.responses, CloseCode: int(max(s.closeCode, 0))})
	}()
	gate := a.span.AwaitSession(a.ctx)
	gateStart := c.e.clock.Now()
	decide := func(d string, frames, n int) {
		gate.Decided(d, frames, n)
		c.e.tel.Metrics.GateDecision(a.ctx, a.ch.ID, a.m.Name, d, c.e.clock.Since(gateStart))
	}
	// L4: the upgrade and the first server event within header_timeout.
	l4 := c.e.clock.AfterFunc(a.m.Policy.HeaderTimeout, func() { a.cancel(errHeaderTimeout) })
	defer l4.Stop()
	up, herr := a.dial()
	if herr != nil {
		if herr.Kind == classify.KindHeaderTimeout {
			a.headerTimedOut()
			decide(telemetry.GateFailoverTimeout, 0, 0)
		} else {
			decide(telemetry.GateDiscardRefused, 0, 0)
		}
		return herr
	}
	up.SetReadLimit(int64(c.e.maxFrame))
	upIn := make(chan rtMsg)
	var upErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(upIn)
		for {
			typ, b, err := up.Read(a.ctx)
			if err != nil {
				upErr = err
				return
			}
			select {
			case upIn <- rtMsg{typ, b}:
			case <-a.ctx.Done():
				upErr = context.Cause(a.ctx)
				return
			}
		}
	}()
	// closeUp closes the upstream's session with a close frame: its
	// reader keeps reading (into a drain) until the upstream answers it.
	var drained chan struct{}
	closeUp := func() {
		drained = make(chan struct{})
		go func() {
			defer close(drained)
			for range upIn {
			}
		}()
		_ = up.Close(websocket.StatusNormalClosure, "")
	}
	defer func() {
		_ = up.CloseNow()
		if drained == nil {
			for range upIn {
			}
		} else {
			<-drained
		}
		wg.Wait()
	}()

	// The session gate.
	var held []rtMsg
	heldN, first := 0, true
	for !s.committed {
		select {
		case m, ok := <-upIn:
			if first {
				first = false
				if !l4.Stop() || a.ctx.Err() != nil {
					return a.gateEnded(decide, len(held), heldN)
				}
			}
			if !ok {
				if err := a.gateEnded(decide, len(held), heldN); err != nil {
					return err
				}
				decide(telemetry.GateDiscardClose, len(held), heldN)
				return &classify.HopError{Kind: classify.KindStreamEOF, Cause: fmt.Errorf("the upstream closed before session.created: %w", upErr)}
			}
			ev, err := rtevent.Parse(m.b)
			if m.typ != websocket.MessageText || err != nil {
				decide(telemetry.GateDiscardError, len(held), heldN)
				return &classify.HopError{Kind: classify.KindBadJSON, Cause: errors.New("the upstream's first events are not JSON text events")}
			}
			switch ev.Type {
			case rtevent.TypeSessionCreated:
				if !c.rw.claim() {
					decide(telemetry.GateDiscardError, len(held), heldN)
					return c.lostCommit()
				}
				decide(telemetry.GateCommitSession, len(held)+1, heldN+len(m.b))
				if err := a.commitSession(up, append(held, m)); err != nil {
					return err
				}
				if s.clientEnd {
					closeUp() // the client left as the session opened
					return nil
				}
			case rtevent.TypeError:
				decide(telemetry.GateDiscardError, len(held)+1, heldN+len(m.b))
				return &classify.HopError{Kind: classify.KindStreamError, Cause: fmt.Errorf("error event before session.created: %s: %s", ev.ErrorCode, ev.ErrorMessage)}
			default:
				if heldN+len(m.b) > c.e.maxHeld {
					decide(telemetry.GateDiscardError, len(held), heldN)
					return &classify.HopError{Kind: classify.KindGateOverflow}
				}
				held = append(held, m)
				heldN += len(m.b)
			}
		case m, ok := <-s.in:
			if err := a.clientBeforeCommit(m, ok); err != nil {
				decide(telemetry.GateDiscardClose, len(held), heldN)
				return err
			}
		case <-s.stop.Done():
			s.fail(rtError{Type: "server_error", Code: CodeSessionExpired, Message: "realtime.max_session reached before a channel opened the session"}, websocket.StatusNormalClosure)
			c.stop.cancel(errMaxSession)
			decide(telemetry.GateDiscardClose, len(held), heldN)
			return &classify.HopError{Kind: classify.KindCanceled, Cause: errMaxSession}
		case <-a.ctx.Done():
			return a.gateEnded(decide, len(held), heldN)
		}
	}

	// After commit: frames pass through as they came, both ways.
	for {
		select {
		case m, ok := <-upIn:
			if !ok {
				return a.interrupted(upErr)
			}
			if s.client.Write(s.writes, m.typ, m.b) != nil {
				s.clientEnd = true
				closeUp()
				return nil
			}
			a.out++
			if m.typ == websocket.MessageText && bytes.Contains(m.b, responseDoneMarker) {
				a.responseDone(m.b)
			}
		case m, ok := <-s.in:
			if !ok {
				s.clientEnd, s.closeCode = true, websocket.CloseStatus(s.inErr)
				closeUp()
				return nil
			}
			if m.typ != websocket.MessageText {
				s.fail(binaryEventError(), websocket.StatusUnsupportedData)
				closeUp()
				return nil
			}
			if err := up.Write(a.ctx, m.typ, m.b); err != nil {
				return a.interrupted(err)
			}
			a.in++
		case <-s.stop.Done():
			s.fail(rtError{Type: "server_error", Code: CodeSessionExpired, Message: "the session reached realtime.max_session"}, websocket.StatusNormalClosure)
			closeUp()
			return nil
		case <-a.ctx.Done():
			return a.interrupted(context.Cause(a.ctx))
		}
	}
}

// responseDoneMarker is in every response.done event; no base64 audio
// delta can contain it (quotes), so other events are never parsed.
var responseDoneMarker = []byte(`"response.done"`)

// commitSession sends the held upstream events (session.created last) to
// the client, then replays the client's held events, in order, to the
// committed channel.
func (a *rtAttempt) commitSession(up *websocket.Conn, held []rtMsg) *classify.HopError {
	c, s := a.c, a.c.rt
	s.committed = true
	c.rw.answered, c.rw.written = true, true
	c.rw.outcome = c.okOutcome()
	for _, m := range held {
		if s.client.Write(s.writes, m.typ, m.b) != nil {
			s.clientEnd = true
			return nil
		}
		a.out++
	}
	for _, m := range s.held {
		if err := up.Write(a.ctx, m.typ, m.b); err != nil {
			return a.interrupted(err)
		}
		a.in++
	}
	s.release()
	return nil
}

// clientBeforeCommit holds a client event sent before the commit, or ends
// the walk: the client left, sent a binary message, or sent more than the
// hold may keep.
func (a *rtAttempt) clientBeforeCommit(m rtMsg, ok bool) *classify.HopError {
	c, s := a.c, a.c.rt
	var why error
	switch {
	case !ok:
		s.clientEnd, s.closeCode = true, websocket.CloseStatus(s.inErr)
		why = errClientGone
	case m.typ != websocket.MessageText:
		s.fail(binaryEventError(), websocket.StatusUnsupportedData)
		c.rw.outcome = telemetry.OutcomeBadRequest
		why = errBinaryFromUser
	default:
		err := s.holdEvent(m)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errHoldBudget):
			s.fail(rtError{Type: "server_error", Code: CodeEngineOverloaded, Message: "hopgate cannot hold the session's events now (buffer budget): retry shortly"}, closeTryAgainLater)
			c.rw.outcome = telemetry.OutcomeShed
		default:
			s.fail(rtError{Type: "invalid_request_error", Code: CodeHoldExceeded,
				Message: fmt.Sprintf("the events sent before session.created exceed realtime.hold_bytes (%d bytes): wait for session.created", s.maxN)}, websocket.StatusPolicyViolation)
			c.rw.outcome = telemetry.OutcomeBadRequest
		}
		why = err
	}
	c.stop.cancel(why)
	return &classify.HopError{Kind: classify.KindCanceled, Cause: why}
}

func binaryEventError() rtError {
	return rtError{Type: "invalid_request_error", Code: CodeBinaryEvent, Message: "realtime events are JSON text messages; a binary message was sent"}
}

// gateEnded classifies a gate whose hop context ended (nil: it has not):
// L4, the chain deadline, or the walk's end.
func (a *rtAttempt) gateEnded(decide func(string, int, int), frames, n int) *classify.HopError {
	if a.ctx.Err() == nil {
		return nil
	}
	switch cause := context.Cause(a.ctx); cause {
	case errHeaderTimeout:
		a.headerTimedOut()
		decide(telemetry.GateFailoverTimeout, frames, n)
		return &classify.HopError{Kind: classify.KindHeaderTimeout,
			Cause: fmt.Errorf("no session.created within the header timeout of %s", a.m.Policy.HeaderTimeout)}
	case errChainDeadline:
		decide(telemetry.GateDiscardClose, frames, n)
		return &classify.HopError{Kind: classify.KindDeadline, Cause: cause}
	default:
		decide(telemetry.GateDiscardClose, frames, n)
		return &classify.HopError{Kind: classify.KindCanceled, Cause: cause}
	}
}

// headerTimedOut counts L4 firing on this hop.
func (a *rtAttempt) headerTimedOut() {
	a.c.e.tel.Metrics.HeaderTimeout(a.ctx, a.ch.ID, a.m.Name)
}

// interrupted ends a committed session the upstream dropped or failed:
// the client gets the upstream_session_interrupted error event and close
// 1011, never a silent half-open socket; the breaker counts it.
func (a *rtAttempt) interrupted(err error) *classify.HopError {
	c, s := a.c, a.c.rt
	why := "the upstream session ended"
	if err != nil {
		why = err.Error()
	}
	s.fail(rtError{Type: "server_error", Code: CodeSessionInterrupted,
		Message: "channel " + a.ch.ID + ": " + why + "; the session cannot continue: open a new one"}, websocket.StatusInternalError)
	c.rw.outcome = OutcomeInterrupted
	c.e.tel.Metrics.StreamInterrupted(a.ctx, a.ch.ID, a.m.Name)
	a.span.StreamEnd(telemetry.StreamInterrupted, "")
	return &classify.HopError{Kind: classify.KindCut, Cause: err}
}

// responseDone counts a response.done, sums its usage on the hop and
// passes it to the ledger (Request.OnResponseDone).
func (a *rtAttempt) responseDone(b []byte) {
	ev, err := rtevent.Parse(b)
	if err != nil || ev.Type != rtevent.TypeResponseDone {
		return
	}
	a.responses++
	if ev.Usage {
		a.usage.InputTokens += ev.InputTokens
		a.usage.OutputTokens += ev.OutputTokens
		a.usage.Present = true
	}
	if f := a.c.rt.onDone; f != nil {
		f(ResponseDone{ResponseID: ev.ResponseID, InputTokens: ev.InputTokens, OutputTokens: ev.OutputTokens, Usage: ev.Usage})
	}
}

// dial opens the upstream's WebSocket with the channel's credential and
// traceparent; a refused upgrade is classified by its status like any
// upstream answer (its Retry-After and body included).
func (a *rtAttempt) dial() (*websocket.Conn, *classify.HopError) {
	c := a.c
	hdr := http.Header{}
	if err := a.up.SetRealtimeHeaders(a.ctx, hdr, c.e.userAgent); err != nil {
		return nil, a.transportError(err)
	}
	c.e.tel.Propagator.Inject(a.ctx, propagation.HeaderCarrier(hdr))
	conn, resp, err := websocket.Dial(a.ctx, a.up.RealtimeURL(a.entry.UpstreamModel), &websocket.DialOptions{
		HTTPClient: c.e.realtimeClient(), HTTPHeader: hdr,
	})
	if err == nil {
		a.status = http.StatusSwitchingProtocols
		a.ew.Headers()
		return conn, nil
	}
	if resp == nil || resp.StatusCode == http.StatusSwitchingProtocols || a.ctx.Err() != nil {
		return nil, a.transportError(err)
	}
	a.status = resp.StatusCode
	a.ew.Headers()
	if classify.Status(resp.StatusCode) == classify.Success {
		// An answer that is not an upgrade (a proxy's page, a plain API).
		return nil, &classify.HopError{Kind: classify.KindConnect, Status: resp.StatusCode, Cause: err}
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	resp.ContentLength = -1 // websocket.Dial kept at most 1 KiB of it
	return nil, a.upstreamError(resp)
}

// realtimeClient dials upstream WebSockets: the engine's transport, over
// HTTP/1.1 (an upgrade has no HTTP/2 form here), never following a
// redirect (the channel credential must not go to another host).
func (e *Engine) realtimeClient() *http.Client {
	e.rtOnce.Do(func() {
		tr := e.transport
		if t, ok := tr.(*http.Transport); ok {
			t = t.Clone()
			t.ForceAttemptHTTP2 = false
			t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			tr = t
		}
		e.rtClient = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	})
	return e.rtClient
}

package dispatch

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/otel/propagation"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/rtevent"
	"github.com/hopgate/hopgate/telemetry"
)

// rtAttempt is a realtime hop: the attempt, its channel's socket once
// dialed, and what its session relayed (the hop span's session
// attributes; the client's events are the session's count).
type rtAttempt struct {
	*attempt
	conn           *websocket.Conn
	out, responses int64
	relayErr       *classify.HopError // how the relay ended (nil: not the channel's fault)
	// rd is the relay's last read of the channel (Realtime.Relay), for
	// forward: kept here, not passed, so the parked frame stays small.
	rd struct {
		typ websocket.MessageType
		r   io.Reader
		err error
	}
}

// session runs a realtime hop up to its commit: the dial and the first
// server event under L4, then the session gate (upstream events held
// until session.created; the client's reader holds the client's until
// then too). At the commit the walk returns (errStreamOpen) and
// ServeRealtime relays the session (Realtime.Relay); any other end of the gate is
// the hop's error, as for any hop.
func (a *rtAttempt) session() *classify.HopError {
	if a.upErr != nil {
		a.cancel(nil)
		return a.transportError(fmt.Errorf("%w: %w", provider.ErrCredential, a.upErr))
	}
	err := a.gate()
	if err == errStreamOpen {
		return err
	}
	if a.conn != nil {
		_ = a.conn.CloseNow()
	}
	a.cancel(nil)
	a.recordSession()
	return err
}

// gate dials the channel and holds its events until one is decisive:
// session.created commits (errStreamOpen), an error event or a close
// discards the hop.
func (a *rtAttempt) gate() *classify.HopError {
	c := a.c
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
		if err := a.sessionStopped(decide, 0, 0); err != nil {
			return err // the client or max_session ended the session during the dial
		}
		if herr.Kind == classify.KindHeaderTimeout {
			a.headerTimedOut()
			decide(telemetry.GateFailoverTimeout, 0, 0)
		} else {
			decide(telemetry.GateDiscardRefused, 0, 0)
		}
		return herr
	}
	a.conn = up
	up.SetReadLimit(int64(c.e.maxFrame))
	var held []rtMsg
	heldN, first := 0, true
	// The gate's timeout (stream_gate.timeout), armed at the first event
	// when it is not decisive, as a stream's is at its headers: nothing
	// decisive in time fails the hop over. Never on_timeout: commit — a
	// session exists only once the channel said session.created, and
	// ending the read to commit would close its socket.
	var gt clockwork.Timer
	defer func() {
		if gt != nil {
			gt.Stop()
		}
	}()
	for {
		// Cancelling the hop (L4, the gate's timeout, the walk's stop:
		// the chain deadline, the client, max_session) ends this read and
		// closes the socket.
		typ, b, err := up.Read(a.ctx)
		if first {
			first = false
			if !l4.Stop() {
				// L4 fired, and its cancel may not have run yet: the
				// hop timed out whatever this read returned (cancelling
				// again is a no-op when it did, or when something else
				// ended the hop first).
				a.cancel(errHeaderTimeout)
			}
			if a.ctx.Err() != nil {
				return a.gateEnded(decide, len(held), heldN)
			}
			if t := a.m.Policy.GateTimeout; t > 0 && err == nil {
				gt = c.e.clock.AfterFunc(t, func() { a.cancel(errGateTimeout) })
			}
		}
		if err != nil {
			if err := a.gateEnded(decide, len(held), heldN); err != nil {
				return err
			}
			decide(telemetry.GateDiscardClose, len(held), heldN)
			return &classify.HopError{Kind: classify.KindStreamEOF, Cause: fmt.Errorf("the upstream closed before session.created: %w", err)}
		}
		m := rtMsg{typ, b}
		ev, perr := rtevent.Parse(m.b)
		if m.typ != websocket.MessageText || perr != nil {
			decide(telemetry.GateDiscardError, len(held), heldN)
			return &classify.HopError{Kind: classify.KindBadJSON, Cause: errors.New("the upstream's first events are not JSON text events")}
		}
		switch ev.Type {
		case rtevent.TypeSessionCreated:
			if gt != nil && !gt.Stop() {
				// The gate's timeout fired as session.created came: the
				// hop failed over (its cancel would end the session).
				a.cancel(errGateTimeout)
				return a.gateEnded(decide, len(held), heldN)
			}
			if !c.rw.claim() {
				decide(telemetry.GateDiscardError, len(held), heldN)
				return c.lostCommit()
			}
			decide(telemetry.GateCommitSession, len(held)+1, heldN+len(m.b))
			return a.commitSession(append(held, m))
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
	}
}

// recordSession records what the hop's session relayed on its span.
func (a *rtAttempt) recordSession() {
	s := a.c.rt
	s.mu.Lock()
	code := s.closeCode
	s.mu.Unlock()
	a.span.Session(telemetry.SessionEnd{EventsIn: s.in.Load(), EventsOut: a.out, Responses: a.responses, CloseCode: int(max(code, 0))})
}

// forward handles the relay's last read of the committed channel (a.rd): the event to the client, or the end of the session
// (true; relayErr says why). The message is read into a recycled buffer
// here, after the read parked, so an idle session holds none.
//
//go:noinline
func (a *rtAttempt) forward() bool {
	typ, rd, err := a.rd.typ, a.rd.r, a.rd.err
	a.rd.r, a.rd.err = nil, nil
	if err != nil {
		a.relayErr = a.relayEnded(err)
		return true
	}
	a.c.rt.upReads.Add(1)
	buf := getRTBuf()
	defer putRTBuf(buf)
	if *buf, err = readMessage((*buf)[:0], rd); err != nil {
		a.relayErr = a.relayEnded(err)
		return true
	}
	return !a.toClient(typ, *buf)
}

// endRelay ends the hop of a relayed session as the walk would have: its
// session attributes, span, metrics, step and breaker ticket.
//
//go:noinline
func (a *rtAttempt) endRelay() {
	c := a.c
	_ = a.conn.CloseNow()
	a.cancel(nil)
	a.recordSession()
	a.end(a.relayErr)
	c.recordBreaker(c.ans.br, c.ans.ticket, a.relayErr)
}

// readMessage reads one message into b.
func readMessage(b []byte, rd io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// The relay reads an event into a body chunk (chunkpool.go) and gives it
// back once passed on; one grown past chunkSize by a larger event is left
// to the collector (the free list keeps chunks of chunkSize only).
func getRTBuf() *[]byte { return getChunk() }

func putRTBuf(b *[]byte) {
	if cap(*b) == chunkSize {
		putChunk(b)
	}
}

// toClient passes a response.done to the ledger and writes one channel
// event to the client (false: the client is gone, and the channel is
// closed). The charge comes first: the channel billed the response
// whether or not its last event reaches a client that just hung up.
func (a *rtAttempt) toClient(typ websocket.MessageType, b []byte) bool {
	s := a.c.rt
	if typ == websocket.MessageText && bytes.Contains(b, responseDoneMarker) {
		a.responseDone(b)
	}
	s.relayWriting.Store(true)
	err := s.client.Write(s.writes, typ, b)
	s.relayWriting.Store(false)
	if err != nil {
		s.mu.Lock()
		s.clientEnd = true
		s.mu.Unlock()
		s.closeUp(errClientGone)
		return false
	}
	a.out++
	return true
}

// relayEnded classifies the end of the channel's read after commit: the
// session closed it itself (the client, max_session, a binary client
// message: nil), or the channel dropped or failed (interrupted).
func (a *rtAttempt) relayEnded(err error) *classify.HopError {
	s := a.c.rt
	s.mu.Lock()
	why := s.why
	s.upClosing = true // nobody closes it now: endRelay does
	s.mu.Unlock()
	if why == nil && a.ctx.Err() != nil {
		// The walk's stop reached the hop as it committed (the client
		// left, max_session).
		if cause := context.Cause(a.ctx); isSessionStop(cause) {
			why = cause
		} else {
			err = cause
		}
	}
	switch {
	case why == errMaxSession:
		s.fail(rtError{Type: "server_error", Code: CodeSessionExpired, Message: "the session reached realtime.max_session"}, websocket.StatusNormalClosure)
		return nil
	case why != nil:
		return nil // said by the reader: the client's close code, or its error event
	case websocket.CloseStatus(err) == websocket.StatusNormalClosure:
		// The channel ended the session on purpose (a close frame with
		// 1000: OpenAI's at its session limit): the client gets the same
		// close, and the channel did not fail.
		s.mu.Lock()
		s.closeCode = websocket.StatusNormalClosure
		s.mu.Unlock()
		return nil
	}
	return a.interrupted(err)
}

// isSessionStop reports that why is the session's own end (the client,
// max_session, the hold), not the channel's.
func isSessionStop(why error) bool {
	switch why {
	case errClientGone, errClientSilent, errBinaryFromUser, errMaxSession, errHoldExceeded, errHoldBudget, errShuttingDown:
		return true
	}
	return false
}

// responseDoneMarker is in every response.done event; no base64 audio
// delta can contain it (quotes), so other events are never parsed.
var responseDoneMarker = []byte(`"response.done"`)

// commitSession sends the held upstream events (session.created last) to
// the client, then replays the client's held events, in order, to the
// committed channel, and hands the client's reader the channel: from then
// on it writes the client's events there itself. errStreamOpen: the walk
// returns and ServeRealtime relays the session.
func (a *rtAttempt) commitSession(held []rtMsg) *classify.HopError {
	c, s := a.c, a.c.rt
	s.committed = true
	s.hop = a
	// From here on a single event may carry a whole item's audio either
	// way (conversation.item.create, conversation.item.retrieved): the
	// hold's and the stream frame's bounds were the gate's. The limit is
	// the framing's, read as each message begins: both readers' next
	// message has it.
	a.conn.SetReadLimit(s.maxEvent)
	s.client.SetReadLimit(s.maxEvent)
	c.rw.answered, c.rw.written = true, true
	c.rw.outcome = c.okOutcome()
	for _, m := range held {
		if s.client.Write(s.writes, m.typ, m.b) != nil {
			s.mu.Lock()
			s.clientEnd = true
			s.mu.Unlock()
			break
		}
		a.out++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Under mu: the reader's next event waits for the replay.
	s.up, s.upCtx, s.live = a.conn, a.ctx, true
	for _, m := range s.held {
		if a.conn.Write(a.ctx, m.typ, m.b) != nil {
			break // the channel's socket is closed: the relay's read says why
		}
		s.in.Add(1)
	}
	s.release()
	if s.pingEvery > 0 && !s.clientEnd {
		s.pingHop = a
		s.pingTimer = c.e.clock.AfterFunc(s.pingEvery, func() { s.keepalive(c) })
	}
	if s.clientEnd && !s.upClosing {
		// The client left as the session opened: close the channel.
		s.upClosing, s.why = true, errClientGone
		up := a.conn
		s.mu.Unlock()
		_ = up.Close(websocket.StatusNormalClosure, "")
		s.mu.Lock()
	}
	return errStreamOpen
}

func binaryEventError() rtError {
	return rtError{Type: "invalid_request_error", Code: CodeBinaryEvent, Message: "realtime events are JSON text messages; a binary message was sent"}
}

// gateEnded classifies a gate whose hop context ended (nil: it has not):
// L4, the chain deadline, the session's own end, or the walk's end.
func (a *rtAttempt) gateEnded(decide func(string, int, int), frames, n int) *classify.HopError {
	if a.ctx.Err() == nil {
		return nil
	}
	if err := a.sessionStopped(decide, frames, n); err != nil {
		return err
	}
	switch cause := context.Cause(a.ctx); cause {
	case errHeaderTimeout:
		a.headerTimedOut()
		decide(telemetry.GateFailoverTimeout, frames, n)
		return &classify.HopError{Kind: classify.KindHeaderTimeout,
			Cause: fmt.Errorf("no session.created within the header timeout of %s", a.m.Policy.HeaderTimeout)}
	case errGateTimeout:
		decide(telemetry.GateFailoverTimeout, frames, n)
		return &classify.HopError{Kind: classify.KindGateTimeout,
			Cause: fmt.Errorf("no session.created within the gate timeout of %s after the first event", a.m.Policy.GateTimeout)}
	case errChainDeadline:
		decide(telemetry.GateDiscardClose, frames, n)
		return &classify.HopError{Kind: classify.KindDeadline, Cause: cause}
	default:
		decide(telemetry.GateDiscardClose, frames, n)
		return &classify.HopError{Kind: classify.KindCanceled, Cause: cause}
	}
}

// sessionStopped is the gate's end when the session itself stopped the
// walk before a channel committed (nil: it did not): the client left or
// broke a rule (its reader said how, readClient), or max_session fired.
func (a *rtAttempt) sessionStopped(decide func(string, int, int), frames, n int) *classify.HopError {
	if a.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(a.ctx)
	if !isSessionStop(cause) {
		return nil
	}
	if cause == errMaxSession {
		a.c.rt.fail(rtError{Type: "server_error", Code: CodeSessionExpired, Message: "realtime.max_session reached before a channel opened the session"}, websocket.StatusNormalClosure)
	}
	decide(telemetry.GateDiscardClose, frames, n)
	return &classify.HopError{Kind: classify.KindCanceled, Cause: cause}
}

// errGateTimeout ends a realtime hop whose first events held nothing
// decisive within the model's stream_gate.timeout.
var errGateTimeout = errors.New("gate timeout: no session.created in time")

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

package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/telemetry"
)

// A realtime session (DESIGN.md §15) is a request whose answer is a
// WebSocket: the client is upgraded first (so the events it sends while
// the walk runs can be held), then the same walk, breakers, responder and
// span recorder as every request open the session on the first healthy
// channel. Each hop is an attempt whose run is session (realtime_hop.go):
// dial, the session gate, then the relay until the session ends.

// Why a session stops before either side closed.
var (
	errMaxSession     = errors.New("realtime.max_session reached")
	errClientGone     = errors.New("the realtime client closed the session")
	errHoldExceeded   = errors.New("client events before session.created exceed realtime.hold_bytes")
	errHoldBudget     = errors.New("the buffer budget cannot hold the client's events before session.created")
	errBinaryFromUser = errors.New("a realtime client sent a binary message (events are JSON text)")
	errClientSilent   = errors.New("the realtime client answered neither a ping nor with an event within realtime.ping_timeout")
)

// Close codes of the client's session beyond websocket's.
const closeTryAgainLater websocket.StatusCode = 1013

// RealtimeSubprotocol is the subprotocol hopgate selects when a client
// offers it (browsers must get one they offered, or they fail the socket);
// the openai-insecure-api-key.<key> protocol is read for the key and
// never echoed.
const RealtimeSubprotocol = "realtime"

// ResponseDone is one response.done of a committed session: what a wallet
// charges, keyed by the response id.
type ResponseDone struct {
	ResponseID                string
	InputTokens, OutputTokens int64
	Usage                     bool
}

// rtMsg is one WebSocket message, relayed as it came.
type rtMsg struct {
	typ websocket.MessageType
	b   []byte
}

// session is the client side of a realtime request, across the walk: the
// client's socket and its reader, the client events held until a channel
// commits (in order, on the buffer budget), the committed channel's
// socket, and why it stopped.
//
// A session is two goroutines, as a bare relay is: the handler's (the
// walk, then the committed channel's events to the client, from
// ServeRealtime's own frame) and the client's reader (readClient: its
// events held before the commit, written to the committed channel after
// it). What the reader shares with the handler is under mu.
type session struct {
	client *websocket.Conn
	maxN   int64
	// maxEvent is the largest event either side may send once the
	// session committed (realtime.max_event_bytes).
	maxEvent int64

	mu    sync.Mutex
	held  []rtMsg
	heldN int64
	hold  overload.Hold
	// live: the held events were replayed to up, the committed
	// channel's socket, and the reader writes the client's events there
	// itself (upCtx bounds its writes).
	live  bool
	up    *websocket.Conn
	upCtx context.Context
	// why the session closed up itself (errClientGone, errBinaryFromUser,
	// errMaxSession; nil: it has not), and whether anyone closes it now.
	why       error
	upClosing bool
	over      bool                 // end began: the reader records nothing more
	clientEnd bool                 // the client closed, or its socket failed
	tooBig    bool                 // ... on an event above the framing's read limit (1009)
	closeCode websocket.StatusCode // the code the session ended with (-1: none)
	failure   *rtError             // the error event the session ends with (nil: none)

	// hop is the committed hop: the walk returns at the commit and the
	// caller of StartRealtime relays it (Realtime.Relay) from its frame.
	hop *rtAttempt
	// in counts the client events relayed to the committed channel.
	in atomic.Int64
	// writes bounds the relay's writes to the client: cancelled finalWrite
	// after max_session, so a write in progress when max_session fires
	// finishes (coder/websocket closes the socket, close frame and all,
	// when a write's context ends mid-write) while one blocked on a client
	// that does not read still ends.
	writes    context.Context
	endWrites context.CancelFunc
	maxTimer  clockwork.Timer
	committed bool
	onDone    func(ResponseDone)
	opened    time.Time
	// readers: the client's reader, a max_session closing the committed
	// channel (expire), and a keepalive's pings.
	readers sync.WaitGroup

	// The keepalive of a committed session (keepalive): a side silent
	// for pingEvery is pinged, and one that answers nothing within
	// pingWait is gone. upReads counts the channel's events read (in
	// counts the client's); relayWriting is set while the relay writes
	// to the client, when the channel's pong may wait unread behind that
	// write. seenIn and seenUp are the counts at the last keepalive (its
	// goroutine's only). pingHop and pingTimer are under mu.
	pingEvery, pingWait time.Duration
	pingHop             *rtAttempt
	pingTimer           clockwork.Timer
	upReads             atomic.Int64
	relayWriting        atomic.Bool
	seenIn, seenUp      int64
}

// sessionCount is one model's open sessions.
type sessionCount struct{ n atomic.Int64 }

// ServeRealtime upgrades the client to a WebSocket and walks the model's
// chain for a realtime session (DESIGN.md §15), then relays it until it
// ends: StartRealtime, Relay and End. The caller (package api) ran the
// front-door checks; an upgrade that fails has written its own HTTP error.
func (e *Engine) ServeRealtime(w http.ResponseWriter, r *http.Request, req *Request) Result {
	rt := e.StartRealtime(w, r, req)
	rt.Relay()
	return rt.End()
}

// Realtime is a realtime request that StartRealtime walked: a session
// open on a committed channel, or one the walk ended. The caller calls
// Relay, then End, from the goroutine that called StartRealtime.
type Realtime struct {
	c *call
	r *http.Request
}

// StartRealtime is ServeRealtime up to the commit: the upgrade and the
// walk. An idle session parks its goroutine for minutes in Relay, and the
// runtime halves a goroutine's stack only while less than a quarter of it
// is in use: returning from the walk first leaves only the caller's
// frames under the relay (docs/performance.md, memory per idle realtime
// session).
func (e *Engine) StartRealtime(w http.ResponseWriter, r *http.Request, req *Request) Realtime {
	c := e.begin(w, r, req)
	done := false
	defer func() {
		if !done {
			c.release() // a panic in the walk
		}
	}()
	if !acceptSession(c, r) {
		c.rw.outcome, c.rw.status = telemetry.OutcomeBadRequest, http.StatusBadRequest
		done = true
		return Realtime{c, r}
	}
	e.tel.Metrics.RealtimeOpened(r.Context(), req.Model.Name)
	e.live.opened(req.Model.Name, 1)
	e.live.add(c)
	c.run()
	done = true
	return Realtime{c, r}
}

// Relay passes a committed session both ways until one side ends it (it
// does nothing when no channel committed), then ends its hop. The
// caller's goroutine parks here, in the read of the channel's next event,
// for as long as the session is idle: this frame holds only the loop, the
// read's handling is a call of its own (rtAttempt.forward), and the
// client's events go to the channel from the session's reader.
//
//go:noinline
func (rt Realtime) Relay() {
	s := rt.c.rt
	if s == nil || s.hop == nil {
		return
	}
	a := s.hop
	s.hop = nil
	for {
		a.rd.typ, a.rd.r, a.rd.err = a.conn.Reader(a.ctx)
		if a.forward() {
			break
		}
	}
	a.endRelay()
}

// Request is the session's HTTP request (the upgrade).
func (rt Realtime) Request() *http.Request { return rt.r }

// End closes the client's session (an error event first when no channel
// opened it) and returns the request's Result.
//
//go:noinline
func (rt Realtime) End() Result {
	c, r := rt.c, rt.r
	defer c.release()
	s := c.rt
	if s == nil {
		return c.end(r) // the upgrade failed
	}
	if s.hop != nil {
		rt.Relay() // its caller did not
	}
	s.end(c)
	c.e.live.remove(c)
	res := c.end(r)
	model := c.req.Model.Name
	c.e.live.opened(model, -1)
	c.e.tel.Metrics.RealtimeClosed(r.Context(), model, res.Outcome, c.e.clock.Since(s.opened))
	return res
}

// acceptSession upgrades c's client, with hopgate's headers on the 101,
// and starts its reader; false when the upgrade failed (websocket.Accept
// answered).
func acceptSession(c *call, r *http.Request) bool {
	g := c.headers()
	c.rw.setGatewayHeaders(&g)
	conn, err := websocket.Accept(c.rw.w, r, &websocket.AcceptOptions{
		Subprotocols: []string{RealtimeSubprotocol},
		// Clients authenticate with a key, never a cookie: a page of
		// another origin gains nothing it did not already hold.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return false
	}
	rt := c.req.Config.Realtime
	s := &session{client: conn, maxN: rt.HoldBytes, maxEvent: rt.MaxEventBytes, hold: overload.NewHold(c.e.budget),
		closeCode: -1, onDone: c.req.OnResponseDone, opened: c.e.clock.Now()}
	if s.maxN <= 0 {
		s.maxN = config.DefaultRealtimeHoldBytes
	}
	if s.maxEvent <= 0 {
		s.maxEvent = config.DefaultRealtimeMaxEventBytes
	}
	maxSession := rt.MaxSession
	if maxSession <= 0 {
		maxSession = config.DefaultRealtimeMaxSession
	}
	s.pingEvery, s.pingWait = rt.PingInterval, rt.PingTimeout
	if s.pingWait <= 0 {
		s.pingWait = config.DefaultRealtimePingTimeout
	}
	s.writes, s.endWrites = context.WithCancel(context.Background())
	s.maxTimer = c.e.clock.AfterFunc(maxSession, func() {
		c.e.clock.AfterFunc(finalWrite, s.endWrites)
		s.expire(c)
	})
	// Before the commit, the largest event a client may send is the
	// hold's bound: a bigger one closes its socket with 1009 (message too
	// big). The commit raises it to max_event_bytes (commitSession).
	conn.SetReadLimit(min(s.maxN, s.maxEvent))
	// The status line is out, but the walk goes on (rw.written, which
	// ends it, is set at the commit).
	c.rw.status = http.StatusSwitchingProtocols
	c.rt = s
	s.readers.Add(1)
	go s.readClient(context.WithoutCancel(r.Context()), c)
	return true
}

// readClient reads the client's messages until its socket ends: held
// before the commit, written to the committed channel after it. Its
// context is never cancelled: closing the socket (end) stops it, so a
// close frame can still be written when the session ends. What ends the
// session here stops the walk (before the commit: walkStop, which
// cancels the running hop) or closes the committed channel (after it:
// the handler's read of it ends).
func (s *session) readClient(ctx context.Context, c *call) {
	defer s.readers.Done()
	for {
		typ, b, err := s.client.Read(ctx)
		if err != nil {
			s.clientGone(c, err)
			return
		}
		if !s.clientEvent(c, typ, b) {
			return
		}
	}
}

// clientGone records that the client closed (or its socket failed) and
// ends the session with it.
func (s *session) clientGone(c *call, err error) {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return
	}
	s.clientEnd, s.closeCode = true, websocket.CloseStatus(err)
	s.tooBig = errors.Is(err, websocket.ErrMessageTooBig)
	if s.closeCode < 0 {
		// No close frame came: the library closed for an event above
		// the read limit with 1009, or the socket dropped, which
		// RFC 6455 §7.1.5 reports as 1006.
		s.closeCode = websocket.StatusAbnormalClosure
		if s.tooBig {
			s.closeCode = websocket.StatusMessageTooBig
		}
	}
	s.mu.Unlock()
	s.stopBy(c, errClientGone)
}

// clientEvent relays one client event (held before the commit, written to
// the committed channel after it); false when it ended the session: a
// binary message, more than the hold may keep, or a channel that failed
// the write (its read in the handler ends too).
func (s *session) clientEvent(c *call, typ websocket.MessageType, b []byte) bool {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return false
	}
	if typ != websocket.MessageText {
		s.failLocked(binaryEventError(), websocket.StatusUnsupportedData)
		s.mu.Unlock()
		s.stopBy(c, errBinaryFromUser)
		return false
	}
	if !s.live {
		err := s.holdEvent(rtMsg{typ, b})
		switch {
		case err == nil:
		case errors.Is(err, errHoldBudget):
			s.failLocked(rtError{Type: "server_error", Code: CodeEngineOverloaded, Message: "hopgate cannot hold the session's events now (buffer budget): retry shortly"}, closeTryAgainLater)
		default:
			s.failLocked(rtError{Type: "invalid_request_error", Code: CodeHoldExceeded,
				Message: fmt.Sprintf("the events sent before session.created exceed realtime.hold_bytes (%d bytes): wait for session.created", s.maxN)}, websocket.StatusPolicyViolation)
		}
		s.mu.Unlock()
		if err != nil {
			s.stopBy(c, err)
			return false
		}
		return true
	}
	up, ctx := s.up, s.upCtx
	s.mu.Unlock()
	if up.Write(ctx, typ, b) != nil {
		return false // the channel's socket is closed: the handler's read says why
	}
	s.in.Add(1)
	return true
}

// stopBy ends the session for why: before the commit, the walk stops
// (and with it the running hop, whose gate classifies why); after it,
// the committed channel is closed with a close frame.
func (s *session) stopBy(c *call, why error) {
	s.mu.Lock()
	live := s.live
	s.mu.Unlock()
	if !live {
		c.stop.cancel(why)
		return
	}
	s.closeUp(why)
}

// expire is realtime.max_session firing (the timer's goroutine): the walk
// stops, or the committed channel is closed; the session's end waits for
// that close.
func (s *session) expire(c *call) { s.stopWith(c, errMaxSession) }

// stopWith ends the session for why: the walk stops, or the committed
// channel is closed (the session's end waits for that close).
func (s *session) stopWith(c *call, why error) {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return
	}
	live := s.live
	if live {
		s.readers.Add(1)
	}
	s.mu.Unlock()
	if !live {
		c.stop.cancel(why)
		return
	}
	defer s.readers.Done()
	s.closeUp(why)
}

// keepalive is realtime.ping_interval passing on a committed session (on
// the timer's goroutine). Each side that sent no event since the last
// keepalive is pinged, the client first. A side that answers neither the
// ping nor with an event within ping_timeout is gone: a host that died
// or a network that dropped its packets sends no FIN, so without pings
// its socket would stay half-open until TCP gave up, minutes later. A
// silent client ends the session as a dropped client does (1006 on the
// span; its channel is closed, not blamed); a silent channel interrupts
// it (upstream_session_interrupted, 1011, on the channel's breaker),
// unless the relay was writing to the client at that moment, when the
// channel's pong may be waiting unread behind that write.
func (s *session) keepalive(c *call) {
	s.mu.Lock()
	if s.over {
		s.mu.Unlock()
		return
	}
	s.readers.Add(1)
	hop := s.pingHop
	s.mu.Unlock()
	defer s.readers.Done()
	if s.silent(c, s.client, &s.in, &s.seenIn) {
		s.clientSilent(c)
		return
	}
	if s.silent(c, hop.conn, &s.upReads, &s.seenUp) && !s.relayWriting.Load() {
		s.mu.Lock()
		closing := s.over || s.upClosing
		s.mu.Unlock()
		if !closing {
			hop.cancel(fmt.Errorf("the channel answered neither a ping nor with an event within realtime.ping_timeout (%s): its socket is half-open", s.pingWait))
		}
		return
	}
	s.mu.Lock()
	if !s.over {
		s.pingTimer = c.e.clock.AfterFunc(s.pingEvery, func() { s.keepalive(c) })
	}
	s.mu.Unlock()
}

// silent reports whether the side of conn is gone: its event count n did
// not move past *seen since the last keepalive, and it answered a ping
// with neither a pong nor an event within ping_timeout. A ping that
// failed otherwise (the socket closed: the session is ending, and whoever
// closed it says why) is no verdict. *seen becomes the count now.
func (s *session) silent(c *call, conn *websocket.Conn, n *atomic.Int64, seen *int64) bool {
	before := n.Load()
	if before != *seen {
		*seen = before
		return false
	}
	var late atomic.Bool
	ctx, cancel := context.WithCancel(s.writes)
	t := c.e.clock.AfterFunc(s.pingWait, func() { late.Store(true); cancel() })
	err := conn.Ping(ctx)
	t.Stop()
	cancel()
	*seen = n.Load()
	return err != nil && late.Load() && *seen == before
}

// clientSilent ends the session of a client that stopped answering, as
// one whose socket dropped (1006): its channel is closed with a close
// frame, and a relay write the client never takes ends.
func (s *session) clientSilent(c *call) {
	s.mu.Lock()
	if s.over || s.clientEnd || s.upClosing {
		s.mu.Unlock()
		return
	}
	s.clientEnd, s.closeCode = true, websocket.StatusAbnormalClosure
	s.mu.Unlock()
	s.stopBy(c, errClientSilent)
	s.endWrites()
}

// shutdown ends the session for the gateway's shutdown (Sessions.End):
// the client gets the error event gateway_shutting_down and 1012 (service
// restart), which tells it to reconnect, to another replica.
func (s *session) shutdown(c *call) {
	s.fail(rtError{Type: "server_error", Code: apierror.CodeShuttingDown,
		Message: "the gateway is shutting down: open a new session"}, websocket.StatusServiceRestart)
	s.stopWith(c, errShuttingDown)
}

// Sessions are the engine's open realtime sessions: counted per model,
// and listed, because the server's Shutdown does not wait for hijacked
// connections: without End a deploy would drop every voice session with a
// bare 1006.
type Sessions struct {
	counts  sync.Map // model name -> *sessionCount
	mu      sync.Mutex
	calls   map[*call]struct{}
	closing bool
	idle    chan struct{} // closed when calls empties while a wait waits
}

// Sessions are the engine's open realtime sessions.
func (e *Engine) Sessions() *Sessions { return &e.live }

func (l *Sessions) add(c *call) {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[*call]struct{}{}
	}
	l.calls[c] = struct{}{}
	closing := l.closing
	l.mu.Unlock()
	if closing {
		c.rt.shutdown(c)
	}
}

func (l *Sessions) remove(c *call) {
	l.mu.Lock()
	delete(l.calls, c)
	if len(l.calls) == 0 && l.idle != nil {
		close(l.idle)
		l.idle = nil
	}
	l.mu.Unlock()
}

// Wait returns once no realtime session is open, or ctx ends (a
// shutdown's drain).
func (l *Sessions) Wait(ctx context.Context) {
	l.mu.Lock()
	if len(l.calls) == 0 {
		l.mu.Unlock()
		return
	}
	if l.idle == nil {
		l.idle = make(chan struct{})
	}
	idle := l.idle
	l.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}

// End ends every open realtime session, and every one opened from then
// on, with the error event gateway_shutting_down and close 1012 (service
// restart); it waits for those to end, or ctx, and returns how many it
// ended.
func (l *Sessions) End(ctx context.Context) int {
	l.mu.Lock()
	l.closing = true
	cut := make([]*call, 0, len(l.calls))
	for c := range l.calls {
		cut = append(cut, c)
	}
	l.mu.Unlock()
	for _, c := range cut {
		c.rt.shutdown(c)
	}
	l.Wait(ctx)
	return len(cut)
}

// closeUp closes the committed channel's socket with a close frame, once,
// for why: the handler's read of it gets the channel's answer (or the
// close handshake reads it itself once the handler stopped reading).
func (s *session) closeUp(why error) {
	s.mu.Lock()
	if s.upClosing {
		s.mu.Unlock()
		return
	}
	s.upClosing, s.why = true, why
	up := s.up
	s.mu.Unlock()
	_ = up.Close(websocket.StatusNormalClosure, "")
}

// holdEvent keeps a client event sent before the commit, to be replayed
// to the committed channel; an error when it would cross hold_bytes or
// the buffer budget. Under mu.
func (s *session) holdEvent(m rtMsg) error {
	n := int64(len(m.b))
	if s.heldN+n > s.maxN {
		return errHoldExceeded
	}
	if !s.hold.Grow(n) {
		return errHoldBudget
	}
	s.held = append(s.held, m)
	s.heldN += n
	return nil
}

// release lets go of the held events (replayed, or the session is over).
// Under mu.
func (s *session) release() {
	s.held, s.heldN = nil, 0
	s.hold.Release()
}

// end closes the client's session once the walk (and the relay of a
// committed session) is over: a session that never committed gets the
// reason as an error event first. Every goroutine of the session is gone
// when it returns.
func (s *session) end(c *call) {
	s.maxTimer.Stop()
	s.mu.Lock()
	s.over = true // the reader records nothing more, max_session does nothing
	if s.pingTimer != nil {
		s.pingTimer.Stop()
	}
	s.release()
	failure, clientEnd := s.failure, s.clientEnd
	s.mu.Unlock()
	code, reason := websocket.StatusNormalClosure, ""
	if failure != nil && !clientEnd {
		// Bounded on the engine's clock: a client that does not read
		// cannot hold the session's end.
		ctx, cancel := context.WithCancel(context.Background())
		t := c.e.clock.AfterFunc(finalWrite, cancel)
		_ = s.client.Write(ctx, websocket.MessageText, errorEvent(c.requestID, *failure))
		t.Stop()
		cancel()
		reason = failure.Code
	}
	if s.closeCode >= 0 {
		code = s.closeCode
	}
	if clientEnd {
		_ = s.client.CloseNow()
	} else {
		// The close handshake reads the client's answer; the reader's
		// read of it ends with it.
		_ = s.client.Close(code, reason)
		s.closeCode = code
	}
	s.endWrites()
	s.readers.Wait()
}

// finalWrite bounds the write of a session's last error event.
const finalWrite = 5 * time.Second

// rtError is the error of an OpenAI Realtime error event.
type rtError struct {
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	EventID *string `json:"event_id"`
}

// errorEvent is an OpenAI Realtime `error` event.
func errorEvent(requestID string, e rtError) []byte {
	b, _ := json.Marshal(struct {
		EventID string  `json:"event_id"` // every server event has one (openai-go requires it)
		Type    string  `json:"type"`
		Error   rtError `json:"error"`
	}{"event_hopgate_" + requestID, "error", e})
	return b
}

// Error codes of the events hopgate sends a realtime client.
const (
	CodeSessionInterrupted = "upstream_session_interrupted"
	CodeAllChannelsFailed  = "all_channels_failed"
	CodeSessionExpired     = "session_expired"
	CodeHoldExceeded       = "realtime_hold_exceeded"
	CodeEngineOverloaded   = "engine_overloaded"
	CodeBinaryEvent        = "invalid_event"
)

// finish is the call's finish for a session: when no channel opened it,
// the client gets why as an error event when the walk ends (end), or
// nothing when it left.
func (s *session) finish(c *call, last *classify.HopError) {
	path := telemetry.FormatPath(c.steps)
	s.mu.Lock()
	clientEnd, failed, tooBig := s.clientEnd, s.failure != nil, s.tooBig
	s.mu.Unlock()
	switch {
	case clientEnd && tooBig:
		// An event larger than hold_bytes before the commit: the
		// framing closed the socket (1009), a client's mistake like a
		// hold exceeded.
		c.rw.outcome = telemetry.OutcomeBadRequest
	case clientEnd:
		c.rw.outcome = OutcomeCanceled
	case failed:
		// Ended before any channel opened it by what the client sent (a
		// binary event, more than the hold) or by the buffer budget, and
		// said already. No channel failed: not exhausted, which on-call
		// reads as every provider down.
		c.rw.outcome = telemetry.OutcomeBadRequest
		if errors.Is(c.stop.err(), errHoldBudget) {
			c.rw.outcome = telemetry.OutcomeShed
		}
	case c.stop.err() == errChainDeadline || !c.rw.claim():
		c.rw.outcome = OutcomeDeadline
		c.e.tel.Metrics.ChainExceeded(c.clientCtx, c.req.Model.Name)
		s.fail(rtError{Type: "server_error", Code: CodeEngineOverloaded,
			Message: "no channel opened the session within the chain deadline; path: " + path}, websocket.StatusInternalError)
	case last != nil && last.Class() == classify.Final:
		c.rw.outcome = OutcomeFinalError
		msg := "the upstream refused the session (" + last.Label() + ")"
		if last.Cause != nil {
			msg += ": " + last.Cause.Error()
		}
		s.fail(rtError{Type: "invalid_request_error", Code: "upstream_" + last.Label(), Message: msg}, websocket.StatusPolicyViolation)
	default:
		c.rw.outcome = OutcomeExhausted
		s.fail(rtError{Type: "server_error", Code: CodeAllChannelsFailed,
			Message: "no channel opened a realtime session; path: " + path}, websocket.StatusInternalError)
	}
}

// fail sets the error event and close code the session ends with; the
// first one stays.
func (s *session) fail(e rtError, code websocket.StatusCode) {
	s.mu.Lock()
	s.failLocked(e, code)
	s.mu.Unlock()
}

func (s *session) failLocked(e rtError, code websocket.StatusCode) {
	if s.failure == nil {
		s.failure, s.closeCode = &e, code
	}
}

// opened counts open sessions per model (the on-call and status pages'
// count).
func (l *Sessions) opened(model string, delta int64) {
	v, _ := l.counts.LoadOrStore(model, new(sessionCount))
	v.(*sessionCount).n.Add(delta)
}

// Open is the number of open realtime sessions per model.
func (l *Sessions) Open() map[string]int64 {
	out := map[string]int64{}
	l.counts.Range(func(k, v any) bool {
		if n := v.(*sessionCount).n.Load(); n > 0 {
			out[k.(string)] = n
		}
		return true
	})
	return out
}

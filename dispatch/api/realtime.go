package api

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
	"github.com/hopgate/hopgate/dispatch/wallet"
)

// realtimePath is the realtime sessions' endpoint (DESIGN.md §15).
const realtimePath = "/v1/realtime"

// insecureKeyProtocol prefixes the client key in the subprotocol form
// browsers use (they cannot set an Authorization header on a WebSocket).
const insecureKeyProtocol = "openai-insecure-api-key."

// subprotocolKey is the key a browser client offers as a subprotocol.
func subprotocolKey(r *http.Request) string {
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, insecureKeyProtocol) {
				return p[len(insecureKeyProtocol):]
			}
		}
	}
	return ""
}

// realtimeKeySum is keySum for GET /v1/realtime: the subprotocol key when
// there is no Authorization header.
func realtimeKeySum(r *http.Request) ([32]byte, bool) {
	if sum, ok := keySum(r); ok {
		return sum, true
	}
	if k := subprotocolKey(r); k != "" {
		return sha256.Sum256([]byte(k)), true
	}
	return [32]byte{}, false
}

// realtimeHandler serves GET /v1/realtime?model=M: the front-door checks
// (method, upgrade, key, model, operation, the stream bound), then the
// engine's session. Every refusal is an HTTP answer before the upgrade.
// An idle session parks this goroutine for minutes under ServeHTTP, and
// the runtime halves a goroutine's stack only while less than a quarter
// of it (less 800 bytes) is in use: so the route is a type, not a method
// value (whose wrapper and http.HandlerFunc would be two more frames), the
// checks, the walk and the session's end are calls of their own, and this
// frame holds only the exchange (docs/performance.md, memory per idle
// realtime session).
type realtimeHandler struct{ s *Server }

func (h realtimeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := h.s.openRealtime(w, r)
	if x == nil {
		return
	}
	defer x.release()
	x.rt.Relay()
	x.finish()
}

// openRealtime runs startRealtime on a goroutine of its own and waits for
// it. The checks, the walk, the dial and the upgrade go deeper than an
// idle session ever does: on the handler's goroutine they grew its stack
// to 16 KiB, which the runtime halves at a GC but does not give back to
// the system, so each open session kept the difference in RSS. A
// goroutine that ends returns its stack to the runtime's cache at once,
// and the next session's open reuses it. The handler only waits here and
// then relays, so its own stack stays at the 8 KiB a bare relay's has.
// A panic on the other goroutine is raised again here, where net/http
// recovers it (http.ErrAbortHandler as itself).
//
//go:noinline
func (s *Server) openRealtime(w http.ResponseWriter, r *http.Request) *rtExchange {
	type opened struct {
		x     *rtExchange
		panic any
		stack []byte
	}
	done := make(chan opened, 1)
	go func() {
		var o opened
		defer func() {
			if p := recover(); p != nil {
				o.panic, o.stack = p, debug.Stack()
			}
			done <- o
		}()
		o.x = s.startRealtime(w, r)
	}()
	o := <-done
	if o.panic != nil {
		if o.panic == http.ErrAbortHandler {
			panic(o.panic)
		}
		panic(fmt.Sprintf("%v\n\nopening the realtime session:\n%s", o.panic, o.stack))
	}
	return o.x
}

// rtExchange is a realtime session past the front door and what it holds
// until it ends: its admission, an open-stream slot, a wallet session.
type rtExchange struct {
	s        *Server
	req      *dispatch.Request
	ses      *wallet.Session   // nil: not charged
	ticket   *ratelimit.Ticket // nil: no tenant limit applies
	rt       dispatch.Realtime
	entered  bool
	stream   bool
	released bool
}

// startRealtime runs the front-door checks, takes what the session holds
// and starts the engine's session (the upgrade and the walk); nil once a
// refusal was written (and what was taken was given back).
//
//go:noinline
func (s *Server) startRealtime(w http.ResponseWriter, r *http.Request) *rtExchange {
	x := &rtExchange{s: s}
	ok := false
	defer func() {
		if !ok {
			x.release() // a refusal, or a panic in the checks
		}
	}()
	if !s.enter(w, r) {
		return nil
	}
	x.entered = true
	cfg := s.cfg.Load()
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.fail(w, r, apierror.MethodNotAllowed(r.Method))
		return nil
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.fail(w, r, apierror.InvalidRequest(realtimePath+" is a WebSocket endpoint: send a WebSocket upgrade (GET with Upgrade: websocket)", ""))
		return nil
	}
	tenant, aerr := s.identifyWith(cfg, r, realtimeKeySum)
	if aerr != nil {
		s.fail(w, r, aerr)
		return nil
	}
	name := r.URL.Query().Get("model")
	if name == "" {
		s.fail(w, r, apierror.InvalidRequest("the session names no model: add ?model= to the URL", "model"))
		return nil
	}
	m := cfg.Model(name)
	if m == nil {
		s.fail(w, r, apierror.ModelNotFound("model \""+name+"\" does not exist on this gateway; GET /v1/models lists the models served"))
		return nil
	}
	if !serves(m, config.OpRealtime) {
		s.fail(w, r, apierror.OperationNotSupported("model \""+m.Name+"\" does not serve the \"realtime\" operation ("+realtimePath+"); it serves: "+strings.Join(operations(m), ", ")))
		return nil
	}
	if !s.openStream(w, r) {
		return nil
	}
	x.stream = true
	x.req = &dispatch.Request{Config: cfg, Model: m, Operation: config.OpRealtime, Path: "/realtime", Tenant: tenant}
	// A session is one request of its tenant's rpm; its tokens reach the
	// tpm as each response ends (DESIGN.md §16), nothing reserved up front.
	t, admitted := s.limitTokens(w, r, x.req, 0)
	if !admitted {
		return nil
	}
	x.ticket = t
	ses, reserved := s.reserveSession(w, r, x.req)
	if !reserved {
		return nil
	}
	x.ses = ses
	if t != nil {
		cctx := context.WithoutCancel(r.Context())
		charge := x.req.OnResponseDone
		x.req.OnResponseDone = func(d dispatch.ResponseDone) {
			if charge != nil {
				charge(d)
			}
			t.Charge(cctx, d.InputTokens+d.OutputTokens)
		}
	}
	x.rt = s.engine.StartRealtime(w, r, x.req)
	ok = true
	return x
}

// finish ends the engine's session, closes the wallet session (its hold
// released), then records and logs the session.
//
//go:noinline
func (x *rtExchange) finish() {
	res := x.rt.End()
	r := x.rt.Request()
	s, m := x.s, x.req.Model
	x.ses.Close(context.WithoutCancel(r.Context()))
	x.ticket.Settle(r.Context(), 0) // its tokens were charged as they came
	s.status.Record(m.Name, res.Outcome)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "realtime session",
		slog.String("path", r.URL.Path), slog.String("model", m.Name), slog.String("served_model", res.ServedModel),
		slog.Int("status", res.Status), slog.String("outcome", res.Outcome), slog.String("failover_path", res.Path),
		slog.Int("attempts", res.Attempts), slog.String("tenant", x.req.Tenant))
}

// release gives back what the session held, in the reverse order it was
// taken: the wallet session's guard, the stream slot, the admission.
func (x *rtExchange) release() {
	if x.released {
		return
	}
	x.released = true
	x.ticket.Release(context.Background()) // refused after admission: given back
	x.ses.Guard()
	if x.stream {
		x.s.adm.CloseStream()
	}
	if x.entered {
		x.s.adm.Leave()
	}
}

package api

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"strings"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
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

// realtime serves GET /v1/realtime?model=M: the front-door checks (method,
// upgrade, key, model, operation, the stream bound), then the engine's
// session. Every refusal is an HTTP answer before the upgrade.
func (s *Server) realtime(w http.ResponseWriter, r *http.Request) {
	if !s.enter(w, r) {
		return
	}
	defer s.adm.Leave()
	cfg := s.cfg.Load()
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.fail(w, r, apierror.MethodNotAllowed(r.Method))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.fail(w, r, apierror.InvalidRequest(realtimePath+" is a WebSocket endpoint: send a WebSocket upgrade (GET with Upgrade: websocket)", ""))
		return
	}
	tenant, aerr := s.identifyWith(cfg, r, realtimeKeySum)
	if aerr != nil {
		s.fail(w, r, aerr)
		return
	}
	name := r.URL.Query().Get("model")
	if name == "" {
		s.fail(w, r, apierror.InvalidRequest("the session names no model: add ?model= to the URL", "model"))
		return
	}
	m := cfg.Model(name)
	if m == nil {
		s.fail(w, r, apierror.ModelNotFound("model \""+name+"\" does not exist on this gateway; GET /v1/models lists the models served"))
		return
	}
	if !serves(m, config.OpRealtime) {
		s.fail(w, r, apierror.OperationNotSupported("model \""+m.Name+"\" does not serve the \"realtime\" operation ("+realtimePath+"); it serves: "+strings.Join(operations(m), ", ")))
		return
	}
	if !s.openStream(w, r) {
		return
	}
	defer s.adm.CloseStream()
	req := &dispatch.Request{Config: cfg, Model: m, Operation: config.OpRealtime, Path: "/realtime", Tenant: tenant}
	ses, ok := s.reserveSession(w, r, req)
	if !ok {
		return
	}
	defer ses.Guard()
	res := s.engine.ServeRealtime(w, r, req)
	ses.Close(context.WithoutCancel(r.Context()))
	s.status.Record(m.Name, res.Outcome)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "realtime session",
		slog.String("path", r.URL.Path), slog.String("model", m.Name), slog.String("served_model", res.ServedModel),
		slog.Int("status", res.Status), slog.String("outcome", res.Outcome), slog.String("failover_path", res.Path),
		slog.Int("attempts", res.Attempts), slog.String("tenant", tenant))
}

package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/telemetry"
)

// Server serves the admin listener.
type Server struct {
	Config    func() *config.Config
	Engine    *dispatch.Engine
	Telemetry *telemetry.Telemetry
	// Admission is the overload protection's admission bounds (nil: none):
	// /readyz says overloaded while a new request would be shed.
	Admission *overload.Admission
	// Tenants serves /admin/tenants (tenants.go); nil without a store.
	Tenants *Tenants
	ready   atomic.Bool
}

// SetReady flips /readyz (false while starting and while draining).
func (s *Server) SetReady(v bool) { s.ready.Store(v) }

// Handler routes the admin endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		if reason, over := s.Admission.Overloaded(); over {
			// A load balancer steers new requests away; requests and
			// streams in flight go on (DESIGN.md §13).
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("overloaded: " + reason + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", s.guard(s.Telemetry.MetricsHandler()))
	mux.Handle("GET /admin", s.guard(http.HandlerFunc(s.oncallPage)))
	mux.Handle("GET /admin/{$}", s.guard(http.HandlerFunc(s.oncallPage)))
	mux.Handle("GET /admin/traces", s.guard(http.HandlerFunc(s.traceListPage)))
	mux.Handle("GET /admin/traces/{trace_id}", s.guard(http.HandlerFunc(s.tracePage)))
	mux.Handle("GET /admin/chains", s.guard(http.HandlerFunc(s.chains)))
	mux.Handle("GET /admin/breakers", s.guard(http.HandlerFunc(s.breakers)))
	mux.Handle("GET /admin/failovers", s.guard(http.HandlerFunc(s.failovers)))
	s.tenantRoutes(mux)
	return mux
}

// guard requires the admin bearer token when one is configured.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := s.Config().Admin.BearerToken
		if tok != "" {
			got := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(tok))
			if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hopgate-admin"`)
				http.Error(w, "admin token required", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// ChainView is one model's resolved chain with live breaker states.
type ChainView struct {
	Model           string      `json:"model"`
	Operations      []string    `json:"operations"`
	Profile         string      `json:"profile"`
	HeaderTimeout   string      `json:"header_timeout"`
	ChainDeadline   string      `json:"chain_deadline"`
	FallbackModels  []string    `json:"fallback_models,omitempty"`
	ContextFallback string      `json:"context_fallback,omitempty"`
	Entries         []EntryView `json:"chain"`
}

// EntryView is one chain entry.
type EntryView struct {
	Channel       string  `json:"channel"`
	Region        string  `json:"region"`
	UpstreamModel string  `json:"upstream_model"`
	PriceInput    float64 `json:"price_input"`
	PriceOutput   float64 `json:"price_output"`
	Prefill       bool    `json:"prefill"`
	Breaker       string  `json:"breaker"`
	// EarlyWarning is the channel's early-warning state (normal, demoted,
	// probation); absent when early warning is off for it.
	EarlyWarning string `json:"early_warning,omitempty"`
}

// BreakerView is one channel's breaker.
type BreakerView struct {
	Channel string           `json:"channel"`
	Region  string           `json:"region"`
	Mode    string           `json:"mode"`
	State   string           `json:"state"`
	Detail  breaker.Snapshot `json:"detail"`
	// EarlyWarning is the channel's early warning and its evidence, when
	// enabled: a demoted channel is moved to the end of its chains while
	// its breaker stays closed (the tiles' fourth state).
	EarlyWarning *earlywarning.Snapshot `json:"early_warning,omitempty"`
}

func (s *Server) chainViews() []ChainView {
	cfg := s.Config()
	out := make([]ChainView, 0, len(cfg.Models))
	for _, m := range cfg.Models {
		v := ChainView{Model: m.Name, Operations: m.Operations, Profile: m.Policy.Profile,
			HeaderTimeout: m.Policy.HeaderTimeout.String(), ChainDeadline: m.Policy.ChainDeadline.String(),
			FallbackModels: m.FallbackModels, ContextFallback: m.ContextFallback}
		for _, e := range m.Chain {
			br := s.Engine.Breakers().Get(e.Channel.ID, dispatch.BreakerPolicy(e.Channel.Breaker))
			ev := EntryView{Channel: e.Channel.ID, Region: e.Channel.Region,
				UpstreamModel: e.UpstreamModel, PriceInput: e.Price.Input, PriceOutput: e.Price.Output,
				Prefill: e.Prefill, Breaker: br.State().String()}
			if d := s.Engine.Warning(e.Channel); d != nil {
				ev.EarlyWarning = d.State().String()
			}
			v.Entries = append(v.Entries, ev)
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) breakerViews() []BreakerView {
	cfg := s.Config()
	out := make([]BreakerView, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		br := s.Engine.Breakers().Get(ch.ID, dispatch.BreakerPolicy(ch.Breaker))
		v := BreakerView{Channel: ch.ID, Region: ch.Region, Mode: ch.Breaker.Mode,
			State: br.State().String(), Detail: br.Snapshot()}
		if d := s.Engine.Warning(ch); d != nil {
			snap := d.Snapshot()
			v.EarlyWarning = &snap
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) chains(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.chainViews()) }

func (s *Server) breakers(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.breakerViews()) }

func (s *Server) failovers(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, s.Telemetry.Failovers.List())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

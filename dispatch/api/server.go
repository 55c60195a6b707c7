package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/dispatch/ratelimit"
	"github.com/hopgate/hopgate/dispatch/status"
	"github.com/hopgate/hopgate/dispatch/wallet"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/telemetry"
)

// Server serves the main listener.
type Server struct {
	cfg    atomic.Pointer[config.Config]
	engine *dispatch.Engine
	tel    *telemetry.Telemetry
	log    *slog.Logger
	lines  *telemetry.Lines              // the request path's log lines, through log
	status *status.Service               // status.go; nil: /status answers like an unknown route
	wallet atomic.Pointer[wallet.Wallet] // nil: nothing is charged (wallet.go)
	adm    *overload.Admission
	// limiter keeps tenants within their limits (ratelimit.go).
	limiter atomic.Pointer[ratelimit.Limiter]
}

// New builds the API server. tel and log may be nil (no-op telemetry,
// slog.Default()).
func New(cfg *config.Config, e *dispatch.Engine, tel *telemetry.Telemetry, log *slog.Logger) *Server {
	if tel == nil {
		tel = telemetry.Noop()
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{engine: e, tel: tel, log: log, lines: telemetry.NewLines(log)}
	s.cfg.Store(cfg)
	s.limiter.Store(ratelimit.New(ratelimit.Options{Telemetry: tel, Logger: log}))
	return s
}

// Config is the configuration in force.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// SetConfig swaps the configuration atomically (SIGHUP reload); requests in
// flight finish with the one they started with.
func (s *Server) SetConfig(cfg *config.Config) { s.cfg.Store(cfg) }

// Handler is the main listener's handler, every route wrapped by
// telemetry's ServerHandler so each request is one trace whose root is the
// SERVER span.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// telemetry.trust_inbound_trace: false makes every request the root of
	// its own trace, linked to the client's: a public endpoint must not let
	// clients choose trace ids (and X-Request-Id). Read per request, so a
	// reload applies.
	public := func() bool { return !s.cfg.Load().Telemetry.TrustInboundTrace }
	for i := range routes {
		rt := &routes[i]
		mux.Handle(rt.Pattern, s.tel.ServerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.proxy(w, r, rt)
		}), public))
	}
	mux.Handle("/v1/models", s.tel.ServerHandler(http.HandlerFunc(s.models), public))
	mux.Handle("/v1/models/", s.tel.ServerHandler(http.HandlerFunc(s.modelByID), public))
	mux.Handle(realtimePath, s.tel.ServerHandler(realtimeHandler{s}, public))
	notFound := s.tel.ServerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, apierror.NotFound(r.URL.Path))
	}), public)
	mux.Handle("/", notFound)
	s.routeStatus(mux, notFound)
	return mux
}

// fail writes a hopgate error with the request id and hopgate's headers
// (a 405's caller sets Allow: each route knows its one method).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *apierror.Error) {
	s.failAs(w, r, e, telemetry.OutcomeBadRequest)
}

// failAs is fail with the request's outcome: bad_request for the front
// door's refusals, shed for overload protection's.
func (s *Server) failAs(w http.ResponseWriter, r *http.Request, e *apierror.Error, outcome string) {
	s.tel.Spans.Refused(r.Context(), &telemetry.Refusal{Outcome: outcome, Code: e.Code})
	reply(w, r, e)
	s.lines.Start(r.Context(), slog.LevelInfo, "request").
		Str("method", r.Method).Str("path", r.URL.Path).
		Int("status", e.Status).Str("outcome", outcome).Str("code", e.Code).End()
}

// reply writes a refusal as the whole answer, with the request id,
// traceparent and zero attempts, in the client's own shape: Anthropic's
// for an Anthropic client (anthropicClient), OpenAI's otherwise.
func reply(w http.ResponseWriter, r *http.Request, e *apierror.Error) {
	id := dispatch.RequestID(r.Context())
	h := w.Header()
	h.Set("X-Request-Id", id)
	if tp := dispatch.Traceparent(r.Context()); tp != "" {
		h.Set("Traceparent", tp)
	}
	h.Set("X-Hopgate-Attempts", "0")
	if anthropicClient(r) {
		apierror.WriteAnthropic(w, id, e)
		return
	}
	apierror.Write(w, id, e)
}

// proxy runs the front-door checks, then hands the request to the engine.
// Nothing reaches an upstream unless every check passed, and the whole body
// is read (bounded by max_body_bytes) before the first hop: every hop
// replays the same bytes, and a client that leaves mid-upload costs no
// upstream attempt.
//
// proxy stays a small stack frame on purpose: a committed stream is passed
// on from here (dispatch.Answer.Pump) and parks the goroutine for minutes,
// and the runtime only shrinks a goroutine stack whose live part is under
// a quarter of it. The checks (begin), the walk (Engine.Start) and the end
// of the request (finish: its Result, settlement and log line) are calls of
// their own so their locals are not part of this frame.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, rt *route) {
	x := s.begin(w, r, rt)
	if x == nil {
		return
	}
	defer x.release()
	a := s.engine.Start(w, r, x.req)
	a.Pump()
	x.finish(r, a)
}

// exchange is a request past the front door and what it holds until it
// ends: its admission, its body's bytes against the buffer budget, an
// open-stream slot, a wallet reservation.
type exchange struct {
	s      *Server
	req    *dispatch.Request
	stream bool                // holds an open-stream slot
	hold   *wallet.Reservation // nil: not charged
	ticket *ratelimit.Ticket   // nil: no tenant limit applies
	// bodyBytes is the client body's size before the walk: the engine
	// lets go of the body once a stream commits (or a binary answer
	// passes through), and a charge without usage estimates the input
	// from this size, as the wallet's reservation does.
	bodyBytes int
}

// begin runs the front-door checks and takes what the request holds; nil
// once a refusal was written (and what was taken was given back).
//
//go:noinline
func (s *Server) begin(w http.ResponseWriter, r *http.Request, rt *route) *exchange {
	if !s.enter(w, r) {
		return nil
	}
	x := &exchange{s: s}
	ok := false
	defer func() {
		if !ok {
			x.release() // a refusal, or a panic in the checks
		}
	}()
	if x.req = s.admit(w, r, rt); x.req == nil {
		return nil
	}
	x.bodyBytes = len(x.req.Body)
	if x.req.Stream {
		if !s.openStream(w, r) {
			return nil
		}
		x.stream = true
	}
	if x.req.CountTokens {
		ok = true // never charged nor limited: a count asks no model for an answer (DESIGN.md §14)
	} else if x.ticket, ok = s.limit(w, r, x.req); !ok {
		return nil
	} else if x.hold, ok = s.reserve(w, r, x.req); !ok {
		return nil
	}
	return x
}

// release gives back what the request held, on every path (a panic
// included); a reservation Finish did not see is released (Guard).
func (x *exchange) release() {
	x.ticket.Release(context.Background()) // refused after admission: given back
	if x.hold != nil {
		x.hold.Guard()
	}
	if x.stream {
		x.s.adm.CloseStream()
	}
	if x.req != nil {
		x.req.BodyHold.Release()
	}
	x.s.adm.Leave()
}

// finish ends the answer, settles the reservation, counts the request for
// the status page and writes the access log line.
//
//go:noinline
func (x *exchange) finish(r *http.Request, a *dispatch.Answer) {
	s, req, res := x.s, x.req, a.End()
	if x.hold != nil {
		s.settle(r, x.hold, res)
	}
	s.settleLimit(r, x.ticket, x.bodyBytes, res)
	s.status.Record(req.Model.Name, res.Outcome)
	s.logRequest(r, req, res)
	if res.Aborted {
		// A binary body was cut after its headers went out: break the
		// connection so the client sees a truncated transfer (net/http
		// neither logs this panic nor finishes the response).
		panic(http.ErrAbortHandler)
	}
}

// admit runs the front-door checks and returns the resolved request, or
// nil once a rejection has been written.
//
//go:noinline
func (s *Server) admit(w http.ResponseWriter, r *http.Request, rt *route) (req *dispatch.Request) {
	cfg := s.cfg.Load()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.fail(w, r, apierror.MethodNotAllowed(r.Method))
		return nil
	}
	tenant, aerr := s.identify(cfg, r)
	if aerr != nil {
		s.fail(w, r, aerr)
		return nil
	}
	var boundary string
	if rt.Multipart {
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if boundary = params["boundary"]; err != nil || mt != "multipart/form-data" || boundary == "" {
			s.fail(w, r, apierror.InvalidRequest(rt.Pattern+" takes a multipart/form-data body with a boundary (Content-Type)", ""))
			return nil
		}
	}
	// The body must arrive within bodyReadTimeout (a slow upload cannot pin
	// a connection); the deadline is lifted before the answer streams.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	// The body is kept for replay on every hop: it counts against the
	// buffer budget, its declared length before a byte is read.
	hold := overload.NewHold(s.engine.Budget())
	defer func() {
		if req == nil {
			hold.Release() // refused: nothing keeps the body
		}
	}()
	if r.ContentLength > 0 && !hold.Grow(min(r.ContentLength, cfg.MaxBodyBytes)) {
		s.shed(w, r, overload.ShedBudget)
		return nil
	}
	body, err := readBody(http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes), r.ContentLength, cfg.MaxBodyBytes)
	_ = rc.SetReadDeadline(time.Time{})
	if err == nil {
		// Read to its end: closed now, so the answer's first write does
		// not try to discard what is left of it (net/http does, under the
		// first flush of a stream, the deepest point of its stack).
		_ = r.Body.Close()
	}
	if extra := int64(cap(body)) - hold.Held(); err == nil && extra > 0 && !hold.Grow(extra) {
		hold.Release()
		s.shed(w, r, overload.ShedBudget)
		return nil
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, r, apierror.RequestTooLarge(cfg.MaxBodyBytes))
			return nil
		}
		// The client went away or sent a broken body: nothing to proxy.
		s.fail(w, r, apierror.InvalidRequest("could not read the request body: "+err.Error(), ""))
		return nil
	}
	req = &dispatch.Request{
		BodyHold:  hold,
		Config:    cfg,
		Operation: rt.Operation,
		Path:      rt.Upstream,
		Body:      body,
		Tenant:    tenant,
		Events:    rt.Events,
		Binary:    rt.Binary,
	}
	req.CountTokens = rt.CountTokens
	req.AnthropicErrors = anthropicClient(r)
	if rt.Events == dispatch.MessagesEvents {
		// Passed to Anthropic-family channels (betas filtered for the clouds).
		req.AnthropicVersion = r.Header.Get("Anthropic-Version")
		for _, v := range r.Header.Values("Anthropic-Beta") {
			for _, b := range strings.Split(v, ",") {
				if b = strings.TrimSpace(b); b != "" {
					req.AnthropicBeta = append(req.AnthropicBeta, b)
				}
			}
		}
	}
	// w is the SERVER span's writer (proxy runs inside ServerHandler):
	// flushes go to the writer it wraps (see dispatch.Request.Flusher).
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		req.Flusher = u.Unwrap()
	}
	var model string
	if rt.Multipart {
		form, err := reqbody.ParseMultipart(body, boundary)
		if err != nil {
			s.fail(w, r, apierror.InvalidRequest(err.Error(), ""))
			return nil
		}
		if !form.ModelPresent || form.Model == "" {
			s.fail(w, r, apierror.InvalidRequest("the request names no model: set the \"model\" form field", "model"))
			return nil
		}
		// The Content-Type goes upstream as sent: it carries the boundary.
		req.Raw, req.Form, req.ContentType = true, form, r.Header.Get("Content-Type")
		model = form.Model
	} else {
		f, err := reqbody.Parse(body)
		if err != nil {
			s.fail(w, r, apierror.InvalidRequest("request body is not a valid JSON object: "+err.Error(), ""))
			return nil
		}
		if !f.ModelPresent || f.Model == "" {
			s.fail(w, r, apierror.InvalidRequest("the request names no model: set \"model\"", "model"))
			return nil
		}
		if f.Stream && !rt.Streams {
			s.fail(w, r, apierror.InvalidRequest("hopgate does not stream "+rt.Pattern+": omit \"stream\" or set it to false", "stream"))
			return nil
		}
		req.Fields, req.Stream = f, f.Stream
		model = f.Model
	}
	m := cfg.Model(model)
	if m == nil {
		s.fail(w, r, apierror.ModelNotFound("model \""+model+"\" does not exist on this gateway; GET /v1/models lists the models served"))
		return nil
	}
	if !serves(m, rt.Operation) {
		s.fail(w, r, apierror.OperationNotSupported("model \""+m.Name+"\" does not serve the \""+rt.Operation+"\" operation ("+rt.Pattern+"); it serves: "+strings.Join(operations(m), ", ")))
		return nil
	}
	req.Model = m
	return req
}

// logRequest writes the access log line of a served request.
//
//go:noinline
func (s *Server) logRequest(r *http.Request, req *dispatch.Request, res dispatch.Result) {
	// Lines: the line appended as it is described, no slog.Record
	// (telemetry/logline.go).
	s.lines.Start(r.Context(), slog.LevelInfo, "request").
		Str("method", r.Method).Str("path", r.URL.Path).
		Str("model", req.Model.Name).Str("served_model", res.ServedModel).
		Bool("stream", req.Stream).Int("status", res.Status).
		Str("outcome", res.Outcome).Str("failover_path", res.Path).
		Int("attempts", res.Attempts).Str("tenant", req.Tenant).
		Bool("aborted", res.Aborted).End()
}

// readBody reads a request body. One that declares its length (within
// limit) is read into a buffer of that size in one allocation, instead of
// growing one from 512 bytes by copying as io.ReadAll does; the
// MaxBytesReader still enforces the limit.
func readBody(r io.Reader, size, limit int64) ([]byte, error) {
	if size <= 0 || size > limit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1) // +1: the read that reports EOF
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			// More than declared (net/http stops at Content-Length, so
			// only a wrapped reader gets here): read the rest as usual.
			rest, err := io.ReadAll(r)
			return append(b, rest...), err
		}
	}
}

// operations a model serves (config defaults an empty list to chat).
func operations(m *config.Model) []string {
	if len(m.Operations) == 0 {
		return []string{config.OpChat}
	}
	return m.Operations
}

func serves(m *config.Model, op string) bool {
	return slices.Contains(operations(m), op)
}

// models answers GET /v1/models with the public model names (never the
// upstream names or channels: those are the operator's business).
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	cfg := s.cfg.Load()
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		e := apierror.MethodNotAllowed(r.Method)
		s.fail(w, r, e)
		return
	}
	if _, aerr := s.identify(cfg, r); aerr != nil {
		s.fail(w, r, aerr)
		return
	}
	if r.Header.Get("Anthropic-Version") != "" {
		s.anthropicModels(w, r, cfg)
		return
	}
	type model struct {
		ID         string   `json:"id"`
		Object     string   `json:"object"`
		Created    int64    `json:"created"`
		OwnedBy    string   `json:"owned_by"`
		Operations []string `json:"hopgate_operations"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range cfg.Models {
		out.Data = append(out.Data, model{ID: m.Name, Object: "model", Created: 0, OwnedBy: "hopgate", Operations: operations(m)})
	}
	sort.Slice(out.Data, func(i, j int) bool { return out.Data[i].ID < out.Data[j].ID })
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", dispatch.RequestID(r.Context()))
	_ = json.NewEncoder(w).Encode(out)
}

// bodyReadTimeout bounds the upload of one request body.
const bodyReadTimeout = 2 * time.Minute

// NewHTTPServer applies the main listener's timeouts: a slow client cannot
// pin a connection while sending headers or its body, idle keep-alives are
// reaped. There is no server-wide ReadTimeout or WriteTimeout: an expiring
// read deadline cancels the request context of a long stream, and streams
// legitimately last minutes (the engine bounds them with its own timers);
// the body read gets its own deadline instead.
func NewHTTPServer(addr string, h http.Handler, errLog *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(errLog.Handler(), slog.LevelWarn),
	}
}

// anthropicModels answers GET /v1/models in Anthropic's shape for an
// Anthropic client (it sends anthropic-version): the chat models, which
// are the ones POST /v1/messages serves.
func (s *Server) anthropicModels(w http.ResponseWriter, r *http.Request, cfg *config.Config) {
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	out := struct {
		Data    []model `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{Data: []model{}}
	for _, m := range cfg.Models {
		if serves(m, config.OpChat) {
			out.Data = append(out.Data, model{Type: "model", ID: m.Name, DisplayName: m.Name, CreatedAt: "1970-01-01T00:00:00Z"})
		}
	}
	sort.Slice(out.Data, func(i, j int) bool { return out.Data[i].ID < out.Data[j].ID })
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", dispatch.RequestID(r.Context()))
	_ = json.NewEncoder(w).Encode(out)
}

// ShedHeader marks a request shed by overload protection; its value is
// the shed reason (overload.ShedInFlight, ShedStreams, ShedBudget).
const ShedHeader = "X-Hopgate-Shed"

// retryAfterShed is the Retry-After of a shed request: soon, since a
// bound frees as soon as a request ends.
const retryAfterShed = time.Second

// enter admits a request past the in-flight bound, or sheds it.
//
//go:noinline
func (s *Server) enter(w http.ResponseWriter, r *http.Request) bool {
	if reason, ok := s.adm.Enter(); !ok {
		s.shed(w, r, reason)
		return false
	}
	return true
}

// openStream admits a streaming request past the stream bound, or sheds it.
//
//go:noinline
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) bool {
	if reason, ok := s.adm.OpenStream(); !ok {
		s.shed(w, r, reason)
		return false
	}
	return true
}

// shed answers a request refused by overload protection at once: 503
// engine_overloaded with Retry-After, never a queue (DESIGN.md §13).
//
// X-Hopgate-Shed names the reason (the label of hopgate_shed_requests_total):
// the chain deadline's degraded reply is engine_overloaded too, and its
// message is the operator's to choose, so a client or a soak that must tell
// "not admitted, nothing was tried" from "tried and ran out of time" reads
// the header, not the text.
func (s *Server) shed(w http.ResponseWriter, r *http.Request, reason string) {
	s.tel.Metrics.Shed(r.Context(), reason)
	w.Header().Set(ShedHeader, reason)
	msg := "hopgate is overloaded (" + reason + "): retry shortly"
	switch reason {
	case overload.ShedInFlight:
		msg = "hopgate is at its bound of requests in flight: retry shortly"
	case overload.ShedStreams:
		msg = "hopgate is at its bound of open streams: retry shortly"
	case overload.ShedBudget:
		msg = "hopgate cannot buffer this request body now (buffer budget): retry shortly"
	}
	s.failAs(w, r, apierror.EngineOverloaded(msg, retryAfterShed), telemetry.OutcomeShed)
}

// SetAdmission sets the admission bounds (nil: unbounded). Call it before
// serving.
func (s *Server) SetAdmission(a *overload.Admission) { s.adm = a }

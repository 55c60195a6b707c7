package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the time source of every time-dependent fault (slow first token,
// stall, flapping, frame delay). Tests pass clockwork.NewFakeClock().
type Clock = clockwork.Clock

// Options configure a Server. Every zero value has a documented default.
type Options struct {
	// Clock drives slow-first-token, stall, flap and frame delays.
	// Nil: the real clock.
	Clock Clock
	// Name identifies this fake channel. It appears in response ids,
	// system_fingerprint and the X-Fake-Upstream header, never in answer
	// text: replaying a request on another fake must produce identical text.
	// Empty: "fake".
	Name string
	// FrameDelay is waited (on Clock) between stream frames and between
	// chunks of endless bodies. Zero: no delay. "frame-delay=D" in a model
	// name overrides it.
	FrameDelay time.Duration
	// Models is the list served by GET /v1/models. Nil: ["fake-model"].
	Models []string
	// APIKey, when set, makes every request without
	// "Authorization: Bearer <APIKey>" fail with 401 invalid_api_key.
	// Empty: any credential (or none) is accepted.
	APIKey string
	// LogLimit is the number of most recent requests kept by Log.
	// Zero: 10000. Negative: unlimited (not for soak tests).
	LogLimit int
	// MaxBodyBytes bounds request bodies (413 above). Zero: 64 MiB.
	MaxBodyBytes int64
	// OnRequest, when set, is called with every logged request before it is
	// answered (main uses it to log; tests use it to know a request arrived).
	// It runs on the handler goroutine: keep it short.
	OnRequest func(Request)
}

// Request is one entry of the request log.
type Request struct {
	Time      time.Time
	Method    string
	Path      string
	Model     string // as sent by the client, fault suffix included; "" when none
	Effective string // Model plus any SetFault override: what the fault was parsed from
	Stream    bool
	Header    http.Header // clone of the request headers
	Body      []byte
	Attempt   int // 1-based count of requests naming Model; 0 when Model is ""
}

// Server is the fake provider. It implements http.Handler; serve it with
// httptest.NewServer or an http.Server. Call Close before shutting the
// listener down so handlers parked by no-headers, stalls or endless bodies
// return.
type Server struct {
	opts      Options
	clock     Clock
	closed    chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	log       []Request
	models    map[string]*modelState
	overrides map[string]string
	seq       int
}

// modelState is what the fake remembers per requested model name.
type modelState struct {
	attempts      int       // requests naming the model since New or Reset
	faultAttempts int       // requests since the fault was last set (once/times)
	firstSeen     time.Time // first request since the fault was last set (flap)
}

var _ http.Handler = (*Server)(nil)

// New returns a Server with opts' defaults filled in.
func New(opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = clockwork.NewRealClock()
	}
	if opts.Name == "" {
		opts.Name = "fake"
	}
	if opts.Models == nil {
		opts.Models = []string{"fake-model"}
	}
	if opts.LogLimit == 0 {
		opts.LogLimit = 10000
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	return &Server{
		opts:      opts,
		clock:     opts.Clock,
		closed:    make(chan struct{}),
		models:    map[string]*modelState{},
		overrides: map[string]string{},
	}
}

// Close releases every handler waiting on a fault (no-headers, slow first
// token, stall, frame delay, endless bodies): each aborts its connection at
// once, so no half answer looks complete. Later waits abort immediately;
// requests without waits are still answered. Close is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// Log returns a deep copy of the request log, oldest first.
func (s *Server) Log() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, r := range s.log {
		r.Header = r.Header.Clone()
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// Attempts returns the number of requests that named model, exactly as sent
// (fault suffix included), since New or the last Reset.
func (s *Server) Attempts(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.models[model]; st != nil {
		return st.attempts
	}
	return 0
}

// Reset forgets the request log, attempt counters, flap clocks and SetFault
// overrides: the server is as New left it.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
	s.models = map[string]*modelState{}
	s.overrides = map[string]string{}
	s.seq = 0
}

// SetFault makes requests naming model behave as "model|fault" from now on
// (the demo's incident script: make "gpt-4o-mini" start failing). An empty
// fault removes the override. once/times and flap count from this call. The
// fault is validated; an invalid one is not installed.
func (s *Server) SetFault(model, fault string) error {
	if fault != "" {
		if _, err := ParseFault(model + "|" + fault); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fault == "" {
		delete(s.overrides, model)
	} else {
		s.overrides[model] = fault
	}
	if st := s.models[model]; st != nil {
		st.faultAttempts, st.firstSeen = 0, time.Time{}
	}
	return nil
}

// admission is what record decides for one request under the lock.
type admission struct {
	req          Request
	seq          int
	faultAttempt int
	firstSeen    time.Time
}

func (s *Server) record(r *http.Request, body []byte, model string, stream bool) admission {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	a := admission{seq: s.seq, req: Request{
		Time: now, Method: r.Method, Path: r.URL.Path, Model: model, Effective: model,
		Stream: stream, Header: r.Header.Clone(), Body: body,
	}}
	if model != "" {
		st := s.models[model]
		if st == nil {
			st = &modelState{}
			s.models[model] = st
		}
		st.attempts++
		st.faultAttempts++
		if st.firstSeen.IsZero() {
			st.firstSeen = now
		}
		a.req.Attempt, a.faultAttempt, a.firstSeen = st.attempts, st.faultAttempts, st.firstSeen
		if o, ok := s.overrides[model]; ok {
			a.req.Effective = model + "|" + o
		}
	}
	s.log = append(s.log, a.req)
	if lim := s.opts.LogLimit; lim > 0 && len(s.log) > lim {
		// Copy down rather than reslice so a soak test does not pin the
		// whole history in the backing array.
		n := copy(s.log, s.log[len(s.log)-lim:])
		clear(s.log[n:])
		s.log = s.log[:n]
	}
	return a
}

// endpoint is one route of the fake API.
type endpoint struct {
	method string
	form   bool // multipart body: the model is a form field
	serve  func(*exchange)
}

var routes = map[string]endpoint{
	"/chat/completions":     {method: http.MethodPost, serve: serveChat},
	"/completions":          {method: http.MethodPost, serve: serveCompletions},
	"/responses":            {method: http.MethodPost, serve: serveResponses},
	"/embeddings":           {method: http.MethodPost, serve: serveEmbeddings},
	"/images/generations":   {method: http.MethodPost, serve: serveImages},
	"/audio/speech":         {method: http.MethodPost, serve: serveSpeech},
	"/audio/transcriptions": {method: http.MethodPost, form: true, serve: serveTranscription},
	"/models":               {method: http.MethodGet},
}

// ServeHTTP answers one request. Paths are accepted with or without the
// "/v1" prefix. Some faults end the handler with panic(http.ErrAbortHandler),
// which net/http turns into an aborted connection: serve the Server from a
// real listener, not a ResponseRecorder.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	ep, ok := routes[path]
	if !ok {
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "fakeupstream: unknown path "+r.URL.Path)
		return
	}
	if r.Method != ep.method {
		w.Header().Set("Allow", ep.method)
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method_not_allowed", "fakeupstream: use "+ep.method)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		s.record(r, body, "", false)
		if errors.As(err, new(*http.MaxBytesError)) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "fakeupstream: body too large")
		}
		return // otherwise the client went away mid-body
	}
	var (
		p    parsed
		perr error
	)
	if ep.form {
		p, perr = parseForm(r, body)
	} else if ep.serve != nil {
		p, perr = parseJSON(body)
	}
	a := s.record(r, body, p.Model, p.Stream)
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(a.req)
	}
	w.Header().Set("X-Fake-Upstream", s.opts.Name)
	w.Header().Set("X-Request-Id", "req_"+s.opts.Name+"_"+itoa(a.seq))
	if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	if ep.serve == nil {
		serveModels(w, s)
		return
	}
	if perr != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "fakeupstream: "+perr.Error())
		return
	}
	if p.Model == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "missing_model", "you must provide a model parameter")
		return
	}
	f, err := ParseFault(a.req.Effective)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown_fault", err.Error())
		return
	}
	if !f.active(a.faultAttempt) {
		f.Kind = KindNone
	}
	ex := &exchange{
		s: s, w: w, r: r, rc: http.NewResponseController(w), ctx: r.Context(),
		req: p, fault: f, seq: a.seq, now: a.req.Time,
		model: p.Model, delay: s.opts.FrameDelay,
	}
	if f.FrameDelay > 0 {
		ex.delay = f.FrameDelay
	}
	if ex.preFault(a.firstSeen) {
		return
	}
	ep.serve(ex)
}

// exchange is one request being answered.
type exchange struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	ctx    context.Context
	req    parsed
	fault  Fault
	seq    int
	now    time.Time
	model  string // as requested: echoed in responses
	delay  time.Duration
	frames int // frames written, for FrameDelay
}

// preFault applies the faults decided before any endpoint logic (status
// errors, transport failures, flapping). It reports whether it answered.
func (ex *exchange) preFault(firstSeen time.Time) bool {
	f := ex.fault
	switch f.Kind {
	case KindStatus:
		if f.HasRetryAfter {
			ex.w.Header().Set("Retry-After", itoa(int(f.RetryAfter/time.Second)))
		}
		writeStatus(ex.w, f.Status)
	case KindContextLength:
		writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "messages",
			"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.")
	case KindContentFilter:
		writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "content_filter", "prompt",
			"The response was filtered due to the prompt triggering the content management policy.")
	case KindReset:
		ex.reset()
	case KindNoHeaders:
		// Accepted, read, never answered: only the client (or Close) ends it.
		select {
		case <-ex.ctx.Done():
		case <-ex.s.closed:
			ex.abort() // returning would send an empty 200
		}
	case KindRedirect:
		ex.w.Header().Set("Location", "http://127.0.0.2:1/elsewhere")
		ex.w.WriteHeader(http.StatusFound)
	case KindFlap:
		if flapDown(f, ex.now.Sub(firstSeen)) {
			writeStatus(ex.w, http.StatusServiceUnavailable)
			return true
		}
		ex.fault.Kind = KindNone
		return false
	case KindRejectPrefill:
		if ex.req.lastRole() == "assistant" {
			writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "messages",
				"This model does not support assistant message prefill. The conversation must end with a user message.")
			return true
		}
		ex.fault.Kind = KindNone
		return false
	default:
		return false
	}
	return true
}

// flapDown reports whether a flapping model is down after elapsed time
// since its first request.
func flapDown(f Fault, elapsed time.Duration) bool {
	if f.Period > 0 {
		elapsed %= f.Period
	}
	return elapsed < f.Duration
}

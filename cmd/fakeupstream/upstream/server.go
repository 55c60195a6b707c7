package upstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
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

	// AzureAPIKey is the key the azure dialect accepts in the api-key
	// header (and, on the v1 API, as a bearer token). Any other key is a
	// 401 in Azure's shape. Empty: DefaultAzureAPIKey.
	AzureAPIKey string
	// AzureADToken is the Microsoft Entra ID access token the azure dialect
	// accepts as "Authorization: Bearer". Empty: DefaultAzureADToken.
	AzureADToken string
	// AnthropicAPIKey is the x-api-key the anthropic dialect accepts.
	// Empty: DefaultAnthropicAPIKey.
	AnthropicAPIKey string
	// AWSAccessKeyID, AWSSecretAccessKey and AWSSessionToken are the
	// credentials whose SigV4 signatures the bedrock dialect accepts; an
	// unknown access key is UnrecognizedClientException, a signature made
	// with another secret InvalidSignatureException. Empty key or secret:
	// DefaultAWSAccessKeyID and DefaultAWSSecretAccessKey; empty session
	// token: requests must carry none.
	AWSAccessKeyID     string
	AWSSecretAccessKey string
	AWSSessionToken    string
	// AWSRegion is the region signatures must be scoped to. Empty:
	// DefaultAWSRegion.
	AWSRegion string
	// AWSMaxSkew, when positive, refuses signatures whose X-Amz-Date is
	// further than this from Clock (AWS allows 5 minutes). Zero: not
	// checked, since tests run a fake clock and the SDK signs with the
	// wall clock.
	AWSMaxSkew time.Duration
	// GoogleProject is the project the vertex dialect serves; another
	// project in the URL is a 403 PERMISSION_DENIED. Empty:
	// DefaultGoogleProject.
	GoogleProject string
	// GoogleTokenLifetime is the lifetime of access tokens minted by the
	// token endpoint, on Clock. Zero: DefaultGoogleTokenLifetime.
	GoogleTokenLifetime time.Duration
	// CloudBetas are the anthropic-beta values Bedrock (anthropic_beta in
	// the body) and Vertex (the anthropic-beta header) accept; any other is
	// a 400 there. The anthropic dialect accepts every beta. Nil:
	// DefaultCloudBetas.
	CloudBetas []string
}

// Defaults of the dialects' credentials: what a test configures its
// gateway channel with when it does not set its own.
const (
	DefaultAzureAPIKey         = "fake-azure-api-key"
	DefaultAzureADToken        = "fake-entra-id-token"
	DefaultAnthropicAPIKey     = "sk-ant-fake"
	DefaultAWSAccessKeyID      = "AKIAFAKEUPSTREAM0001"
	DefaultAWSSecretAccessKey  = "fakeupstream+secret+access+key/for/tests"
	DefaultAWSRegion           = "us-east-1"
	DefaultGoogleProject       = "fake-project"
	DefaultGoogleTokenLifetime = time.Hour
)

// Request is one entry of the request log.
type Request struct {
	Time      time.Time
	Method    string
	Path      string
	Model     string // as sent (URL or body), fault suffix included; "" when none
	Effective string // Model plus any SetFault override: what the fault was parsed from
	Stream    bool
	Header    http.Header // clone of the request headers
	Body      []byte
	Attempt   int     // 1-based count of requests naming Model; 0 when Model is ""
	Dialect   Dialect // the API the path named
	// Anthropic is the decoded body of an anthropic, bedrock or vertex
	// request (nil for other dialects, or when the body did not decode).
	// Log shares it between copies: do not modify it.
	Anthropic *MessagesRequest
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

	signer *v4.Signer

	mu        sync.Mutex
	log       []Request
	models    map[string]*modelState
	overrides map[string]string
	seq       int
	accounts  map[string]serviceAccount // by client_email: keys the token endpoint trusts
	tokens    map[string]issuedToken    // access tokens the vertex dialect accepts
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
	setDefault(&opts.AzureAPIKey, DefaultAzureAPIKey)
	setDefault(&opts.AzureADToken, DefaultAzureADToken)
	setDefault(&opts.AnthropicAPIKey, DefaultAnthropicAPIKey)
	setDefault(&opts.AWSAccessKeyID, DefaultAWSAccessKeyID)
	setDefault(&opts.AWSSecretAccessKey, DefaultAWSSecretAccessKey)
	setDefault(&opts.AWSRegion, DefaultAWSRegion)
	setDefault(&opts.GoogleProject, DefaultGoogleProject)
	if opts.GoogleTokenLifetime <= 0 {
		opts.GoogleTokenLifetime = DefaultGoogleTokenLifetime
	}
	if opts.CloudBetas == nil {
		opts.CloudBetas = DefaultCloudBetas
	}
	return &Server{
		opts:      opts,
		clock:     opts.Clock,
		closed:    make(chan struct{}),
		signer:    newSigner(),
		models:    map[string]*modelState{},
		overrides: map[string]string{},
		accounts:  map[string]serviceAccount{},
		tokens:    map[string]issuedToken{},
	}
}

func setDefault(s *string, def string) {
	if *s == "" {
		*s = def
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

// record logs the request (req carries what the handler parsed: Model,
// Stream, Body, Dialect, Anthropic) and counts its attempt.
func (s *Server) record(r *http.Request, req Request) admission {
	now := s.clock.Now()
	model := req.Model
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	req.Time, req.Method, req.Path, req.Effective, req.Header = now, r.Method, r.URL.Path, model, r.Header.Clone()
	a := admission{seq: s.seq, req: req}
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
	method   string
	form     bool // multipart body: the model is a form field
	messages bool // an Anthropic Messages body
	count    bool // a token count (count.go): a Messages body without max_tokens
	serve    func(*exchange)
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

// ServeHTTP answers one request in the dialect its path names (see the
// package doc). OpenAI paths are accepted with or without the "/v1"
// prefix. Some faults end the handler with panic(http.ErrAbortHandler),
// which net/http turns into an aborted connection: serve the Server from a
// real listener, not a ResponseRecorder.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if realtimePath(r.URL.Path) {
		s.serveRealtime(w, r) // realtime.go: a WebSocket, not a request
		return
	}
	tgt := route(r)
	ex := &exchange{
		s: s, w: w, r: r, rc: http.NewResponseController(w), ctx: r.Context(),
		tgt: tgt, dialect: tgt.dialect, delay: s.opts.FrameDelay, now: s.clock.Now(),
	}
	if !tgt.found {
		ex.clientError(http.StatusNotFound, "unknown_url", "fakeupstream: unknown path "+r.URL.Path)
		return
	}
	if r.Method != tgt.ep.method {
		w.Header().Set("Allow", tgt.ep.method)
		ex.clientError(http.StatusMethodNotAllowed, "method_not_allowed", "fakeupstream: use "+tgt.ep.method)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		s.record(r, Request{Body: body, Dialect: tgt.dialect})
		if errors.As(err, new(*http.MaxBytesError)) {
			ex.clientError(http.StatusRequestEntityTooLarge, "request_too_large", "fakeupstream: body too large")
		}
		return // otherwise the client went away mid-body
	}
	ex.raw = body
	perr := ex.parse(body)
	a := s.record(r, Request{Model: ex.model, Stream: ex.req.Stream, Body: body, Dialect: tgt.dialect, Anthropic: ex.msgs})
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(a.req)
	}
	ex.seq, ex.now = a.seq, a.req.Time
	ex.setIDHeaders()
	if !ex.authorized() {
		return
	}
	if tgt.ep.serve == nil {
		serveModels(w, s)
		return
	}
	if perr != nil {
		ex.clientError(http.StatusBadRequest, "invalid_request", "fakeupstream: "+perr.Error())
		return
	}
	if !tgt.ep.count && !ex.valid() {
		return
	}
	if ex.model == "" {
		ex.clientError(http.StatusBadRequest, "missing_model", "you must provide a model parameter")
		return
	}
	f, err := ParseFault(a.req.Effective)
	if err != nil {
		ex.clientError(http.StatusBadRequest, "unknown_fault", err.Error())
		return
	}
	if msg := f.dialectError(ex.dialect); msg != "" {
		ex.clientError(http.StatusBadRequest, "unknown_fault", "fakeupstream: "+msg)
		return
	}
	if !f.active(a.faultAttempt) {
		f.Kind = KindNone
	}
	ex.fault = f
	if f.FrameDelay > 0 {
		ex.delay = f.FrameDelay
	}
	if f.HeaderDelay > 0 && ex.wait(f.HeaderDelay) != nil {
		return // the client left while the request queued
	}
	if ex.preFault(a.firstSeen) {
		return
	}
	tgt.ep.serve(ex)
}

// parse reads the body as the dialect's endpoint expects it and sets
// ex.req, ex.msgs and ex.model (the URL's model wins over the body's).
func (ex *exchange) parse(body []byte) error {
	var err error
	switch {
	case ex.tgt.ep.form:
		ex.req, err = parseForm(ex.r, body)
	case ex.tgt.ep.count:
		err = ex.parseCount(body)
	case ex.tgt.ep.messages:
		var m *MessagesRequest
		if m, err = parseMessagesRequest(body); err == nil {
			ex.msgs, ex.req = m, parsedFromMessages(m)
		}
	case ex.dialect == DialectOAuth:
		ex.req.Model = TokenModel
	case ex.dialect == DialectElevenLabs:
		ex.req, err = parseElevenLabs(body)
	case ex.tgt.ep.serve != nil:
		ex.req, err = parseJSON(body)
	}
	if ex.tgt.model != "" {
		ex.req.Model = ex.tgt.model
	}
	if ex.dialect == DialectBedrock || ex.dialect == DialectVertex {
		ex.req.Stream = ex.tgt.stream
	}
	ex.model = ex.req.Model
	return err
}

// authorized checks the dialect's credential and answers its 401/403 when
// it is wrong.
func (ex *exchange) authorized() bool {
	switch ex.dialect {
	case DialectOpenAI:
		if k := ex.s.opts.APIKey; k != "" && ex.r.Header.Get("Authorization") != "Bearer "+k {
			writeError(ex.w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
			return false
		}
	case DialectAzure:
		return ex.azureAuthorized()
	case DialectAnthropic:
		return ex.anthropicAuthorized()
	case DialectBedrock:
		return ex.bedrockAuthorized()
	case DialectVertex:
		return ex.vertexAuthorized()
	case DialectElevenLabs:
		return ex.elevenLabsAuthorized()
	}
	return true
}

// valid checks what the dialect requires of a request beyond its JSON
// shape (api-version, anthropic-version, max_tokens, ...) and answers the
// provider's 4xx when it is missing.
func (ex *exchange) valid() bool {
	switch ex.dialect {
	case DialectAzure:
		return ex.azureValid()
	case DialectAnthropic, DialectBedrock, DialectVertex:
		if ex.dialect == DialectAnthropic && ex.r.Header.Get("Anthropic-Version") == "" {
			ex.clientError(http.StatusBadRequest, "invalid_request", "anthropic-version: header is required")
			return false
		}
		if msg := ex.msgs.check(ex.dialect, ex.s.opts.Name); msg != "" {
			ex.clientError(http.StatusBadRequest, "invalid_request", msg)
			return false
		}
		return ex.betasAccepted()
	}
	return true
}

// exchange is one request being answered.
type exchange struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	rc      *http.ResponseController
	ctx     context.Context
	tgt     target
	dialect Dialect
	raw     []byte // the request body
	req     parsed
	msgs    *MessagesRequest // the anthropic, bedrock and vertex dialects
	fault   Fault
	seq     int
	now     time.Time
	model   string // as requested: echoed in responses
	delay   time.Duration
	frames  int // frames written, for FrameDelay
}

// preFault applies the faults decided before any endpoint logic (status
// errors, transport failures, flapping). It reports whether it answered.
func (ex *exchange) preFault(firstSeen time.Time) bool {
	f := ex.fault
	switch f.Kind {
	case KindStatus:
		ex.statusFault(f.Status)
	case KindContextLength:
		ex.contextLength()
	case KindContentFilter:
		if ex.dialect == DialectAzure {
			ex.azureContentFilter()
			return true
		}
		writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "content_filter", "prompt",
			"The response was filtered due to the prompt triggering the content management policy.")
	case KindModelNotReady:
		ex.bedrockError(http.StatusTooManyRequests, "ModelNotReadyException",
			"Model is not ready for inference. Wait and try your request again. Refer to https://docs.aws.amazon.com/bedrock/latest/userguide/invoke-imported-model.html#handle-model-not-ready-exception.")
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
			ex.statusFault(http.StatusServiceUnavailable)
			return true
		}
		ex.fault.Kind = KindNone
		return false
	case KindRejectPrefill:
		if ex.req.lastRole() == "assistant" {
			const msg = "This model does not support assistant message prefill. The conversation must end with a user message."
			if ex.msgs != nil {
				ex.clientError(http.StatusBadRequest, "invalid_request", msg)
			} else {
				writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "messages", msg)
			}
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

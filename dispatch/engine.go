package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/breaker"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/telemetry"
)

// Limits that bound memory per request.
const (
	// DefaultMaxFrame bounds one upstream SSE frame.
	DefaultMaxFrame = 1 << 20
	// DefaultMaxHeld bounds what the stream gate holds before commit.
	DefaultMaxHeld = 1 << 20
	// DefaultMaxErrorBody bounds an upstream error body we read and pass on.
	DefaultMaxErrorBody = 1 << 20
	// DefaultMaxResponseBody bounds a non-streaming upstream body when the
	// config says nothing (a Config built in code); a loaded config has a
	// bound per operation (overload.max_response_bytes, 16 MiB, images and
	// embeddings 64 MiB). Anything beyond it is a failed hop.
	DefaultMaxResponseBody = 64 << 20
)

// Options configure an Engine. Every field has a working nil default.
type Options struct {
	// Clock drives every timer of the request path (header timeout, gate
	// timeout, idle timeout, chain deadline, backoff) and the breakers.
	// Nil: the real clock.
	Clock clockwork.Clock
	// Transport sends hops upstream. Nil: NewTransport().
	Transport http.RoundTripper
	// Breakers is the process-wide breaker registry. Nil: a new one driven
	// by Clock, whose transitions feed Telemetry.
	Breakers *breaker.Set
	// Warnings is the process-wide early-warning registry (channels with
	// early_warning enabled). Nil: a new one driven by Clock.
	Warnings *earlywarning.Set
	// Telemetry receives spans, metrics and failover paths. Nil: telemetry.Noop().
	Telemetry *telemetry.Telemetry
	// Logger receives one line per request. Nil: slog.Default().
	Logger *slog.Logger
	// Version is sent upstream in User-Agent.
	Version string
	// Jitter returns a number in [0,1) for backoff jitter. Nil: math/rand/v2.
	Jitter func() float64
	// MaxFrame and MaxHeld override the SSE frame and gate-hold limits.
	MaxFrame, MaxHeld int
	// MaxResponseBody overrides DefaultMaxResponseBody, the bound on a
	// buffered (non-streaming) upstream body.
	MaxResponseBody int64
	// Providers resolves the cloud credential chains of bedrock, vertex and
	// Entra ID channels (the zero value: each SDK's default chain).
	Providers provider.Options
	// Budget is the process's buffer budget (DESIGN.md §13): held gate
	// frames and buffered answers count against it, and a hop whose
	// buffer would cross it fails as retryable. Nil: unbounded.
	Budget *overload.Budget
}

// Engine applies the four layers to requests. One Engine serves the whole
// process; it is safe for concurrent use.
type Engine struct {
	clock     clockwork.Clock
	transport http.RoundTripper
	breakers  *breaker.Set
	warnings  *earlywarning.Set
	tel       *telemetry.Telemetry
	log       *slog.Logger
	userAgent string
	jitter    func() float64
	maxFrame  int
	maxHeld   int
	maxBody   int64 // overrides the config's per-operation bound when > 0
	budget    *overload.Budget
	// chains caches the hopgate.chain attribute of each model (chain).
	chains  sync.Map // chainKey -> string
	nchains atomic.Int64
	// upstreams holds each channel's provider adapter (its credentials),
	// built on first use per *config.Channel (a reload brings new ones).
	upstreams  sync.Map // *config.Channel -> *upstreamEntry
	nupstreams atomic.Int64
	providers  provider.Options
	// streams are the committed streams being passed on (shutdown.go).
	streams openStreams
	// live are the open realtime sessions (realtime.go: Sessions).
	live Sessions
	// windows are the channels' rate-limit windows (windows.go).
	windows channelWindows
	// The client that dials realtime upstreams (realtime.go).
	rtOnce   sync.Once
	rtClient *http.Client
}

// New builds an Engine.
func New(o Options) *Engine {
	e := &Engine{
		clock:     o.Clock,
		tel:       o.Telemetry,
		log:       o.Logger,
		userAgent: "hopgate/" + o.Version,
		jitter:    o.Jitter,
		maxFrame:  o.MaxFrame,
		maxHeld:   o.MaxHeld,
		maxBody:   o.MaxResponseBody,
	}
	if e.clock == nil {
		e.clock = clockwork.NewRealClock()
	}
	if e.tel == nil {
		e.tel = telemetry.Noop()
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if o.Version == "" {
		e.userAgent = "hopgate"
	}
	if e.jitter == nil {
		e.jitter = rand.Float64
	}
	if e.maxFrame <= 0 {
		e.maxFrame = DefaultMaxFrame
	}
	if e.maxHeld <= 0 {
		e.maxHeld = DefaultMaxHeld
	}
	e.budget = o.Budget
	tr := o.Transport
	if tr == nil {
		tr = NewTransport()
	}
	// Hops go straight to the transport, not through an http.Client: a
	// transport never follows a redirect (an upstream must not be able to
	// send hopgate, and the channel credential, to another host), and the
	// client's redirect bookkeeping (a copy of the request headers per
	// request) buys nothing here.
	e.transport = tr
	e.providers = o.Providers
	e.breakers = o.Breakers
	if e.breakers == nil {
		e.breakers = breaker.NewSet(breaker.WithClock(e.clock))
	}
	e.warnings = o.Warnings
	if e.warnings == nil {
		e.warnings = earlywarning.NewSet(earlywarning.WithClock(e.clock))
	}
	return e
}

// NewTransport is the upstream transport: keep-alive pools sized for a
// gateway, bounded dial and TLS handshake, no transparent compression (the
// gate must read the bytes the provider sent), no response header timeout
// (L4 is ours, per model).
func NewTransport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    256,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// Breakers exposes the registry (admin page, metrics callback).
func (e *Engine) Breakers() *breaker.Set { return e.breakers }

// RetainChannels drops the breakers and early-warning detectors of the
// channels cfg does not have (a reload removed them). Those of the
// channels it keeps are untouched: an open breaker stays open.
func (e *Engine) RetainChannels(cfg *config.Config) {
	keep := func(name string) bool { return cfg.Channel(name) != nil }
	e.breakers.Retain(keep)
	e.warnings.Retain(keep)
}

// Clock is the engine's clock.
func (e *Engine) Clock() clockwork.Clock { return e.clock }

// BreakerPolicy converts a resolved channel policy.
func BreakerPolicy(b config.Breaker) breaker.Policy {
	p := breaker.Policy{
		Window:      b.Window,
		Failures:    b.Failures,
		Cooldown:    b.Cooldown,
		Threshold:   b.Threshold,
		MinRequests: b.MinRequests,
	}
	if b.Mode == config.BreakerRate {
		p.Mode = breaker.RateMode
	}
	return p
}

// breakerFor returns the channel's breaker, created on first use.
func (e *Engine) breakerFor(ch *config.Channel) *breaker.Breaker {
	return e.breakers.Get(ch.ID, BreakerPolicy(ch.Breaker))
}

// BreakerObservations feeds the hopgate_breaker_state gauge for every
// channel of cfg (channels never used yet report closed).
func (e *Engine) BreakerObservations(cfg *config.Config) []telemetry.BreakerObservation {
	out := make([]telemetry.BreakerObservation, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		out = append(out, telemetry.BreakerObservation{
			Channel:       ch.ID,
			ChannelRegion: ch.Region,
			State:         int(e.breakerFor(ch).State()),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

// Request is one client request, authenticated and resolved by package api.
type Request struct {
	Config    *config.Config
	Model     *config.Model
	Operation string // config operation name, e.g. "chat"
	// Path is appended to the channel base URL, e.g. "/chat/completions".
	Path string
	// BodyHold is Body's bytes against the buffer budget; the engine
	// releases it when it lets go of Body (a committed stream), the caller
	// at the end of the request.
	BodyHold overload.Hold
	// Body is the client body as received; only the model field is rewritten.
	// Serve sets it to nil once it has committed a streamed answer that no
	// later hop can need (every hop but a mid-stream resume is over then).
	Body   []byte
	Fields reqbody.Fields
	// ContentType of the body (multipart uploads keep their boundary).
	ContentType string
	// Raw bodies (multipart) are not JSON: they are sent as they are, except
	// the value of the Form's model part, rewritten to the upstream model.
	Raw  bool
	Form reqbody.Form
	// Binary: a 2xx answer may be binary (audio/speech). One whose
	// Content-Type is neither JSON nor text is committed at headers and
	// streamed through (passthrough.go) instead of buffered and inspected.
	Binary bool
	// OnResponseDone, if set, is called for every response.done of a
	// committed realtime session (ServeRealtime): the wallet's charge.
	OnResponseDone func(ResponseDone)
	// Tenant pays for the request: the client key's tenant (the key id
	// unless configured otherwise). A span attribute only, never a metric
	// label.
	Tenant string
	// Streaming responses are SSE (chat, completions, responses with stream:true).
	Stream bool
	// Events selects the frame classifier: chat-style chunks or Responses events.
	Events EventStyle
	// AnthropicVersion and AnthropicBeta are an Anthropic client's
	// anthropic-version and anthropic-beta headers, passed to
	// Anthropic-family channels (betas filtered for Bedrock and Vertex).
	AnthropicVersion string
	AnthropicBeta    []string
	// AnthropicErrors: hopgate's own errors go out in Anthropic's shape
	// even off the Messages routes (the client sent anthropic-version,
	// DESIGN.md §14); MessagesEvents implies it.
	AnthropicErrors bool
	// CountTokens: POST /v1/messages/count_tokens (count.go). The chain is
	// walked as for a request, but no hop's outcome reaches a breaker.
	CountTokens bool
	// Flusher, if set, is flushed instead of the ResponseWriter the answer
	// is written to. Package api passes the writer under the SERVER span's
	// (telemetry.ServerHandler), whose Flush, an http.Flusher's, cannot
	// return the flush error the responder needs; the bytes still go
	// through the wrapper, so the server span's byte count stays exact.
	Flusher http.ResponseWriter
	// Delivering, if set, is called once, just before the last write of an
	// answer (a buffered body, a stream's closing frame, the in-band error
	// frame of a stream cut after commit; before the first byte of a
	// binary body), with its usage and what it delivered so far: the
	// charge is final only after that write (delivery.go). It runs on the
	// request's goroutine and delays the last write by its duration.
	Delivering func(Usage, Delivered)
}

// anthropicErrors reports a client that reads hopgate's errors in
// Anthropic's shape.
func (r *Request) anthropicErrors() bool { return r.Events == MessagesEvents || r.AnthropicErrors }

// EventStyle is the client's dialect of bodies and stream events.
type EventStyle int

const (
	// ChatEvents: OpenAI chat.completion chunks (and /v1/completions).
	ChatEvents EventStyle = iota
	// ResponsesEvents: OpenAI Responses events.
	ResponsesEvents
	// MessagesEvents: Anthropic Messages (POST /v1/messages): errors,
	// stream events and in-band errors in Anthropic's shape.
	MessagesEvents
)

// Result summarises a served request (for the access log line and tests).
type Result struct {
	Outcome     string
	Status      int
	Path        string
	ServedModel string
	Attempts    int
	// Aborted: the answer was cut after commit with no way to say so
	// in-band (a binary body). The HTTP layer must abort the connection
	// (panic(http.ErrAbortHandler)) so the client sees a truncated
	// transfer, never a clean end.
	Aborted bool
	// Answered: an upstream answer was committed to the client (complete
	// or not). False for hopgate's own replies and final upstream errors
	// passed through: those are never charged.
	Answered bool
	// Usage is what the hop that served the answer reported (the
	// continuing hop's, for a resumed stream).
	Usage Usage
	// Delivered counts what a streamed answer delivered, for an estimate
	// when no usage was reported (a stream cut after commit).
	Delivered Delivered
}

// Usage is token usage as an upstream reported it.
type Usage struct {
	InputTokens, OutputTokens int64
	Present                   bool
}

// Delivered is what a committed stream delivered to the client.
type Delivered struct {
	// TextBytes: bytes of answer text (choice 0's content, completions
	// text, Responses output_text), after JSON unescaping.
	TextBytes int64
	// ToolCallFrames: frames carrying tool-call deltas (about one token
	// each).
	ToolCallFrames int64
}

// upstreamEntry is a channel's provider adapter, or why it could not be
// built (a credential chain that failed: every hop on it fails, retryable,
// until a reload).
type upstreamEntry struct {
	up  *provider.Upstream
	err error
}

// maxUpstreams bounds Engine.upstreams across reloads.
const maxUpstreams = 4096

// upstreamFor returns ch's provider adapter, built on first use.
func (e *Engine) upstreamFor(ch *config.Channel) (*provider.Upstream, error) {
	if v, ok := e.upstreams.Load(ch); ok {
		en := v.(*upstreamEntry)
		return en.up, en.err
	}
	up, err := provider.New(context.Background(), ch, e.providers)
	en := &upstreamEntry{up, err}
	if e.nupstreams.Load() < maxUpstreams {
		if v, loaded := e.upstreams.LoadOrStore(ch, en); loaded {
			en = v.(*upstreamEntry)
		} else {
			e.nupstreams.Add(1)
		}
	}
	return en.up, en.err
}

// CheckChannels resolves the credential chain of every channel of cfg, so a
// missing cloud credential is a start-up (or reload) error that names the
// channel, not a failed hop later.
func (e *Engine) CheckChannels(cfg *config.Config) error {
	var errs []error
	for _, ch := range cfg.Channels {
		if _, err := e.upstreamFor(ch); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Budget is the engine's buffer budget (nil: unbounded).
func (e *Engine) Budget() *overload.Budget { return e.budget }

// maxResponse bounds one buffered answer of req.
func (e *Engine) maxResponse(req *Request) int64 {
	if e.maxBody > 0 {
		return e.maxBody
	}
	if req.Config != nil {
		if n := req.Config.Overload.MaxResponse(req.Operation); n > 0 {
			return n
		}
	}
	return DefaultMaxResponseBody
}

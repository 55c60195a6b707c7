package config

import (
	"slices"
	"time"

	"github.com/hopgate/hopgate/internal/money"
)

// Config is a loaded, validated and resolved configuration. Everything the
// request path needs is precomputed here (sorted chains, resolved policies,
// credentials read from the environment) so that serving never re-derives it.
type Config struct {
	Listen       string
	AdminListen  string
	Region       string
	MaxBodyBytes int64 // request body limit, default 10 MiB

	Auth      Auth
	Admin     Admin
	Telemetry Telemetry
	Status    Status
	Overload  Overload
	Realtime  Realtime // realtime sessions (realtime.go)
	// Tenants and wallets (DESIGN §9; wallet.go).
	Store     Store
	Billing   Billing
	AdminAuth AdminAuth
	// Tenant limits (DESIGN §16; ratelimits.go).
	RateLimits RateLimits

	Channels []*Channel          // file order
	Models   []*Model            // file order
	channels map[string]*Channel // by id
	models   map[string]*Model   // by public name
}

// Channel returns the channel with the given id, or nil. On a Config built
// in code rather than by Parse (tests of other packages) the index is empty,
// so it falls back to a scan of Channels.
func (c *Config) Channel(id string) *Channel {
	if c.channels != nil {
		return c.channels[id]
	}
	for _, ch := range c.Channels {
		if ch.ID == id {
			return ch
		}
	}
	return nil
}

// Model returns the public model with the given name, or nil. Like Channel,
// it scans Models when the Config was not built by Parse.
func (c *Config) Model(name string) *Model {
	if c.models != nil {
		return c.models[name]
	}
	for _, m := range c.Models {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Auth is the client authentication of the main listener.
type Auth struct {
	Mode string // "keys" (default) | "none"
	Keys []Key
}

// Key is one client key: only the sha256 of the bearer token is stored.
type Key struct {
	ID     string
	SHA256 [32]byte
	// Tenant pays for the key's requests (DESIGN §9); default the key id.
	// Admin keys have none.
	Tenant string
}

// Admin configures the admin listener.
type Admin struct {
	// BearerToken, when non-empty, is required on every admin endpoint but
	// /healthz and /readyz. Read from the env var named by token_env.
	BearerToken string
}

// Telemetry configures what hopgate records beyond the OTEL_* env vars.
type Telemetry struct {
	HealthySampleRatio float64 // share of healthy traces kept; default 1
	RecordContent      bool    // reserved: config refuses true until content recording exists
	FailoverLogSize    int     // entries kept for /admin/failovers; default 200
	Path               bool    // send X-Hopgate-Path; default true
	// TrustInboundTrace: continue the client's traceparent (default true).
	// False on a public endpoint: each request starts its own trace, with
	// a link to the client's, so clients cannot choose trace ids.
	TrustInboundTrace bool
	// TraceURL links every trace id on the admin pages (and the
	// dashboards' exemplars) to the operator's trace UI: a template with
	// {trace_id}, e.g. http://jaeger:16686/trace/{trace_id}. Empty: none.
	TraceURL        string
	TraceRingTraces int   // traces /admin/traces holds; default 2000
	TraceRingBytes  int64 // estimated bytes it may hold; default 16 MiB
}

// Status configures the public status page (/status, /status.json).
type Status struct {
	Enabled bool // default true
}

// TraceURLPlaceholder is what telemetry.trace_url must contain.
const TraceURLPlaceholder = "{trace_id}"

// Channel is one upstream endpoint.
type Channel struct {
	ID        string
	Provider  string // a provider family (ProviderOpenAI, ProviderAzure, …)
	BaseURL   string // without trailing slash, e.g. https://api.openai.com/v1
	APIKeyEnv string
	APIKey    string // resolved at load from APIKeyEnv; never logged
	// APIVersion (azure): deployment URLs with ?api-version=; empty: the v1 API.
	APIVersion string
	// EntraID (azure): a Microsoft Entra ID token from the Azure SDK's
	// credential chain instead of an api-key.
	EntraID bool
	// Project (vertex): the Google Cloud project.
	Project string
	// Region: the channel's region (metrics); for bedrock the AWS region
	// and for vertex the Google Cloud location the requests go to.
	Region  string
	Prefill bool
	Retries int     // same-channel retries, from policy unless set on the channel
	Breaker Breaker // resolved breaker policy of this channel
	// EarlyWarning is the resolved early-warning policy of this channel
	// (DESIGN.md §12); off unless enabled.
	EarlyWarning EarlyWarning
	Line         int // line of the channel in the config file
}

// Breaker is a resolved breaker policy (DESIGN.md §2 L1).
type Breaker struct {
	Mode        string        // "count" | "rate"
	Window      time.Duration // count: sliding window (5m); rate: rolling window (60s)
	Failures    int           // count: failures that open (3)
	Cooldown    time.Duration // open duration before the half-open trial (60s)
	Threshold   float64       // rate: error rate that opens (0.25)
	MinRequests int           // rate: minimum requests in the window (10)
}

// EarlyWarning is a resolved early-warning policy (DESIGN.md §12): demote
// the channel — move it to the end of its chains, never skip it — when
// its latency turns bad against its own baseline or its error rate nears
// the breaker's threshold.
type EarlyWarning struct {
	Enabled bool
	// Baseline is the history the baseline median is taken over; Window
	// the short window judged against it.
	Baseline time.Duration
	Window   time.Duration
	// LatencyMultiple: a sample above LatencyMultiple × the baseline median
	// is slow; the window is bad when more than half its samples are.
	LatencyMultiple float64
	// For is how long the evidence must last before a demotion.
	For time.Duration
	// ErrorFraction of the breaker's threshold: rate breakers, an error
	// rate above ErrorFraction × threshold; count breakers, at least
	// ErrorFraction × failures (rounded up) errors in the window.
	ErrorFraction float64
	// MinSamples in the window (and in the baseline) before any judgement.
	MinSamples int
	// Cooldown is how long a demotion lasts, Probation how long the
	// channel then stays on probation (fresh evidence demotes it again at
	// once, for twice as long).
	Cooldown  time.Duration
	Probation time.Duration
	// RateLimitUtilization: a rate-limit window the channel states used at
	// least this much demotes it until the window resets (DESIGN §16); 0
	// is off.
	RateLimitUtilization float64
}

// Model is a public model name and its chain.
type Model struct {
	// MaxTokensDefault is sent to Anthropic-family channels when the
	// client gave no max_tokens (required there; 0: none configured).
	MaxTokensDefault int
	Name             string
	Chain            []Entry // sorted by price, cheapest first; ties keep file order; len ≤ 3
	Policy           Policy  // resolved: global policy < profile < model policy
	FallbackModels   []string
	ContextFallback  string
	Operations       []string // operations served; default ["chat"]
	Line             int
	// ListPrice is what tenants pay per 1M tokens, in micro-units of the
	// billing currency (models[].price; default the cheapest entry's).
	ListPrice money.Price
	// ReserveOutputTokens is the output a reservation assumes when the
	// request sets no token limit.
	ReserveOutputTokens int64
	// RealtimeHold is what a realtime session holds on the tenant's wallet
	// from before the upgrade to its close, in micro-units
	// (models[].realtime_hold; default DefaultRealtimeHold).
	RealtimeHold int64
}

// Entry is one chain entry.
type Entry struct {
	Channel       *Channel
	UpstreamModel string
	Price         Price
	Prefill       bool // channel's prefill unless overridden on the entry
	// Voices (elevenlabs entries): OpenAI voice name → the provider's
	// voice id; a request for a voice not in it skips the entry.
	Voices map[string]string
	// PriceMicros is Price in micro-units per 1M tokens, read exactly from
	// the file (the default list price of the model).
	PriceMicros money.Price
}

// Price is USD per 1M tokens.
type Price struct {
	Input  float64
	Output float64
}

// Total is the sort key of a chain entry.
func (p Price) Total() float64 { return p.Input + p.Output }

// Policy is a fully resolved per-model policy (DESIGN.md §2 defaults and
// profiles; explicitly set keys win over their profile).
type Policy struct {
	Profile           string        // "default" | "chat"
	RetryAfterMax     time.Duration // 5s
	HeaderTimeout     time.Duration // 240s (chat: 8s)
	GateTimeout       time.Duration // 30s (chat: 8s)
	GateOnTimeout     string        // "commit" (chat: "failover")
	StreamIdleTimeout time.Duration // 0 = off (chat: 30s)
	ChainDeadline     time.Duration // 0 = off (chat: 12s)
	MidStream         string        // "error" | "resume"
	DegradedMode      string        // "error" | "message"
	DegradedMessage   string        // content of the marked 200 message
}

// Policy and mode values.
const (
	ProfileDefault    = "default"
	ProfileChat       = "chat"
	BreakerCount      = "count"
	BreakerRate       = "rate"
	OnTimeoutCommit   = "commit"
	OnTimeoutFailover = "failover"
	MidStreamError    = "error"
	MidStreamResume   = "resume"
	DegradedError     = "error"
	DegradedMessage   = "message"
	AuthKeys          = "keys"
	AuthNone          = "none"
	ChainMax          = 3 // ROUTING_CHAIN_MAX
)

// Serves reports whether m serves operation op (no operations: chat).
func (m *Model) Serves(op string) bool {
	if len(m.Operations) == 0 {
		return op == OpChat
	}
	return slices.Contains(m.Operations, op)
}

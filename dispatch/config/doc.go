// Package config loads, validates and resolves hopgate's YAML configuration
// file (DESIGN.md §4).
//
// It owns the file format: the strict walk of the YAML (every unknown key,
// wrong type or bad value is an Error with its line, and all of them are
// reported at once as an ErrorList), the built-in defaults and profile
// presets (DESIGN.md §2), the precedence between them, reading credentials
// from the environment, and the human-readable `hopgate check` listing
// (Config.WriteChains). It produces a fully resolved, immutable *Config so
// the request path never re-derives anything.
//
// It must not touch the network, start goroutines, keep global state or log:
// callers decide what to do with a Config or an ErrorList. Credentials are
// read only through the getenv function given to Parse and are never
// printed.
//
// # Reading rules
//
//   - Strict: unknown keys at any depth, duplicate keys, wrong types, merge
//     keys (<<) and more than one YAML document are errors. Anchors and
//     aliases are allowed.
//   - A key with no value (`region:`) is an error for scalars; for mappings
//     and lists it means empty.
//   - Durations are Go durations: 300ms, 60s, 5m, 1m30s. A bare 0 means 0s;
//     any other bare number is an error (60 what?). Negative durations are
//     errors.
//   - ${ENV} interpolation is not supported anywhere: a string containing
//     "${" is an error. Secrets come only from the variables named by
//     channels[].api_key_env and admin.token_env; a named variable that is
//     unset or empty is an error naming it. Credentials cannot be written
//     in the file (there is no key for them, and base_url rejects
//     user:password@).
//   - Errors carry the line of the offending node; a missing key is
//     reported at the line of the mapping that lacks it; a chain longer
//     than 3 at its first extra entry; whole-file problems at line 0.
//
// # Reference
//
// Top level:
//
//	listen          host:port      default 127.0.0.1:8080   main listener (OpenAI-compatible API)
//	admin_listen    host:port      default 127.0.0.1:9090   metrics, health, admin; must differ from listen
//	region          string         default ""               this gateway's region (metric label, resource attribute)
//	max_body_bytes  int ≥ 1        default 10485760         request body limit (10 MiB)
//	auth            mapping        see below
//	admin           mapping        see below
//	telemetry       mapping        see below
//	status          mapping        see below
//	overload        mapping        see below
//	realtime        mapping        hold_bytes (default 1 MiB, ≥ 1024), max_event_bytes (default 16 MiB, ≥ 1024),
//	                               max_session (default 60m), ping_interval (default 15s; 0s: off),
//	                               ping_timeout (default 10s)
//	policy          mapping        see below (global policy)
//	channels        list           see below
//	models          list           required, at least one
//	store           mapping        default none (wallets off); see below
//	billing         mapping        see below
//	admin_auth      mapping        see below
//
// auth:
//
//	mode    keys | none    default keys   none is for local development only
//	keys    list           required (non-empty) when mode is keys, unless a store is configured
//	                       (keys may then all be issued at run time: hopgate tenants key issue)
//	  - id       string    required, unique; the key's name
//	    sha256   64 hex    required, unique; sha256 of the bearer token clients send
//	    tenant   string    default the id; who pays (span attribute hopgate.tenant)
//
// admin:
//
//	token_env   env var name   default none   when set, its value is the bearer token required on
//	                                          admin endpoints (but /healthz, /readyz); unset or empty = error
//
// store (DESIGN §9; present = wallets on, unless auth.mode is none):
//
//	driver        sqlite | postgres   default sqlite
//	path          string              sqlite only; default hopgate.db; a relative path is relative
//	                                  to the directory of the config file (Load)
//	dsn_env       env var name        postgres only, required; the variable holds the connection
//	                                  string (a password): set and non-empty
//	key_refresh   duration [1s, 5m]   default 10s; keys issued at run time are re-read this often,
//	                                  so a revoked key stops working on every replica within it
//
// billing:
//
//	currency               ISO 4217 code    default USD; the currency of new wallets
//	on_store_error         fail_closed |    default fail_closed: a charged request gets 503 while the
//	                       fail_open        store is down; fail_open serves it on credit
//	fail_open_credit       amount > 0       required with fail_open, refused without it: currency units
//	                                        one tenant may reserve on one replica while the store is down
//	hold_ttl               duration         default 15m, [1m, 24h]; a reservation nobody settled expires
//	reserve_output_tokens  int ≥ 0          default 4096; output tokens reserved for a request without
//	                                        max_tokens (per model: models[].reserve_output_tokens)
//	journal_dir            path             default hopgate-journal, relative to the config file's
//	                                        directory; the journal of charges the store could not take
//	                                        yet (one directory per replica), read at start
//
// admin_auth:
//
//	keys      list       default none: then /admin/tenants changes nothing (403), only the CLI does
//	  - id      string   required, unique; the actor of audit rows
//	    sha256  64 hex   required, unique, not a client key's; sha256 of the admin bearer token
//
// Amounts and prices are decimals read exactly from the file's text into
// micro-units (at most 6 decimal places), never through a float.
//
// telemetry:
//
//	healthy_sample_ratio   number in [0,1]   default 1       share of healthy traces kept
//	record_content         bool              default false   reserved: true is refused until prompt/completion recording exists
//	failover_log_size      int ≥ 0           default 200     entries kept for /admin/failovers
//	path_header            bool              default true    send X-Hopgate-Path
//	trust_inbound_trace    bool              default true    continue the client's traceparent; false: a new
//	                                                         trace per request, linked to the client's (public endpoints)
//	trace_url              URL template      default none    http(s) link-out with {trace_id} (trace UI); a
//	                                                         value without {trace_id}, relative, or with another
//	                                                         scheme is an error
//	trace_ring.max_traces  int in [1, 1e6]   default 2000    traces /admin/traces holds
//	trace_ring.max_bytes   int ≥ 65536       default 16 MiB  estimated bytes the ring may hold
//
// status:
//
//	enabled   bool   default true   public /status and /status.json on the main listener;
//	                                false: both answer 404 and nothing is recorded
//
// overload (DESIGN.md §13, package dispatch/overload; the budget and the
// bounds are fixed at start, a reload keeps the running ones and logs a
// warning; max_response_bytes follows a reload):
//
//	budget_bytes        int ≥ 0          default 0      the buffer budget (held stream-gate frames,
//	                                                    non-streaming answers being classified, request
//	                                                    bodies kept for replay); 0: budget_fraction of
//	                                                    GOMEMLIMIT when it is set, else 256 MiB
//	budget_fraction     number in (0,1]  default 0.25   share of GOMEMLIMIT the budget takes
//	max_in_flight       int ≥ 0          default 0      requests in flight; 0: twice the derived stream
//	                                                    bound, budget / 48 KiB (at least 128)
//	max_streams         int ≥ 0          default 0      streaming requests; 0: budget / 96 KiB (at least 64)
//	max_response_bytes  mapping          per operation  default, chat, completions, responses, embeddings,
//	                                                    images, audio_speech, audio_transcriptions; int ≥ 1024;
//	                                                    16 MiB (default's value), embeddings and images at
//	                                                    least 64 MiB; one buffered upstream answer beyond it
//	                                                    is a failed hop
//
// policy (global; the same block under models[].policy overrides it per
// model, except breaker, early_warning and retries, which are per channel):
//
//	key                      default     chat profile   notes
//	profile                  default     -              default | chat
//	header_timeout           240s        8s             > 0; wait for response headers (L4)
//	stream_gate.timeout      30s         8s             > 0; wait for a decisive frame (L3)
//	stream_gate.on_timeout   commit      failover       commit | failover
//	stream_idle_timeout      0s (off)    30s            ≥ 0; max silence between frames
//	chain_deadline           0s (off)    12s            ≥ 0; budget before the degraded reply (L2)
//	retry_after_max          5s          (not governed) ≥ 0; longest Retry-After honoured when retrying
//	mid_stream               error       (not governed) error | resume
//	degraded_reply.mode      error       (not governed) error (deadline: 503 engine_overloaded; exhaustion: 502
//	                                     all_channels_failed or the shared status) | message (a 200 marked
//	                                     X-Hopgate-Degraded: 1 for both, /v1/chat/completions only)
//	degraded_reply.message   "The service is temporarily overloaded. Please retry shortly."
//	                                     (not governed) non-empty; content of the message reply
//	retries                  0           (not governed) global only; int ≥ 0; default of channels[].retries
//	breaker                  see below   mode rate      global only; default of channels[].breaker
//	early_warning            see below   (not governed) global only; default of channels[].early_warning
//
// breaker (policy.breaker and channels[].breaker):
//
//	key            count default   rate default   notes
//	mode           count           rate           count | rate; the chat profile implies rate
//	window         5m              60s            (0, 1h]; sliding (count) or rolling (rate) window
//	failures       3               3              int in [1, 1000]; count: failures in the window that open
//	cooldown       60s             60s            > 0; open time before the half-open trial
//	threshold      0.25            0.25           in (0, 1]; rate: error rate that opens
//	min_requests   10              10             int in [1, 1e6]; rate: requests needed before judging
//
// early_warning (policy.early_warning and channels[].early_warning; DESIGN.md
// §12, docs/early-warning.md for how the defaults were chosen):
//
//	key               default   notes
//	enabled           false     opt-in: demote a channel (move it to the end of its chains, never
//	                            skip it) whose latency or error rate turns bad before its breaker opens
//	baseline          10m       [2s, 1h]; history the baseline median (header latency, time to
//	                            first token) is taken over, the window excluded; at least 2 × window
//	window            30s       [1s, 1h]; the short window judged against the baseline
//	latency_multiple  3         in (1, 100]; a sample above this × the baseline median is slow; the
//	                            window is bad when more than half its samples (slow hops still in
//	                            flight included) are slow
//	for               40s       [0, 1h]; how long the evidence must last before a demotion
//	error_fraction    0.5       in (0, 1]; of the breaker's threshold: rate breaker, an error rate
//	                            above fraction × threshold; count breaker, fraction × failures
//	                            (rounded up) errors in the window
//	min_samples       5         int in [1, 1e5]; samples in the window (and in the baseline) before
//	                            any judgement
//	cooldown          2m        (0, 1h]; how long a demotion lasts
//	probation         2m        [0, 1h]; afterwards: fresh evidence demotes again at once, for twice
//	                            the previous cooldown (at most 8 ×)
//
// channels[]:
//
//	id            string        required, unique; letters, digits, '.', '_', '-' (it appears in
//	                            metric labels and in the failover path "a:open -> b:503")
//	provider      family        default openai; openai | azure | anthropic | bedrock | vertex |
//	                            elevenlabs (DESIGN.md §8, §15, docs/providers.md)
//	base_url      URL           absolute http(s), no query, fragment or user:password@; a trailing
//	                            slash is trimmed. openai: required, ends in /v1; azure: required,
//	                            the resource endpoint; anthropic: default https://api.anthropic.com;
//	                            bedrock: default https://bedrock-runtime.{region}.amazonaws.com;
//	                            vertex: default https://{region}-aiplatform.googleapis.com (global:
//	                            https://aiplatform.googleapis.com; us, eu: aiplatform.{us,eu}.rep…);
//	                            elevenlabs: default https://api.elevenlabs.io, no /v1 suffix
//	api_key_env   env var name  the variable must be set and non-empty. openai: optional (Bearer);
//	                            azure: the api-key (or entra_id); anthropic: required (x-api-key);
//	                            elevenlabs: required (xi-api-key);
//	                            not for bedrock or vertex (their clouds' credential chains)
//	api_version   string        azure only: deployment URLs with ?api-version= (upstream_model is
//	                            the deployment); without it the v1 API (model in the body)
//	entra_id      bool          azure only: a Microsoft Entra ID token from the Azure SDK's
//	                            credential chain instead of an api-key
//	project       string        vertex only, required: the Google Cloud project
//	region        string        default ""; metric label channel_region; bedrock: required, the
//	                            AWS region; vertex: required, the Vertex AI location
//	prefill       bool          default false; the upstream can continue an assistant prefix
//	retries       int ≥ 0       default policy.retries; same-channel retries
//	breaker       mapping       overrides policy.breaker key by key for this channel
//	early_warning mapping       overrides policy.early_warning key by key for this channel
//
// models[]:
//
//	name              string      required, unique; the public model name clients send
//	chain             list        required, 1 to 3 entries (ROUTING_CHAIN_MAX); a channel at most
//	                              once; sorted by price.input+price.output, cheapest first, ties
//	                              keep file order
//	  - channel         string    required; id of a channel
//	    upstream_model  string    default: the model's name
//	    price           mapping   {input, output}: USD per 1M tokens, each ≥ 0, default 0
//	    prefill         bool      default: the channel's prefill
//	    voices          mapping   elevenlabs entries only, required: OpenAI voice name → voice id;
//	                              a request for an unmapped voice skips the entry (unsupported_request).
//	                              A model with an elevenlabs entry serves operations [audio_speech] only
//	policy            mapping     per-model policy (no breaker, early_warning or retries)
//	operations        list        default [chat]; chat, completions, embeddings, images,
//	                              audio_speech, audio_transcriptions, responses, realtime
//	fallback_models   list        default []; other existing models, not itself (opt-in
//	                              cross-model fallback, visible in the response), each serving
//	                              at least one of the model's operations; a request walks only
//	                              those serving its operation, and a realtime session none
//	                              (its 101 already named the model)
//	context_fallback  string      default ""; another existing model used on context_length_exceeded
//	                              (when it serves the request's operation)
//	max_tokens_default int ≥ 1    required when the chain has an anthropic, bedrock or vertex
//	                              channel: sent to them when an OpenAI client gives no max_tokens
//	                              (Anthropic requires it; never a silently small constant). Such a
//	                              model serves chat and responses only.
//	price             mapping     {input, output}: the list price tenants pay per 1M tokens, in the
//	                              billing currency; default the cheapest chain entry's price
//	reserve_output_tokens int ≥ 0 default billing.reserve_output_tokens
//	realtime_hold     amount ≥ 0  default 1: what a realtime session holds on the tenant's wallet
//	                              from before the upgrade to its close (docs/voice.md, Wallets)
//
// # Precedence
//
// A profile governs exactly five policy keys: header_timeout,
// stream_gate.timeout, stream_gate.on_timeout, stream_idle_timeout and
// chain_deadline (plus the breaker mode, see below). Both profiles set all
// five, so "default" is a real preset, not "no preset". The resolved policy
// of a model is built in this order, each step overriding the previous one:
//
//  1. built-in defaults (profile default);
//  2. the preset of the global policy.profile;
//  3. keys set explicitly in the global policy;
//  4. the preset of the model's policy.profile, when the model sets one —
//     it overrides the five governed keys even where step 3 set them,
//     because the model asked for that preset by name;
//  5. keys set explicitly in the model's policy.
//
// So an explicit key beats a profile at the same or a less specific level,
// and a model-level profile beats global explicit keys. Keys a profile does
// not govern (retry_after_max, mid_stream, degraded_reply) flow from the
// global policy to every model untouched by any profile.
//
// The breaker of a channel is resolved key by key: built-in defaults of the
// final mode < global profile (chat implies mode rate) < policy.breaker <
// channels[].breaker. The final mode picks the default window (count 5m,
// rate 60s); a window set explicitly at either level wins whatever the
// mode. Model policies cannot set breakers: breaker state is per process
// and per channel, shared by every model that routes through it. The same
// holds for early_warning: built-in defaults < policy.early_warning <
// channels[].early_warning, key by key.
package config

package config

import (
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hopgate/hopgate/dispatch/earlywarning"
)

// Built-in defaults (DESIGN.md §2, profile "default") for keys outside
// Policy and Breaker.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultAdminListen     = "127.0.0.1:9090"
	DefaultMaxBodyBytes    = 10 << 20
	DefaultFailoverLogSize = 200
	DefaultTraceRingTraces = 2000
	DefaultTraceRingBytes  = 16 << 20
	// DefaultDegradedMessage is the content of the opt-in 200 degraded reply.
	DefaultDegradedMessage = "The service is temporarily overloaded. Please retry shortly."
)

// DefaultPolicy returns the policy a model gets from a profile alone, with
// nothing set explicitly. An unknown profile is treated as "default".
func DefaultPolicy(profile string) Policy {
	p := Policy{
		RetryAfterMax:   5 * time.Second,
		MidStream:       MidStreamError,
		DegradedMode:    DegradedError,
		DegradedMessage: DefaultDegradedMessage,
	}
	applyProfile(&p, profile)
	return p
}

// applyProfile sets the profile-governed keys — header_timeout,
// stream_gate.timeout, stream_gate.on_timeout, stream_idle_timeout,
// chain_deadline — to the preset of profile and leaves every other key
// alone. Both presets set the same keys, so a model that asks for
// "default" under a global "chat" really gets the default values back.
func applyProfile(p *Policy, profile string) {
	if profile == ProfileChat {
		p.Profile = ProfileChat
		p.HeaderTimeout = 8 * time.Second
		p.GateTimeout = 8 * time.Second
		p.GateOnTimeout = OnTimeoutFailover
		p.StreamIdleTimeout = 30 * time.Second
		p.ChainDeadline = 12 * time.Second
		return
	}
	p.Profile = ProfileDefault
	p.HeaderTimeout = 240 * time.Second
	p.GateTimeout = 30 * time.Second
	p.GateOnTimeout = OnTimeoutCommit
	p.StreamIdleTimeout = 0
	p.ChainDeadline = 0
}

// DefaultBreaker returns the built-in breaker of a mode. Every field is
// filled whatever the mode, so switching modes never leaves zeros behind.
func DefaultBreaker(mode string) Breaker {
	b := Breaker{
		Mode:        BreakerCount,
		Window:      5 * time.Minute,
		Failures:    3,
		Cooldown:    60 * time.Second,
		Threshold:   0.25,
		MinRequests: 10,
	}
	if mode == BreakerRate {
		b.Mode = BreakerRate
		b.Window = 60 * time.Second
	}
	return b
}

// Built-in early-warning defaults, chosen from the replay report
// (docs/early-warning.md); off unless enabled. They are package
// earlywarning's, written once; only error_fraction is the config's (the
// detector gets its product with the breaker's threshold).
const (
	DefaultEarlyWarningBaseline      = earlywarning.DefaultBaseline
	DefaultEarlyWarningWindow        = earlywarning.DefaultWindow
	DefaultEarlyWarningMultiple      = earlywarning.DefaultMultiple
	DefaultEarlyWarningFor           = earlywarning.DefaultFor
	DefaultEarlyWarningErrorFraction = 0.5
	DefaultEarlyWarningMinSamples    = earlywarning.DefaultMinSamples
	DefaultEarlyWarningCooldown      = earlywarning.DefaultCooldown
	DefaultEarlyWarningProbation     = earlywarning.DefaultProbation
	DefaultEarlyWarningRateLimit     = earlywarning.DefaultRateLimit
)

// DefaultEarlyWarning returns the built-in early-warning policy: every
// field filled, disabled.
func DefaultEarlyWarning() EarlyWarning {
	return EarlyWarning{
		Baseline:        DefaultEarlyWarningBaseline,
		Window:          DefaultEarlyWarningWindow,
		LatencyMultiple: DefaultEarlyWarningMultiple,
		For:             DefaultEarlyWarningFor,
		ErrorFraction:   DefaultEarlyWarningErrorFraction,
		MinSamples:      DefaultEarlyWarningMinSamples,
		Cooldown:        DefaultEarlyWarningCooldown,
		Probation:       DefaultEarlyWarningProbation,

		RateLimitUtilization: DefaultEarlyWarningRateLimit,
	}
}

func (r *rawEarlyWarning) apply(e *EarlyWarning) {
	set(&e.Enabled, r.enabled)
	set(&e.Baseline, r.baseline)
	set(&e.Window, r.window)
	set(&e.LatencyMultiple, r.latencyMultiple)
	set(&e.For, r.forDur)
	set(&e.ErrorFraction, r.errorFraction)
	set(&e.MinSamples, r.minSamples)
	set(&e.Cooldown, r.cooldown)
	set(&e.Probation, r.probation)
	set(&e.RateLimitUtilization, r.ratelimitUtil)
}

// profileBreakerMode is the breaker mode a global profile implies.
func profileBreakerMode(profile string) string {
	if profile == ProfileChat {
		return BreakerRate
	}
	return BreakerCount
}

func (r *rawPolicy) apply(p *Policy) {
	set(&p.RetryAfterMax, r.retryAfterMax)
	set(&p.HeaderTimeout, r.headerTimeout)
	set(&p.GateTimeout, r.gateTimeout)
	set(&p.GateOnTimeout, r.gateOnTimeout)
	set(&p.StreamIdleTimeout, r.streamIdleTimeout)
	set(&p.ChainDeadline, r.chainDeadline)
	set(&p.MidStream, r.midStream)
	set(&p.DegradedMode, r.degradedMode)
	set(&p.DegradedMessage, r.degradedMessage)
}

func (r *rawBreaker) apply(b *Breaker) {
	set(&b.Window, r.window)
	set(&b.Failures, r.failures)
	set(&b.Cooldown, r.cooldown)
	set(&b.Threshold, r.threshold)
	set(&b.MinRequests, r.minRequests)
}

func set[T any](dst *T, v val[T]) {
	if v.set {
		*dst = v.v
	}
}

// resolve turns the raw file into a Config, reporting cross-reference and
// environment mistakes. It runs even when the walk found mistakes, so that
// one `hopgate check` lists everything; values that failed to parse are
// simply absent here and produce no second error.
func (p *parser) resolve(f *rawFile) *Config {
	c := &Config{
		Listen:       f.listen.or(DefaultListen),
		AdminListen:  f.adminListen.or(DefaultAdminListen),
		Region:       f.region.or(""),
		MaxBodyBytes: f.maxBodyBytes.or(DefaultMaxBodyBytes),
		Overload:     f.overload.resolve(),
		Realtime:     f.realtime.resolve(),
		Telemetry: Telemetry{
			HealthySampleRatio: f.telemetry.healthySampleRatio.or(1),
			RecordContent:      f.telemetry.recordContent.or(false),
			FailoverLogSize:    f.telemetry.failoverLogSize.or(DefaultFailoverLogSize),
			Path:               f.telemetry.pathHeader.or(true),
			TrustInboundTrace:  f.telemetry.trustInboundTrace.or(true),
			TraceURL:           f.telemetry.traceURL.or(""),
			TraceRingTraces:    f.telemetry.ringTraces.or(DefaultTraceRingTraces),
			TraceRingBytes:     f.telemetry.ringBytes.or(DefaultTraceRingBytes),
		},
		Status:   Status{Enabled: f.statusEnabled.or(true)},
		channels: map[string]*Channel{},
		models:   map[string]*Model{},
	}
	listenBad := !f.listen.set && hasKey(f.root, "listen") || !f.adminListen.set && hasKey(f.root, "admin_listen")
	if c.Listen == c.AdminListen && !listenBad {
		p.errorf(f.adminListen.line(f.listen.line(f.root)), "admin_listen must differ from listen (both are %q)", c.Listen)
	}
	p.resolveAuth(c, f)
	if f.adminTokenEnv.set {
		c.Admin.BearerToken = p.lookupEnv(f.adminTokenEnv, "token_env in admin")
	}

	globalProfile := f.policy.profile.or(ProfileDefault)
	if g, re := DefaultEarlyWarning(), f.policy.earlyWarning; re.baseline.set || re.window.set {
		re.apply(&g)
		if g.Baseline < 2*g.Window {
			p.errorf(re.baseline.line(re.window.node), "early_warning in policy: baseline (%s) must be at least twice the window (%s)",
				dur(g.Baseline), dur(g.Window))
		}
	}
	p.resolveChannels(c, f, globalProfile)

	base := DefaultPolicy(globalProfile)
	f.policy.apply(&base)
	p.resolveModels(c, f, base)
	p.resolveWallet(c, f)
	p.resolveRateLimits(c, f)
	return c
}

func (p *parser) resolveAuth(c *Config, f *rawFile) {
	c.Auth.Mode = f.auth.mode.or(AuthKeys)
	ids := map[string]int{}
	hashes := map[[32]byte]string{}
	for i, rk := range f.auth.keys {
		ctx := fmt.Sprintf("auth key %d", i+1)
		if !rk.id.set || rk.id.v == "" {
			if rk.id.set || !hasKey(rk.node, "id") {
				p.errorf(rk.id.line(rk.node), "%s has no id", ctx)
			}
			continue
		}
		ctx = fmt.Sprintf("auth key %q", rk.id.v)
		if line, dup := ids[rk.id.v]; dup {
			p.errorf(rk.id.node, "duplicate key id %q (first at line %d)", rk.id.v, line)
			continue
		}
		ids[rk.id.v] = rk.id.node.Line
		if !rk.sha256.set {
			if !hasKey(rk.node, "sha256") {
				p.errorf(rk.node, "%s has no sha256", ctx)
			}
			continue
		}
		var sum [32]byte
		if b, err := hex.DecodeString(rk.sha256.v); err != nil || len(b) != len(sum) {
			p.errorf(rk.sha256.node, "sha256 of %s must be 64 hex characters (the sha256 of the bearer token)", ctx)
			continue
		} else {
			copy(sum[:], b)
		}
		if other, dup := hashes[sum]; dup {
			p.errorf(rk.sha256.node, "%s has the same sha256 as key %q", ctx, other)
			continue
		}
		hashes[sum] = rk.id.v
		tenant := rk.id.v
		if rk.tenant.set {
			if !validTenant(rk.tenant.v) {
				p.errorf(rk.tenant.node, "tenant of %s must be 1 to 200 bytes without control characters", ctx)
				continue
			}
			tenant = rk.tenant.v
		} else if f.wallet.store.set && !validTenant(tenant) {
			// The store would refuse this tenant at every request's hold.
			p.errorf(rk.id.node, "%s has no tenant, so its id names the tenant, and a tenant must be 1 to 200 bytes without control characters: set tenant", ctx)
			continue
		}
		c.Auth.Keys = append(c.Auth.Keys, Key{ID: rk.id.v, SHA256: sum, Tenant: tenant})
	}
	// A gateway that accepts no key at all is a mistake, not a locked door:
	// say so at load rather than answer 401 to everyone.
	modeBad := !f.auth.mode.set && hasKey(f.auth.node, "mode") // already reported
	kn := f.auth.keysNode
	noKeys := kn == nil || isNull(kn) || kn.Kind == yaml.SequenceNode && len(kn.Content) == 0
	// With a store, keys may all be issued at run time (hopgate tenants).
	if c.Auth.Mode == AuthKeys && noKeys && !modeBad && !f.wallet.store.set {
		p.errorf(f.auth.mode.line(firstNode(f.auth.node, f.root)), "auth.mode is keys but auth.keys is empty; add a key or set auth.mode: none for local development")
	}
}

// lookupEnv reads a credential named by an env key. Missing and empty are
// both mistakes: an empty credential would be sent as "Bearer " and fail
// upstream with a confusing 401 instead of here.
func (p *parser) lookupEnv(name val[string], what string) string {
	v, ok := p.getenv(name.v)
	if !ok {
		p.errorf(name.node, "environment variable %s (%s) is not set", name.v, what)
		return ""
	}
	if v == "" {
		p.errorf(name.node, "environment variable %s (%s) is empty", name.v, what)
		return ""
	}
	return v
}

func (p *parser) resolveChannels(c *Config, f *rawFile, globalProfile string) {
	for i, rc := range f.channels {
		if !rc.id.set || rc.id.v == "" {
			if rc.id.set || !hasKey(rc.node, "id") {
				p.errorf(rc.id.line(rc.node), "channel %d has no id", i+1)
			}
			continue
		}
		ctx := fmt.Sprintf("channel %q", rc.id.v)
		if !channelIDRE.MatchString(rc.id.v) {
			// Ids appear in metric labels and in the failover path
			// "a:open -> b:503", so keep them to a safe alphabet.
			p.errorf(rc.id.node, "id of %s may only contain letters, digits, '.', '_' and '-' (starting with a letter or digit)", ctx)
		}
		if prev, dup := c.channels[rc.id.v]; dup {
			p.errorf(rc.id.node, "duplicate channel id %q (first at line %d)", rc.id.v, prev.Line)
			continue
		}
		ch := &Channel{
			ID:         rc.id.v,
			Provider:   rc.provider.or(ProviderOpenAI),
			BaseURL:    rc.baseURL.v,
			APIKeyEnv:  rc.apiKeyEnv.v,
			APIVersion: rc.apiVersion.v,
			EntraID:    rc.entraID.v,
			Project:    rc.project.v,
			Region:     rc.region.v,
			Prefill:    rc.prefill.v,
			Retries:    rc.retries.or(f.policy.retries.or(0)),
			Line:       rc.node.Line,
		}
		p.provider(ch, rc, ctx)
		if rc.apiKeyEnv.set {
			ch.APIKey = p.lookupEnv(rc.apiKeyEnv, "api_key_env of "+ctx)
		}
		mode := profileBreakerMode(globalProfile)
		set(&mode, f.policy.breaker.mode)
		set(&mode, rc.breaker.mode)
		ch.Breaker = DefaultBreaker(mode)
		f.policy.breaker.apply(&ch.Breaker)
		rc.breaker.apply(&ch.Breaker)
		ch.EarlyWarning = DefaultEarlyWarning()
		f.policy.earlyWarning.apply(&ch.EarlyWarning)
		rc.early.apply(&ch.EarlyWarning)
		if ew, re := ch.EarlyWarning, rc.early; ew.Baseline < 2*ew.Window && (re.baseline.set || re.window.set) {
			// The baseline is what is left once the window is taken out:
			// it must be at least as long as the window.
			p.errorf(re.baseline.line(re.window.node), "early_warning of %s: baseline (%s) must be at least twice the window (%s)",
				ctx, dur(ew.Baseline), dur(ew.Window))
		}

		c.channels[ch.ID] = ch
		c.Channels = append(c.Channels, ch)
	}
}

func (p *parser) resolveModels(c *Config, f *rawFile, base Policy) {
	if len(f.models) == 0 {
		n := f.modelsNode
		if n == nil {
			n = f.root
		}
		p.errorf(n, "no models: add at least one entry to models")
	}
	type pending struct {
		m  *Model
		rm *rawModel
	}
	var todo []pending
	for i, rm := range f.models {
		if !rm.name.set || rm.name.v == "" {
			if rm.name.set || !hasKey(rm.node, "name") {
				p.errorf(rm.name.line(rm.node), "model %d has no name", i+1)
			}
			continue
		}
		ctx := fmt.Sprintf("model %q", rm.name.v)
		if !modelNameRE.MatchString(rm.name.v) {
			p.errorf(rm.name.node, "name of %s may only contain printable ASCII without spaces: it is sent in the X-Hopgate-Model header", ctx)
		}
		if prev, dup := c.models[rm.name.v]; dup {
			p.errorf(rm.name.node, "duplicate model name %q (first at line %d)", rm.name.v, prev.Line)
			continue
		}
		m := &Model{
			Name:            rm.name.v,
			ContextFallback: rm.contextFallback.v,
			Operations:      []string{OpChat},
			Line:            rm.node.Line,
		}
		m.Policy = base
		if rm.policy.profile.set {
			// The model asked for a preset by name: it beats keys set
			// explicitly in the global policy (see doc.go, "Precedence").
			applyProfile(&m.Policy, rm.policy.profile.v)
		}
		rm.policy.apply(&m.Policy)
		if rm.operations.set {
			m.Operations = p.operations(rm, ctx)
		}
		m.Chain = p.chain(c, rm, ctx)
		m.MaxTokensDefault = rm.maxTokens.v
		p.families(m, rm, ctx)
		p.realtimeChannels(m, rm, ctx)
		p.speechChannels(m, rm, ctx)
		c.models[m.Name] = m
		c.Models = append(c.Models, m)
		todo = append(todo, pending{m, rm})
	}
	// Fallbacks may name models defined later in the file, so they are
	// checked once every model is known.
	for _, t := range todo {
		p.fallbacks(c, t.m, t.rm)
	}
}

func (p *parser) operations(rm *rawModel, ctx string) []string {
	if len(rm.operations.v) == 0 {
		p.errorf(rm.operations.node, "operations of %s must not be empty (omit the key for [chat])", ctx)
		return []string{OpChat}
	}
	var ops []string
	seen := map[string]bool{}
	for _, op := range rm.operations.v {
		if !knownOperation(op.v) {
			continue // reported by the walk
		}
		if seen[op.v] {
			p.errorf(op.node, "operation %q appears twice in operations of %s", op.v, ctx)
			continue
		}
		seen[op.v] = true
		ops = append(ops, op.v)
	}
	return ops
}

func (p *parser) chain(c *Config, rm *rawModel, ctx string) []Entry {
	switch {
	case rm.chainNode == nil:
		p.errorf(rm.node, "%s has no chain", ctx)
		return nil
	case isNull(rm.chainNode) || rm.chainNode.Kind == yaml.SequenceNode && len(rm.chainNode.Content) == 0:
		p.errorf(rm.chainNode, "chain of %s is empty", ctx)
		return nil
	case rm.chainNode.Kind == yaml.SequenceNode && len(rm.chainNode.Content) > ChainMax:
		p.errorf(rm.chainNode.Content[ChainMax], "chain of %s has %d entries; at most %d are allowed (ROUTING_CHAIN_MAX)", ctx, len(rm.chainNode.Content), ChainMax)
	}
	var chain []Entry
	used := map[string]int{}
	for _, re := range rm.chain {
		ectx := fmt.Sprintf("chain entry %d of %s", re.index, ctx)
		if !re.channel.set {
			if !hasKey(re.node, "channel") {
				p.errorf(re.node, "%s has no channel", ectx)
			}
			continue
		}
		ch := c.channels[re.channel.v]
		if ch == nil {
			p.errorf(re.channel.node, "unknown channel %q in chain of %s", re.channel.v, ctx)
			continue
		}
		if line, dup := used[ch.ID]; dup {
			// A second hop on the same channel adds no resilience (it shares
			// the breaker) and makes the failover path ambiguous.
			p.errorf(re.channel.node, "channel %q appears twice in chain of %s (first at line %d)", ch.ID, ctx, line)
			continue
		}
		used[ch.ID] = re.channel.node.Line
		e := Entry{
			Channel:       ch,
			UpstreamModel: re.upstreamModel.or(rm.name.v),
			Price:         Price{Input: re.input.v, Output: re.output.v},
			Prefill:       re.prefill.or(ch.Prefill),
			PriceMicros:   entryPriceMicros(re),
			Voices:        p.entryVoices(re, ch, ectx),
		}
		if e.UpstreamModel == "" {
			p.errorf(re.upstreamModel.node, "upstream_model in %s must not be empty", ectx)
		}
		chain = append(chain, e)
	}
	if len(chain) > ChainMax {
		chain = chain[:ChainMax]
	}
	// Cheapest first; a stable sort keeps file order among equal prices so
	// the operator decides ties.
	sort.SliceStable(chain, func(i, j int) bool { return chain[i].Price.Total() < chain[j].Price.Total() })
	return chain
}

func (p *parser) fallbacks(c *Config, m *Model, rm *rawModel) {
	ctx := fmt.Sprintf("model %q", m.Name)
	seen := map[string]bool{}
	for _, fb := range rm.fallbackModels.v {
		switch {
		case fb.v == m.Name:
			p.errorf(fb.node, "fallback_models of %s names the model itself", ctx)
		case c.models[fb.v] == nil:
			p.errorf(fb.node, "fallback_models of %s names unknown model %q", ctx, fb.v)
		case seen[fb.v]:
			p.errorf(fb.node, "fallback_models of %s names %q twice", ctx, fb.v)
		case !servesAny(c.models[fb.v], m):
			// The walk takes only the fallbacks that serve the request's
			// operation: this one would never be asked.
			p.errorf(fb.node, "fallback_models of %s names %q, which serves none of its operations (%s; it serves %s): add them to its operations or drop it",
				ctx, fb.v, strings.Join(ops(m), ", "), strings.Join(ops(c.models[fb.v]), ", "))
		default:
			seen[fb.v] = true
			m.FallbackModels = append(m.FallbackModels, fb.v)
		}
	}
	switch cf := rm.contextFallback; {
	case !cf.set || cf.v == "":
	case cf.v == m.Name:
		p.errorf(cf.node, "context_fallback of %s names the model itself", ctx)
		m.ContextFallback = ""
	case c.models[cf.v] == nil:
		p.errorf(cf.node, "context_fallback of %s names unknown model %q", ctx, cf.v)
		m.ContextFallback = ""
	}
}

// ops are the operations m serves.
func ops(m *Model) []string {
	if len(m.Operations) == 0 {
		return []string{OpChat}
	}
	return m.Operations
}

// servesAny reports whether fb serves one of m's operations.
func servesAny(fb, m *Model) bool {
	for _, op := range ops(m) {
		if fb.Serves(op) {
			return true
		}
	}
	return false
}

// hasKey reports whether mapping n has key, used to avoid a "missing key"
// error when the key was present but its value was already reported bad.
func hasKey(n *yaml.Node, key string) bool {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := deref(n.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
			return true
		}
	}
	return false
}

func firstNode(ns ...*yaml.Node) *yaml.Node {
	for _, n := range ns {
		if n != nil {
			return n
		}
	}
	return nil
}

// provider checks a channel's family-specific keys and fills the base URL
// each family defaults to (DESIGN.md §8): every mistake is a config error
// with its line, not a runtime surprise.
func (p *parser) provider(ch *Channel, rc *rawChannel, ctx string) {
	need := func(ok bool, key, why string) {
		switch {
		case ok:
		case key == "base_url":
			p.errorf(rc.node, "%s has no base_url (provider %s: %s)", ctx, ch.Provider, why)
		default:
			p.errorf(rc.node, "%s (provider %s) needs %s: %s", ctx, ch.Provider, key, why)
		}
	}
	only := func(v interface{ isSet() bool }, node *yaml.Node, key string, families ...string) {
		if !v.isSet() {
			return
		}
		for _, f := range families {
			if ch.Provider == f {
				return
			}
		}
		p.errorf(node, "%s in %s applies to provider %s only", key, ctx, strings.Join(families, " or "))
	}
	only(rc.apiVersion, rc.apiVersion.node, "api_version", ProviderAzure)
	only(rc.entraID, rc.entraID.node, "entra_id", ProviderAzure)
	only(rc.project, rc.project.node, "project", ProviderVertex)
	hasBase := rc.baseURL.set || hasKey(rc.node, "base_url")
	if rc.baseURL.set {
		p.lintBaseURL(ch, rc, ctx)
	}
	switch ch.Provider {
	case ProviderOpenAI:
		need(hasBase, "base_url", "the OpenAI-compatible API's URL ending in /v1, e.g. https://api.openai.com/v1")
	case ProviderAzure:
		need(hasBase, "base_url", "the resource's endpoint, e.g. https://myres.openai.azure.com")
		need(rc.apiKeyEnv.set || ch.EntraID, "api_key_env or entra_id: true", "the api-key header or a Microsoft Entra ID token")
		if rc.apiKeyEnv.set && ch.EntraID {
			p.errorf(rc.entraID.node, "%s sets both api_key_env and entra_id: choose one credential", ctx)
		}
	case ProviderAnthropic:
		need(rc.apiKeyEnv.set, "api_key_env", "the x-api-key credential")
		if !hasBase {
			ch.BaseURL = "https://api.anthropic.com"
		}
	case ProviderBedrock:
		need(ch.Region != "", "region", "the AWS region of the Bedrock runtime, e.g. us-east-1")
		only(rc.apiKeyEnv, rc.apiKeyEnv.node, "api_key_env", ProviderOpenAI, ProviderAzure, ProviderAnthropic)
		if ch.Region != "" && !regionRE.MatchString(ch.Region) {
			p.errorf(rc.region.node, "region of %s is not an AWS region: %q", ctx, ch.Region)
		} else if !hasBase && ch.Region != "" {
			ch.BaseURL = "https://bedrock-runtime." + ch.Region + ".amazonaws.com"
		}
	case ProviderElevenLabs:
		p.elevenLabsChannel(ch, rc, hasBase)
	case ProviderVertex:
		need(ch.Region != "", "region", "the Vertex AI location, e.g. us-east5")
		need(ch.Project != "", "project", "the Google Cloud project id")
		only(rc.apiKeyEnv, rc.apiKeyEnv.node, "api_key_env", ProviderOpenAI, ProviderAzure, ProviderAnthropic)
		if ch.Region != "" && !regionRE.MatchString(ch.Region) {
			p.errorf(rc.region.node, "region of %s is not a Vertex AI location: %q", ctx, ch.Region)
		} else if !hasBase && ch.Region != "" {
			ch.BaseURL = vertexBaseURL(ch.Region)
		}
	}
}

// vertexBaseURL is Vertex AI's endpoint for a location, as the Anthropic
// SDK's vertex package maps it: the global location and the us and eu
// multi-regions have endpoints of their own; a region is
// https://{region}-aiplatform.googleapis.com (DESIGN §8).
func vertexBaseURL(location string) string {
	switch location {
	case "global":
		return "https://aiplatform.googleapis.com"
	case "us", "eu":
		return "https://aiplatform." + location + ".rep.googleapis.com"
	}
	return "https://" + location + "-aiplatform.googleapis.com"
}

// families checks what a model's chain can serve across provider families:
// an Anthropic-family channel (anthropic, bedrock, vertex) serves chat
// and responses (translated, DESIGN §14) only, and needs the model's max_tokens_default, since an OpenAI client
// may omit max_tokens and Anthropic's API requires it (a silently small
// constant would truncate answers).
func (p *parser) families(m *Model, rm *rawModel, ctx string) {
	var anthropic *Channel
	for _, e := range m.Chain {
		if e.Channel != nil && AnthropicFamily(e.Channel.Provider) {
			anthropic = e.Channel
			break
		}
	}
	if anthropic == nil {
		return
	}
	for _, op := range m.Operations {
		if op != OpChat && op != OpResponses {
			p.errorf(rm.operations.node, "%s serves %q, but channel %q of its chain (provider %s) serves chat and responses only",
				ctx, op, anthropic.ID, anthropic.Provider)
		}
	}
	if m.MaxTokensDefault == 0 {
		p.errorf(rm.node, "%s needs max_tokens_default: channel %q (provider %s) requires max_tokens, which OpenAI clients may omit",
			ctx, anthropic.ID, anthropic.Provider)
	}
}

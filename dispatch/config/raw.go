package config

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// The raw* types mirror the file one to one. Every leaf is a val so that
// resolution can tell an explicitly set key from an absent one: that is the
// whole difference between "the profile applies" and "the operator chose".

type rawFile struct {
	root          *yaml.Node
	listen        val[string]
	adminListen   val[string]
	region        val[string]
	maxBodyBytes  val[int64]
	overload      rawOverload
	auth          rawAuth
	adminTokenEnv val[string]
	telemetry     rawTelemetry
	statusEnabled val[bool]
	policy        rawPolicy
	channels      []*rawChannel
	models        []*rawModel
	modelsNode    *yaml.Node // value of the models key, nil when absent
	wallet        rawWallet  // store, billing, admin_auth (wallet.go)
	rateLimits    rawRateLimits
	realtime      rawRealtime
}

type rawAuth struct {
	mode     val[string]
	keys     []rawKey
	keysNode *yaml.Node // value of the keys key, nil when absent
	node     *yaml.Node
}

type rawKey struct {
	node   *yaml.Node
	id     val[string]
	sha256 val[string]
	tenant val[string]
}

type rawTelemetry struct {
	healthySampleRatio val[float64]
	recordContent      val[bool]
	failoverLogSize    val[int]
	pathHeader         val[bool]
	trustInboundTrace  val[bool]
	traceURL           val[string]
	ringTraces         val[int]
	ringBytes          val[int64]
}

type rawBreaker struct {
	mode        val[string]
	window      val[time.Duration]
	failures    val[int]
	cooldown    val[time.Duration]
	threshold   val[float64]
	minRequests val[int]
}

type rawEarlyWarning struct {
	node            *yaml.Node
	enabled         val[bool]
	baseline        val[time.Duration]
	window          val[time.Duration]
	latencyMultiple val[float64]
	forDur          val[time.Duration]
	errorFraction   val[float64]
	minSamples      val[int]
	cooldown        val[time.Duration]
	probation       val[time.Duration]
	ratelimitUtil   val[float64]
}

type rawPolicy struct {
	profile           val[string]
	breaker           rawBreaker      // global only
	earlyWarning      rawEarlyWarning // global only
	retries           val[int]        // global only
	retryAfterMax     val[time.Duration]
	headerTimeout     val[time.Duration]
	gateTimeout       val[time.Duration]
	gateOnTimeout     val[string]
	streamIdleTimeout val[time.Duration]
	chainDeadline     val[time.Duration]
	midStream         val[string]
	degradedMode      val[string]
	degradedMessage   val[string]
}

type rawChannel struct {
	node       *yaml.Node
	id         val[string]
	provider   val[string]
	baseURL    val[string]
	apiKeyEnv  val[string]
	apiVersion val[string]
	entraID    val[bool]
	project    val[string]
	region     val[string]
	prefill    val[bool]
	retries    val[int]
	breaker    rawBreaker
	early      rawEarlyWarning
}

type rawModel struct {
	node            *yaml.Node
	name            val[string]
	chain           []*rawEntry
	chainNode       *yaml.Node // value of the chain key, nil when absent
	policy          rawPolicy
	fallbackModels  val[[]val[string]]
	contextFallback val[string]
	operations      val[[]val[string]]
	maxTokens       val[int]
	// The wallet keys (wallet.go): the list price and the reservation's
	// output estimate.
	priceSet          bool
	priceNode         *yaml.Node
	priceIn, priceOut val[int64]
	reserveOut        val[int64]
	realtimeHold      val[int64] // models[].realtime_hold (wallet.go)
}

type rawEntry struct {
	node          *yaml.Node
	index         int // 1-based position in the file's chain
	channel       val[string]
	upstreamModel val[string]
	input         val[float64]
	output        val[float64]
	prefill       val[bool]
	voices        val[map[string]string]
}

func (p *parser) file(root *yaml.Node) *rawFile {
	f := &rawFile{root: root}
	p.mapping(root, "the config file", fields{
		"listen":       func(_, v *yaml.Node) { f.listen = p.hostPort(v, "listen") },
		"admin_listen": func(_, v *yaml.Node) { f.adminListen = p.hostPort(v, "admin_listen") },
		"region":       func(_, v *yaml.Node) { f.region = p.str(v, "region") },
		"max_body_bytes": func(_, v *yaml.Node) {
			f.maxBodyBytes = p.integer(v, "max_body_bytes", 1)
		},
		"auth":     func(_, v *yaml.Node) { f.auth = p.auth(v) },
		"overload": func(_, v *yaml.Node) { f.overload = p.overload(v) },
		"realtime": func(_, v *yaml.Node) { f.realtime = p.realtime(v) },
		"admin": func(_, v *yaml.Node) {
			p.mapping(v, "admin", fields{
				"token_env": func(_, v *yaml.Node) { f.adminTokenEnv = p.envName(v, "token_env in admin") },
			})
		},
		"telemetry": func(_, v *yaml.Node) { f.telemetry = p.telemetry(v) },
		"status": func(_, v *yaml.Node) {
			p.mapping(v, "status", fields{
				"enabled": func(_, v *yaml.Node) { f.statusEnabled = p.boolean(v, "enabled in status") },
			})
		},
		"policy": func(_, v *yaml.Node) { f.policy = p.policy(v, "policy", true) },
		"channels": func(_, v *yaml.Node) {
			p.sequence(v, "channels", func(_ int, item *yaml.Node) {
				if c := p.channel(item); c != nil {
					f.channels = append(f.channels, c)
				}
			})
		},
		"models": func(_, v *yaml.Node) {
			f.modelsNode = deref(v)
			p.sequence(v, "models", func(_ int, item *yaml.Node) {
				if m := p.model(item); m != nil {
					f.models = append(f.models, m)
				}
			})
		},
		"store":      func(_, v *yaml.Node) { p.store(v, &f.wallet) },
		"billing":    func(_, v *yaml.Node) { p.billing(v, &f.wallet) },
		"admin_auth": func(_, v *yaml.Node) { p.adminAuth(v, &f.wallet) },

		"rate_limits": func(_, v *yaml.Node) { f.rateLimits = p.rateLimits(v) },
	})
	return f
}

func (p *parser) auth(n *yaml.Node) rawAuth {
	a := rawAuth{node: deref(n)}
	p.mapping(n, "auth", fields{
		"mode": func(_, v *yaml.Node) { a.mode = p.enum(v, "mode in auth", AuthKeys, AuthNone) },
		"keys": func(_, v *yaml.Node) {
			a.keysNode = deref(v)
			p.sequence(v, "keys in auth", func(i int, item *yaml.Node) {
				k := rawKey{node: deref(item)}
				ctx := fmt.Sprintf("auth key %d", i+1)
				if id, ok := peek(item, "id"); ok {
					ctx = fmt.Sprintf("auth key %q", id)
				}
				if p.mapping(item, ctx, fields{
					"id":     func(_, v *yaml.Node) { k.id = p.str(v, in("id", ctx)) },
					"sha256": func(_, v *yaml.Node) { k.sha256 = p.str(v, in("sha256", ctx)) },
					"tenant": func(_, v *yaml.Node) { k.tenant = p.str(v, in("tenant", ctx)) },
				}) {
					a.keys = append(a.keys, k)
				}
			})
		},
	})
	return a
}

func (p *parser) telemetry(n *yaml.Node) rawTelemetry {
	var t rawTelemetry
	p.mapping(n, "telemetry", fields{
		"healthy_sample_ratio": func(_, v *yaml.Node) {
			t.healthySampleRatio = p.number(v, "healthy_sample_ratio in telemetry")
			if t.healthySampleRatio.set && (t.healthySampleRatio.v < 0 || t.healthySampleRatio.v > 1) {
				p.errorf(t.healthySampleRatio.node, "healthy_sample_ratio in telemetry must be between 0 and 1, not %v", t.healthySampleRatio.v)
				t.healthySampleRatio = val[float64]{}
			}
		},
		"record_content": func(_, v *yaml.Node) {
			t.recordContent = p.boolean(v, "record_content in telemetry")
			if t.recordContent.set && t.recordContent.v {
				// Accepting the key and recording nothing would be a silent
				// lie about what the traces hold; refuse it until it exists.
				p.errorf(v, "record_content in telemetry: recording prompt and completion text is not implemented yet; remove the key or set it to false")
				t.recordContent = val[bool]{}
			}
		},
		"failover_log_size": func(_, v *yaml.Node) { t.failoverLogSize = p.count(v, "failover_log_size in telemetry", 0) },
		"path_header":       func(_, v *yaml.Node) { t.pathHeader = p.boolean(v, "path_header in telemetry") },
		"trust_inbound_trace": func(_, v *yaml.Node) {
			t.trustInboundTrace = p.boolean(v, "trust_inbound_trace in telemetry")
		},
		"trace_url": func(_, v *yaml.Node) { t.traceURL = p.traceURL(v, "trace_url in telemetry") },
		"trace_ring": func(_, v *yaml.Node) {
			p.mapping(v, "trace_ring in telemetry", fields{
				"max_traces": func(_, v *yaml.Node) {
					t.ringTraces = p.countMax(v, "max_traces in trace_ring in telemetry", 1, MaxTraceRingTraces)
				},
				"max_bytes": func(_, v *yaml.Node) { t.ringBytes = p.integer(v, "max_bytes in trace_ring in telemetry", 64<<10) },
			})
		},
	})
	return t
}

func (p *parser) breaker(n *yaml.Node, ctx string) rawBreaker {
	var b rawBreaker
	p.mapping(n, ctx, fields{
		"mode": func(_, v *yaml.Node) { b.mode = p.enum(v, in("mode", ctx), BreakerCount, BreakerRate) },
		"window": func(_, v *yaml.Node) {
			b.window = p.duration(v, in("window", ctx), true)
			if b.window.set && b.window.v > MaxBreakerWindow {
				p.errorf(b.window.node, "%s must be at most %s, not %s", in("window", ctx), dur(MaxBreakerWindow), b.window.node.Value)
				b.window = val[time.Duration]{}
			}
		},
		"failures": func(_, v *yaml.Node) { b.failures = p.countMax(v, in("failures", ctx), 1, MaxBreakerFailures) },
		"cooldown": func(_, v *yaml.Node) { b.cooldown = p.duration(v, in("cooldown", ctx), true) },
		"threshold": func(_, v *yaml.Node) {
			b.threshold = p.number(v, in("threshold", ctx))
			if b.threshold.set && (b.threshold.v <= 0 || b.threshold.v > 1) {
				p.errorf(b.threshold.node, "%s must be in (0, 1], not %v", in("threshold", ctx), b.threshold.v)
				b.threshold = val[float64]{}
			}
		},
		"min_requests": func(_, v *yaml.Node) {
			b.minRequests = p.countMax(v, in("min_requests", ctx), 1, MaxBreakerMinRequests)
		},
	})
	return b
}

// earlyWarning reads an early_warning block (policy.early_warning and
// channels[].early_warning).
func (p *parser) earlyWarning(n *yaml.Node, ctx string) rawEarlyWarning {
	e := rawEarlyWarning{node: deref(n)}
	bounded := func(v *yaml.Node, key string, lo time.Duration, positive bool) val[time.Duration] {
		d := p.duration(v, in(key, ctx), positive)
		switch {
		case d.set && d.v > MaxEarlyWarningDuration:
			p.errorf(d.node, "%s must be at most %s, not %s", in(key, ctx), dur(MaxEarlyWarningDuration), d.node.Value)
			return val[time.Duration]{}
		case d.set && d.v < lo:
			p.errorf(d.node, "%s must be at least %s, not %s", in(key, ctx), dur(lo), d.node.Value)
			return val[time.Duration]{}
		}
		return d
	}
	p.mapping(n, ctx, fields{
		"enabled":  func(_, v *yaml.Node) { e.enabled = p.boolean(v, in("enabled", ctx)) },
		"baseline": func(_, v *yaml.Node) { e.baseline = bounded(v, "baseline", 2*time.Second, true) },
		"window":   func(_, v *yaml.Node) { e.window = bounded(v, "window", time.Second, true) },
		"latency_multiple": func(_, v *yaml.Node) {
			e.latencyMultiple = p.number(v, in("latency_multiple", ctx))
			if m := e.latencyMultiple; m.set && (m.v <= 1 || m.v > 100) {
				p.errorf(m.node, "%s must be in (1, 100], not %v", in("latency_multiple", ctx), m.v)
				e.latencyMultiple = val[float64]{}
			}
		},
		"for": func(_, v *yaml.Node) { e.forDur = bounded(v, "for", 0, false) },
		"error_fraction": func(_, v *yaml.Node) {
			e.errorFraction = p.number(v, in("error_fraction", ctx))
			if f := e.errorFraction; f.set && (f.v <= 0 || f.v > 1) {
				p.errorf(f.node, "%s must be in (0, 1], not %v", in("error_fraction", ctx), f.v)
				e.errorFraction = val[float64]{}
			}
		},
		"min_samples": func(_, v *yaml.Node) {
			e.minSamples = p.countMax(v, in("min_samples", ctx), 1, MaxEarlyWarningMinSamples)
		},
		"cooldown":  func(_, v *yaml.Node) { e.cooldown = bounded(v, "cooldown", 0, true) },
		"probation": func(_, v *yaml.Node) { e.probation = bounded(v, "probation", 0, false) },
		"ratelimit_utilization": func(_, v *yaml.Node) {
			e.ratelimitUtil = p.number(v, in("ratelimit_utilization", ctx))
			if f := e.ratelimitUtil; f.set && (f.v < 0 || f.v > 1) {
				p.errorf(f.node, "%s must be in [0, 1] (0: off), not %v", in("ratelimit_utilization", ctx), f.v)
				e.ratelimitUtil = val[float64]{}
			}
		},
	})
	return e
}

// policy reads a policy block. The global block (global=true) also accepts
// breaker, early_warning and retries; a model block does not, because they
// belong to a channel: breaker and early-warning state is per process and
// channel, shared by every model.
func (p *parser) policy(n *yaml.Node, ctx string, global bool) rawPolicy {
	var r rawPolicy
	fs := fields{
		"profile":         func(_, v *yaml.Node) { r.profile = p.enum(v, in("profile", ctx), ProfileDefault, ProfileChat) },
		"retry_after_max": func(_, v *yaml.Node) { r.retryAfterMax = p.duration(v, in("retry_after_max", ctx), false) },
		"header_timeout":  func(_, v *yaml.Node) { r.headerTimeout = p.duration(v, in("header_timeout", ctx), true) },
		"stream_gate": func(_, v *yaml.Node) {
			sctx := in("stream_gate", ctx)
			p.mapping(v, sctx, fields{
				"timeout": func(_, v *yaml.Node) { r.gateTimeout = p.duration(v, in("timeout", sctx), true) },
				"on_timeout": func(_, v *yaml.Node) {
					r.gateOnTimeout = p.enum(v, in("on_timeout", sctx), OnTimeoutCommit, OnTimeoutFailover)
				},
			})
		},
		"stream_idle_timeout": func(_, v *yaml.Node) {
			r.streamIdleTimeout = p.duration(v, in("stream_idle_timeout", ctx), false)
		},
		"chain_deadline": func(_, v *yaml.Node) { r.chainDeadline = p.duration(v, in("chain_deadline", ctx), false) },
		"mid_stream": func(_, v *yaml.Node) {
			r.midStream = p.enum(v, in("mid_stream", ctx), MidStreamError, MidStreamResume)
		},
		"degraded_reply": func(_, v *yaml.Node) {
			dctx := in("degraded_reply", ctx)
			p.mapping(v, dctx, fields{
				"mode": func(_, v *yaml.Node) {
					r.degradedMode = p.enum(v, in("mode", dctx), DegradedError, DegradedMessage)
				},
				"message": func(_, v *yaml.Node) {
					r.degradedMessage = p.str(v, in("message", dctx))
					if r.degradedMessage.set && r.degradedMessage.v == "" {
						p.errorf(r.degradedMessage.node, "%s must not be empty", in("message", dctx))
						r.degradedMessage = val[string]{}
					}
				},
			})
		},
	}
	if global {
		fs["breaker"] = func(_, v *yaml.Node) { r.breaker = p.breaker(v, in("breaker", ctx)) }
		fs["early_warning"] = func(_, v *yaml.Node) { r.earlyWarning = p.earlyWarning(v, in("early_warning", ctx)) }
		fs["retries"] = func(_, v *yaml.Node) { r.retries = p.count(v, in("retries", ctx), 0) }
	} else {
		fs["breaker"] = func(k, _ *yaml.Node) {
			p.errorf(k, "%s: breaker is per channel; set it in policy or channels[].breaker", ctx)
		}
		fs["early_warning"] = func(k, _ *yaml.Node) {
			p.errorf(k, "%s: early_warning is per channel; set it in policy or channels[].early_warning", ctx)
		}
		fs["retries"] = func(k, _ *yaml.Node) {
			p.errorf(k, "%s: retries is per channel; set it in policy or channels[].retries", ctx)
		}
	}
	p.mapping(n, ctx, fs)
	return r
}

func (p *parser) channel(n *yaml.Node) *rawChannel {
	c := &rawChannel{node: deref(n)}
	ctx := "channel"
	if id, ok := peek(n, "id"); ok {
		ctx = fmt.Sprintf("channel %q", id)
	}
	ok := p.mapping(n, ctx, fields{
		"id":          func(_, v *yaml.Node) { c.id = p.str(v, in("id", ctx)) },
		"provider":    func(_, v *yaml.Node) { c.provider = p.enum(v, in("provider", ctx), providers...) },
		"base_url":    func(_, v *yaml.Node) { c.baseURL = p.baseURL(v, in("base_url", ctx)) },
		"api_key_env": func(_, v *yaml.Node) { c.apiKeyEnv = p.envName(v, in("api_key_env", ctx)) },
		"api_version": func(_, v *yaml.Node) { c.apiVersion = p.str(v, in("api_version", ctx)) },
		"entra_id":    func(_, v *yaml.Node) { c.entraID = p.boolean(v, in("entra_id", ctx)) },
		"project":     func(_, v *yaml.Node) { c.project = p.str(v, in("project", ctx)) },
		"region":      func(_, v *yaml.Node) { c.region = p.str(v, in("region", ctx)) },
		"prefill":     func(_, v *yaml.Node) { c.prefill = p.boolean(v, in("prefill", ctx)) },
		"retries":     func(_, v *yaml.Node) { c.retries = p.count(v, in("retries", ctx), 0) },
		"breaker":     func(_, v *yaml.Node) { c.breaker = p.breaker(v, "breaker of "+ctx) },
		"early_warning": func(_, v *yaml.Node) {
			c.early = p.earlyWarning(v, "early_warning of "+ctx)
		},
	})
	if !ok || isNull(c.node) {
		if ok {
			p.errorf(c.node, "%s is empty", ctx)
		}
		return nil
	}
	return c
}

func (p *parser) model(n *yaml.Node) *rawModel {
	m := &rawModel{node: deref(n)}
	ctx := "model"
	if name, ok := peek(n, "name"); ok {
		ctx = fmt.Sprintf("model %q", name)
	}
	ok := p.mapping(n, ctx, fields{
		"name": func(_, v *yaml.Node) { m.name = p.str(v, in("name", ctx)) },
		"chain": func(_, v *yaml.Node) {
			m.chainNode = deref(v)
			p.sequence(v, "chain of "+ctx, func(i int, item *yaml.Node) {
				if e := p.entry(item, i+1, ctx); e != nil {
					m.chain = append(m.chain, e)
				}
			})
		},
		"policy":           func(_, v *yaml.Node) { m.policy = p.policy(v, "policy of "+ctx, false) },
		"fallback_models":  func(_, v *yaml.Node) { m.fallbackModels = p.strList(v, in("fallback_models", ctx)) },
		"context_fallback": func(_, v *yaml.Node) { m.contextFallback = p.str(v, in("context_fallback", ctx)) },
		"max_tokens_default": func(_, v *yaml.Node) {
			m.maxTokens = p.count(v, in("max_tokens_default", ctx), 1)
		},
		"operations": func(_, v *yaml.Node) {
			what := in("operations", ctx)
			m.operations = p.strList(v, what)
			for _, op := range m.operations.v {
				if !knownOperation(op.v) {
					p.errorf(op.node, "%s: unknown operation %q (allowed: %s)", what, op.v, joinOps())
				}
			}
		},
		"price": func(_, v *yaml.Node) { p.modelPrice(v, ctx, m) },
		"reserve_output_tokens": func(_, v *yaml.Node) {
			m.reserveOut = p.tokens(v, in("reserve_output_tokens", ctx))
		},
		"realtime_hold": func(_, v *yaml.Node) { m.realtimeHold = p.amount(v, in("realtime_hold", ctx)) },
	})
	if !ok || isNull(m.node) {
		if ok {
			p.errorf(m.node, "%s is empty", ctx)
		}
		return nil
	}
	return m
}

func (p *parser) entry(n *yaml.Node, index int, model string) *rawEntry {
	e := &rawEntry{node: deref(n), index: index}
	ctx := fmt.Sprintf("chain entry %d of %s", index, model)
	ok := p.mapping(n, ctx, fields{
		"channel":        func(_, v *yaml.Node) { e.channel = p.str(v, in("channel", ctx)) },
		"upstream_model": func(_, v *yaml.Node) { e.upstreamModel = p.str(v, in("upstream_model", ctx)) },
		"prefill":        func(_, v *yaml.Node) { e.prefill = p.boolean(v, in("prefill", ctx)) },
		"voices":         func(_, v *yaml.Node) { e.voices = p.voices(v, in("voices", ctx)) },
		"price": func(_, v *yaml.Node) {
			pctx := in("price", ctx)
			p.mapping(v, pctx, fields{
				"input":  func(_, v *yaml.Node) { e.input = p.price(v, in("input", pctx)) },
				"output": func(_, v *yaml.Node) { e.output = p.price(v, in("output", pctx)) },
			})
		},
	})
	if !ok || isNull(e.node) {
		if ok {
			p.errorf(e.node, "%s is empty", ctx)
		}
		return nil
	}
	return e
}

func (p *parser) price(n *yaml.Node, what string) val[float64] {
	v := p.number(n, what)
	if v.set && v.v < 0 {
		p.errorf(v.node, "%s must not be negative, got %v", what, v.v)
		return val[float64]{}
	}
	return v
}

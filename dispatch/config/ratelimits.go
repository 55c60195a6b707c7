package config

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds rate_limits (DESIGN §16): tenant limits in requests and
// tokens per minute, optionally per model, and where their counters live.
// The reference is in docs/config.md and docs/tenants.md.

// Counter stores of rate_limits.store.
const (
	RateLimitMemory = "memory"
	RateLimitRedis  = "redis"
)

// What an admission gets while the counter store is down
// (rate_limits.on_store_error).
const (
	RateLimitAllow = "allow"
	RateLimitDeny  = "deny"
)

// MaxRateLimit bounds rpm and tpm: past it a limit is no limit, and the
// counters' integer arithmetic (units × one minute in nanoseconds) stays
// far from overflow.
const MaxRateLimit = 1_000_000_000

// RateLimits are the tenant limits and their counters.
type RateLimits struct {
	Store        string // RateLimitMemory | RateLimitRedis
	URLEnv       string
	URL          string // the Redis URL, read from URLEnv; never printed
	OnStoreError string // RateLimitAllow | RateLimitDeny
	// Tenants are the limits of the file, in file order.
	Tenants []TenantLimit
	index   map[limitKey]*TenantLimit
}

// TenantLimit is one tenant's limits, for all its models (Model empty) or
// one. Zero RPM or TPM: that kind is not limited at this level.
type TenantLimit struct {
	Tenant, Model string
	RPM, TPM      int64
	Line          int
}

type limitKey struct{ tenant, model string }

// Limits returns the tenant's limits of the file: for all its models, and
// for model. Either is nil when the file sets none. A Config built in code
// is scanned.
func (r *RateLimits) Limits(tenant, model string) (all, perModel *TenantLimit) {
	if len(r.Tenants) == 0 {
		return nil, nil
	}
	if r.index != nil {
		return r.index[limitKey{tenant, ""}], r.index[limitKey{tenant, model}]
	}
	for i := range r.Tenants {
		l := &r.Tenants[i]
		switch {
		case l.Tenant != tenant:
		case l.Model == "":
			all = l
		case l.Model == model:
			perModel = l
		}
	}
	return all, perModel
}

type rawRateLimits struct {
	node    *yaml.Node
	store   val[string]
	urlEnv  val[string]
	onError val[string]
	tenants []rawTenantLimit
}

type rawTenantLimit struct {
	node          *yaml.Node
	tenant, model val[string]
	rpm, tpm      val[int64]
}

func (p *parser) rateLimits(n *yaml.Node) rawRateLimits {
	r := rawRateLimits{node: deref(n)}
	p.mapping(n, "rate_limits", fields{
		"store":   func(_, v *yaml.Node) { r.store = p.enum(v, "store in rate_limits", RateLimitMemory, RateLimitRedis) },
		"url_env": func(_, v *yaml.Node) { r.urlEnv = p.envName(v, "url_env in rate_limits") },
		"on_store_error": func(_, v *yaml.Node) {
			r.onError = p.enum(v, "on_store_error in rate_limits", RateLimitAllow, RateLimitDeny)
		},
		"tenants": func(_, v *yaml.Node) {
			p.sequence(v, "tenants in rate_limits", func(i int, item *yaml.Node) {
				t := rawTenantLimit{node: deref(item)}
				ctx := fmt.Sprintf("tenant limit %d in rate_limits", i+1)
				if p.mapping(item, ctx, fields{
					"tenant": func(_, v *yaml.Node) { t.tenant = p.str(v, in("tenant", ctx)) },
					"model":  func(_, v *yaml.Node) { t.model = p.nonEmpty(v, in("model", ctx)) },
					"rpm":    func(_, v *yaml.Node) { t.rpm = p.rateLimit(v, in("rpm", ctx)) },
					"tpm":    func(_, v *yaml.Node) { t.tpm = p.rateLimit(v, in("tpm", ctx)) },
				}) {
					r.tenants = append(r.tenants, t)
				}
			})
		},
	})
	return r
}

// rateLimit reads an rpm or tpm: 1 to MaxRateLimit.
func (p *parser) rateLimit(n *yaml.Node, what string) val[int64] {
	v := p.integer(n, what, 1)
	if v.set && v.v > MaxRateLimit {
		p.errorf(v.node, "%s must be at most %d, not %d", what, MaxRateLimit, v.v)
		return val[int64]{}
	}
	return v
}

// resolveRateLimits resolves rate_limits once models are resolved (a
// per-model limit must name one).
func (p *parser) resolveRateLimits(c *Config, f *rawFile) {
	r := &f.rateLimits
	c.RateLimits = RateLimits{
		Store:        r.store.or(RateLimitMemory),
		URLEnv:       r.urlEnv.v,
		OnStoreError: r.onError.or(RateLimitAllow),
	}
	switch {
	case c.RateLimits.Store == RateLimitRedis && r.urlEnv.set:
		c.RateLimits.URL = p.lookupEnv(r.urlEnv, "url_env in rate_limits")
		if u := c.RateLimits.URL; u != "" && !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") && !strings.HasPrefix(u, "unix://") {
			// The value is a secret (it may hold a password): not printed.
			p.errorf(r.urlEnv.node, "environment variable %s (url_env in rate_limits) must hold a redis://, rediss:// or unix:// URL", r.urlEnv.v)
		}
	case c.RateLimits.Store == RateLimitRedis && !hasKey(r.node, "url_env"):
		p.errorf(r.store.node, "rate_limits store redis needs url_env: the name of the environment variable holding redis://host:port/db")
	case c.RateLimits.Store == RateLimitMemory && r.urlEnv.set:
		p.errorf(r.urlEnv.node, "url_env in rate_limits is for store redis; store memory keeps its counters in this process")
	case c.RateLimits.Store == RateLimitMemory && r.onError.set:
		p.errorf(r.onError.node, "on_store_error in rate_limits is for store redis; store memory cannot be unavailable")
	}
	seen := map[limitKey]int{}
	for i, rt := range r.tenants {
		ctx := fmt.Sprintf("tenant limit %d in rate_limits", i+1)
		if !rt.tenant.set {
			if !hasKey(rt.node, "tenant") {
				p.errorf(rt.node, "%s has no tenant", ctx)
			}
			continue
		}
		if !validTenant(rt.tenant.v) {
			p.errorf(rt.tenant.node, "tenant of %s must be 1 to 200 bytes without control characters", ctx)
			continue
		}
		if rt.model.set && c.Model(rt.model.v) == nil {
			p.errorf(rt.model.node, "%s names model %q, which is not in models", ctx, rt.model.v)
			continue
		}
		if !rt.rpm.set && !rt.tpm.set {
			if !hasKey(rt.node, "rpm") && !hasKey(rt.node, "tpm") && onlyKeys(rt.node, "tenant", "model") {
				p.errorf(rt.node, "%s (tenant %q) sets neither rpm nor tpm", ctx, rt.tenant.v)
			}
			continue
		}
		k := limitKey{rt.tenant.v, rt.model.v}
		if line, dup := seen[k]; dup {
			what := "tenant " + fmt.Sprintf("%q", k.tenant)
			if k.model != "" {
				what += fmt.Sprintf(" and model %q", k.model)
			}
			p.errorf(rt.node, "%s: a second limit for %s (first at line %d); put rpm and tpm in one entry", ctx, what, line)
			continue
		}
		seen[k] = rt.node.Line
		c.RateLimits.Tenants = append(c.RateLimits.Tenants, TenantLimit{
			Tenant: k.tenant, Model: k.model, RPM: rt.rpm.v, TPM: rt.tpm.v, Line: rt.node.Line,
		})
	}
	c.RateLimits.index = make(map[limitKey]*TenantLimit, len(c.RateLimits.Tenants))
	for i := range c.RateLimits.Tenants {
		l := &c.RateLimits.Tenants[i]
		c.RateLimits.index[limitKey{l.Tenant, l.Model}] = l
	}
}

// onlyKeys reports whether mapping n has no key but these (an unknown key
// was reported already; a second error about the same entry is noise).
func onlyKeys(n *yaml.Node, keys ...string) bool {
	if n == nil || n.Kind != yaml.MappingNode {
		return true
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		ok := false
		for _, k := range keys {
			ok = ok || n.Content[i].Value == k
		}
		if !ok {
			return false
		}
	}
	return true
}

package config

import "testing"

// Why: without rate_limits nothing is limited and the defaults are the
// documented ones; with it, the file's limits are found per tenant and
// per model.
func TestRateLimits(t *testing.T) {
	c := mustParse(t, walletBase, env())
	if r := c.RateLimits; r.Store != RateLimitMemory || r.OnStoreError != RateLimitAllow || len(r.Tenants) != 0 {
		t.Fatalf("defaults %+v", r)
	}
	if all, per := c.RateLimits.Limits("acme", "m"); all != nil || per != nil {
		t.Fatal("a limit without rate_limits")
	}
	c = mustParse(t, walletBase+`rate_limits:
  store: redis
  url_env: REDIS_URL
  on_store_error: deny
  tenants:
    - {tenant: acme, rpm: 600, tpm: 200000}
    - {tenant: acme, model: m, tpm: 50000}
`, env("REDIS_URL", "redis://127.0.0.1:6379/0"))
	r := c.RateLimits
	if r.Store != RateLimitRedis || r.URL != "redis://127.0.0.1:6379/0" || r.OnStoreError != RateLimitDeny {
		t.Fatalf("store %+v", r)
	}
	all, per := r.Limits("acme", "m")
	if all == nil || all.RPM != 600 || all.TPM != 200000 || per == nil || per.TPM != 50000 || per.RPM != 0 || per.Line != 21 {
		t.Fatalf("acme on m: %+v %+v", all, per)
	}
	if _, per := r.Limits("acme", "n"); per != nil {
		t.Fatalf("m's limit applied to n: %+v", per)
	}
	// A Config built in code has no index: Limits scans.
	coded := &RateLimits{Tenants: []TenantLimit{{Tenant: "acme", RPM: 1}, {Tenant: "acme", Model: "m", TPM: 2}}}
	if all, per := coded.Limits("acme", "m"); all == nil || all.RPM != 1 || per == nil || per.TPM != 2 {
		t.Fatalf("scan: %+v %+v", all, per)
	}
}

// Why: every mistake in rate_limits is one error at its line, naming the
// fix (the lines count from walletBase's 14).
func TestRateLimitsValidation(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		env         []string
		line        int
		sub         string
	}{
		{"unknown store", "rate_limits: {store: memcached}\n", nil, 15, `store in rate_limits must be one of memory, redis, not "memcached"`},
		{"redis without url_env", "rate_limits: {store: redis}\n", nil, 15, "store redis needs url_env"},
		{"redis url unset", "rate_limits: {store: redis, url_env: REDIS_URL}\n", nil, 15, "environment variable REDIS_URL (url_env in rate_limits) is not set"},
		{"redis url not a URL", "rate_limits: {store: redis, url_env: REDIS_URL}\n", []string{"REDIS_URL", "127.0.0.1:6379"}, 15, "must hold a redis://, rediss:// or unix:// URL"},
		{"url_env with memory", "rate_limits: {url_env: REDIS_URL}\n", []string{"REDIS_URL", "x"}, 15, "url_env in rate_limits is for store redis"},
		{"on_store_error with memory", "rate_limits: {on_store_error: deny}\n", nil, 15, "on_store_error in rate_limits is for store redis"},
		{"unknown on_store_error", "rate_limits: {store: redis, url_env: R, on_store_error: ignore}\n", []string{"R", "redis://h:1/0"}, 15, "must be one of allow, deny"},
		{"no tenant", "rate_limits: {tenants: [{rpm: 1}]}\n", nil, 15, "tenant limit 1 in rate_limits has no tenant"},
		{"neither rpm nor tpm", "rate_limits: {tenants: [{tenant: acme}]}\n", nil, 15, `(tenant "acme") sets neither rpm nor tpm`},
		{"zero rpm", "rate_limits: {tenants: [{tenant: acme, rpm: 0}]}\n", nil, 15, "rpm in tenant limit 1 in rate_limits must be at least 1"},
		{"huge tpm", "rate_limits: {tenants: [{tenant: acme, tpm: 2000000000}]}\n", nil, 15, "must be at most 1000000000"},
		{"unknown model", "rate_limits: {tenants: [{tenant: acme, model: gpt, rpm: 1}]}\n", nil, 15, `names model "gpt", which is not in models`},
		{"unknown key", "rate_limits: {tenants: [{tenant: acme, rph: 1}]}\n", nil, 15, `unknown key "rph" in tenant limit 1 in rate_limits`},
		{"duplicate", "rate_limits:\n  tenants:\n    - {tenant: acme, rpm: 1}\n    - {tenant: acme, tpm: 1}\n", nil, 18,
			`a second limit for tenant "acme" (first at line 17); put rpm and tpm in one entry`},
		{"duplicate per model", "rate_limits:\n  tenants:\n    - {tenant: acme, model: m, rpm: 1}\n    - {tenant: acme, model: m, tpm: 1}\n", nil, 18,
			`for tenant "acme" and model "m"`},
		{"control character", "rate_limits: {tenants: [{tenant: \"a\\u0007\", rpm: 1}]}\n", nil, 15, "must be 1 to 200 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, walletBase+tc.extra, env(tc.env...), tc.line, tc.sub) })
	}
}

package admin

import (
	"context"

	"github.com/hopgate/hopgate/dispatch/config"
)

// LimitView is one rate limit of a tenant (DESIGN §16): requests and
// tokens per minute, for all its models (Model empty) or one; 0 is
// unlimited. Source says where it comes from: "config" (rate_limits in
// the file, which wins) or "store" (`hopgate tenants limits`).
type LimitView struct {
	Model  string `json:"model,omitempty"`
	RPM    int64  `json:"rpm"`
	TPM    int64  `json:"tpm"`
	Source string `json:"source"`
}

// withLimits fills v's limits, when Tenants knows them.
func (t *Tenants) withLimits(ctx context.Context, v TenantView) TenantView {
	if t.Limits != nil {
		v.Limits = t.Limits(ctx, v.Tenant)
	}
	return v
}

// LimitsInForce merges the file's limits of tenant with the stored ones
// (the file's entry wins for the same model), file order first.
func LimitsInForce(cfg *config.Config, tenant string, stored []LimitView) []LimitView {
	var out []LimitView
	seen := map[string]bool{}
	for _, l := range cfg.RateLimits.Tenants {
		if l.Tenant == tenant {
			out = append(out, LimitView{Model: l.Model, RPM: l.RPM, TPM: l.TPM, Source: "config"})
			seen[l.Model] = true
		}
	}
	for _, l := range stored {
		if !seen[l.Model] {
			l.Source = "store"
			out = append(out, l)
		}
	}
	return out
}

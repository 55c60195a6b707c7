package telemetry

import (
	"context"
	"strings"
	"testing"
)

// Why: the tenant-limit metrics of DESIGN §16 as Prometheus sees them
// (docs/tenants.md names them): by model and kind, by store decision,
// never by tenant.
func TestRateLimitMetricNames(t *testing.T) {
	tel := setupTest(t, Options{Region: "eu-west-1", HealthyRatio: 1})
	ctx := context.Background()
	tel.Metrics.RateLimited(ctx, "gpt", "tokens")
	tel.Metrics.RateLimitStoreError(ctx, "allow")
	var nilM *Metrics
	nilM.RateLimited(ctx, "gpt", "tokens") // no panic without metrics
	body := scrape(t, tel, "")
	for _, want := range []string{
		`hopgate_tenant_ratelimited_total{kind="tokens",model="gpt",region="eu-west-1"} 1`,
		`hopgate_ratelimit_store_errors_total{decision="allow",region="eu-west-1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

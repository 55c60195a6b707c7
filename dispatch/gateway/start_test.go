package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/oauth2/google"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// Why: Start opens the store before it checks the channels' credentials;
// a gateway refused for a missing credential must close the store it
// opened (its pool goroutine and file), not leave it to the process.
func TestStartRefusedClosesStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	y := fmt.Sprintf(`
listen: %s
admin_listen: %s
auth: {mode: none}
store: {driver: sqlite, path: %q}
channels:
  - {id: v, provider: vertex, project: p, region: us-east5}
models:
  - {name: m, max_tokens_default: 1024, chain: [{channel: v}]}
`, testkit.LoopbackAddr(t), testkit.LoopbackAddr(t), filepath.Join(t.TempDir(), "hopgate.db"))
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	noADC := errors.New("no application default credentials")
	_, err = gateway.Start(context.Background(), cfg, gateway.Options{Telemetry: tel, Logger: slog.New(slog.DiscardHandler),
		Providers: provider.Options{GoogleCredentials: func(context.Context, ...string) (*google.Credentials, error) { return nil, noADC }}})
	if err == nil || !strings.Contains(err.Error(), "channel credentials") {
		t.Fatalf("Start = %v, want a channel credentials error", err)
	}
}

// Unset bounds are derived from the budget (DESIGN.md §13; docs/config.md):
// streams budget / 96 KiB, in flight twice that, whatever max_streams says;
// a configured bound is taken as it is.
func TestOverloadBoundsDerivedFromTheBudget(t *testing.T) {
	for _, tc := range []struct{ name, block, want string }{
		{"derived", "overload: {budget_bytes: 10485760}\n",
			`"buffer_budget_bytes":10485760,"max_in_flight":212,"max_streams":106`},
		{"streams set, in flight derived from the budget", "overload: {budget_bytes: 10485760, max_streams: 7}\n",
			`"buffer_budget_bytes":10485760,"max_in_flight":212,"max_streams":7`},
		{"both set", "overload: {budget_bytes: 10485760, max_in_flight: 9, max_streams: 7}\n",
			`"buffer_budget_bytes":10485760,"max_in_flight":9,"max_streams":7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := gwtest.Start(t, gwtest.Options{}, relTwo("m", tc.block), "a", "b")
			if logs := g.Logs.String(); !strings.Contains(logs, tc.want) {
				t.Fatalf("no %s in the start log:\n%s", tc.want, logs)
			}
		})
	}
}

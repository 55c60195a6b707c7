package wallet_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/money"
)

// Why: a reload (SIGHUP) applies new list prices to the next request, and
// refuses to move the store or the currency under running wallets.
func TestReloadPricesNotStore(t *testing.T) {
	e := newE2E(t, config.StoreSQLite)
	ctx := context.Background()
	e.st.CreateTenant(ctx, "acme", "test")
	e.st.TopUp(ctx, "acme", 1_000_000, "test")
	yml := e.configYAML("m|tokens=8", "ok", "")
	g := e.start(yml, t0)
	reload := func(y string) error {
		t.Helper()
		// Same listeners as the running gateway.
		cur := g.Config()
		lines := strings.SplitN(y, "\n", 3)
		y = "listen: \"" + cur.Listen + "\"\nadmin_listen: \"" + cur.AdminListen + "\"\n" + lines[2]
		cfg, err := config.Parse([]byte(y), e.getenv)
		if err != nil {
			t.Fatal(err)
		}
		return g.Reload(cfg)
	}
	if err := reload(strings.Replace(yml, "price: {input: 1, output: 2}", "price: {input: 2, output: 4}", 1)); err != nil {
		t.Fatal(err)
	}
	if r := post(t, g.Addr(), acmeKey, chatBody(false, 8)); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	led, _ := e.st.Ledger(ctx, "acme", 1)
	if want := (money.Price{Input: 2_000_000, Output: 4_000_000}).Cost(2, 8); led[0].AmountMicros != -want {
		t.Fatalf("charged %d after the reload, want %d", -led[0].AmountMicros, want)
	}
	moved := strings.Replace(yml, e.path, filepath.Join(t.TempDir(), "other.db"), 1)
	if err := reload(moved); err == nil || !strings.Contains(err.Error(), "store") {
		t.Fatalf("store moved on reload: %v", err)
	}
	if err := reload(yml + "billing: {currency: EUR}\n"); err == nil {
		t.Fatal("currency changed on reload")
	}
}

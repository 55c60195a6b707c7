package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/money"
)

// walletBase is a valid file with keys, a store and two models; tests
// append to it. Lines:
//
//	1 auth:
//	2   keys:
//	3     - {id: team-a, tenant: acme, sha256: <64 hex>}
//	4     - {id: team-b, sha256: <64 hex>}
//	5 channels:
//	6   - {id: cheap, base_url: "http://127.0.0.1:1/v1"}
//	7   - {id: dear, base_url: "http://127.0.0.1:2/v1"}
//	8 models:
//	9   - name: m
//	10    chain:
//	11      - {channel: dear, price: {input: 0.5, output: 2}}
//	12      - {channel: cheap, price: {input: 0.15, output: 0.6}}
//	13  - name: n
//	14    chain: [{channel: cheap, price: {input: 1, output: 1}}]
const walletBase = `auth:
  keys:
    - {id: team-a, tenant: acme, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}
    - {id: team-b, sha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752}
channels:
  - {id: cheap, base_url: "http://127.0.0.1:1/v1"}
  - {id: dear, base_url: "http://127.0.0.1:2/v1"}
models:
  - name: m
    chain:
      - {channel: dear, price: {input: 0.5, output: 2}}
      - {channel: cheap, price: {input: 0.15, output: 0.6}}
  - name: n
    chain: [{channel: cheap, price: {input: 1, output: 1}}]
`

// Why: without a store key nothing about wallets changes for an existing
// file: wallets are off, and every default is the documented one.
func TestWalletDefaults(t *testing.T) {
	c := mustParse(t, walletBase, env())
	if c.Store.Enabled || c.Wallets() {
		t.Fatalf("store enabled without a store key: %+v", c.Store)
	}
	want := Billing{Currency: "USD", OnStoreError: StoreErrorFailClosed, HoldTTL: 15 * time.Minute, ReserveOutputTokens: 4096}
	if c.Billing != want {
		t.Errorf("Billing = %+v, want %+v", c.Billing, want)
	}
	if k := c.Auth.Keys; k[0].Tenant != "acme" || k[1].Tenant != "team-b" {
		t.Errorf("tenants %q %q: want acme and the key id team-b", k[0].Tenant, k[1].Tenant)
	}
	m := c.Model("m")
	// The list price defaults to the cheapest entry's, read exactly.
	if m.ListPrice != (money.Price{Input: 150_000, Output: 600_000}) || m.ReserveOutputTokens != 4096 {
		t.Errorf("m: list price %+v, reserve %d", m.ListPrice, m.ReserveOutputTokens)
	}
	if m.Chain[0].PriceMicros != (money.Price{Input: 150_000, Output: 600_000}) ||
		m.Chain[1].PriceMicros != (money.Price{Input: 500_000, Output: 2_000_000}) {
		t.Errorf("entry prices %+v %+v", m.Chain[0].PriceMicros, m.Chain[1].PriceMicros)
	}
	if len(c.AdminAuth.Keys) != 0 {
		t.Errorf("admin keys %+v", c.AdminAuth.Keys)
	}
}

// Why: the keys of DESIGN §9 resolve to what the gateway needs, and with
// auth.mode none a store alone does not turn wallets on.
func TestWalletKeys(t *testing.T) {
	c := mustParse(t, walletBase+`    price: {input: "0.000001", output: 12.5}
    reserve_output_tokens: 100
    realtime_hold: 2.5
store: {driver: postgres, dsn_env: PG_DSN, key_refresh: 3s}
billing: {currency: EUR, on_store_error: fail_open, fail_open_credit: 0.25, hold_ttl: 5m, reserve_output_tokens: 2000, journal_dir: /var/lib/hopgate/journal}
admin_auth:
  keys:
    - {id: ops, sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}
`, env("PG_DSN", "postgres://u:secret@h/db"))
	if want := (Store{Enabled: true, Driver: StorePostgres, DSNEnv: "PG_DSN", DSN: "postgres://u:secret@h/db", KeyRefresh: 3 * time.Second}); c.Store != want {
		t.Errorf("Store = %+v, want %+v", c.Store, want)
	}
	if want := (Billing{Currency: "EUR", OnStoreError: StoreErrorFailOpen, FailOpenCredit: 250_000, HoldTTL: 5 * time.Minute, ReserveOutputTokens: 2000, JournalDir: "/var/lib/hopgate/journal"}); c.Billing != want {
		t.Errorf("Billing = %+v, want %+v", c.Billing, want)
	}
	if !c.Wallets() {
		t.Error("wallets off with a store and auth keys")
	}
	if n := c.Model("n"); n.ListPrice != (money.Price{Input: 1, Output: 12_500_000}) || n.ReserveOutputTokens != 100 {
		t.Errorf("n: list price %+v, reserve %d", n.ListPrice, n.ReserveOutputTokens)
	}
	if m := c.Model("m"); m.ReserveOutputTokens != 2000 {
		t.Errorf("m inherits billing.reserve_output_tokens: %d", m.ReserveOutputTokens)
	}
	if n, m := c.Model("n"), c.Model("m"); n.RealtimeHold != 2_500_000 || m.RealtimeHold != DefaultRealtimeHold {
		t.Errorf("realtime_hold: n %d (set 2.5), m %d (default)", n.RealtimeHold, m.RealtimeHold)
	}
	if k := c.AdminAuth.Keys; len(k) != 1 || k[0].ID != "ops" || k[0].Tenant != "" {
		t.Errorf("admin keys %+v", k)
	}
	none := mustParse(t, "auth: {mode: none}\nstore: {}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - {name: m, chain: [{channel: a}]}\n", env())
	if !none.Store.Enabled || none.Store.Path != DefaultStorePath || none.Store.Driver != StoreSQLite || none.Wallets() {
		t.Errorf("auth none + store: %+v, wallets %v", none.Store, none.Wallets())
	}
}

// Why: the SQLite file sits next to the config file, wherever the gateway
// was started from; an absolute path is kept.
func TestLoadStorePathNextToConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ store, want string }{
		{"store: {}", filepath.Join(dir, "hopgate.db")},
		{"store: {path: data/w.db}", filepath.Join(dir, "data", "w.db")},
		{"store: {path: /var/lib/hopgate/w.db}", "/var/lib/hopgate/w.db"},
	} {
		path := filepath.Join(dir, "hopgate.yaml")
		if err := os.WriteFile(path, []byte(walletBase+tc.store+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.Store.Path != tc.want {
			t.Errorf("%s: path %q, want %q", tc.store, c.Store.Path, tc.want)
		}
	}
}

// Why: the journal of unsettled charges lives beside the config by
// default, wherever the gateway was started from; an absolute path is kept.
func TestLoadJournalDirNextToConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ billing, want string }{
		{"", filepath.Join(dir, DefaultJournalDir)},
		{"billing: {journal_dir: j}", filepath.Join(dir, "j")},
		{"billing: {journal_dir: /var/lib/hopgate/j}", "/var/lib/hopgate/j"},
	} {
		path := filepath.Join(dir, "hopgate.yaml")
		if err := os.WriteFile(path, []byte(walletBase+"store: {}\n"+tc.billing+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.Billing.JournalDir != tc.want {
			t.Errorf("%q: journal_dir %q, want %q", tc.billing, c.Billing.JournalDir, tc.want)
		}
	}
}

// Every bad wallet value is an error at its line, naming the key.
func TestWalletValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		env   []string
		line  int
		sub   string
	}{
		{"unknown driver", "store: {driver: mysql}\n", nil, 15, `driver in store must be one of sqlite, postgres, not "mysql"`},
		{"postgres without dsn_env", "store: {driver: postgres}\n", nil, 15, "store driver postgres needs dsn_env"},
		{"dsn variable unset", "store: {driver: postgres, dsn_env: PG}\n", nil, 15, "environment variable PG (dsn_env in store) is not set"},
		{"dsn_env with sqlite", "store: {dsn_env: PG}\n", []string{"PG", "x"}, 15, "dsn_env in store is for driver postgres"},
		{"path with postgres", "store: {driver: postgres, dsn_env: PG, path: x.db}\n", []string{"PG", "x"}, 15, "path in store is for driver sqlite"},
		{"empty path", "store: {path: \"\"}\n", nil, 15, "path in store must not be empty"},
		{"key_refresh too long", "store: {key_refresh: 1h}\n", nil, 15, "key_refresh in store must be between 1s and 5m, not 1h"},
		{"key_refresh too short", "store: {key_refresh: 100ms}\n", nil, 15, "key_refresh in store must be between 1s and 5m"},
		{"unknown store key", "store: {file: x.db}\n", nil, 15, `unknown key "file" in store`},
		{"lower-case currency", "billing: {currency: usd}\n", nil, 15, "three-letter ISO 4217 code"},
		{"unknown on_store_error", "billing: {on_store_error: ignore}\n", nil, 15, "on_store_error in billing must be one of fail_closed, fail_open"},
		{"fail_open without credit", "billing: {on_store_error: fail_open}\n", nil, 15, "needs fail_open_credit > 0"},
		{"fail_open with zero credit", "billing: {on_store_error: fail_open, fail_open_credit: 0}\n", nil, 15, "must be greater than 0"},
		{"credit without fail_open", "billing: {fail_open_credit: 1}\n", nil, 15, "has no effect unless on_store_error is fail_open"},
		{"credit with 7 decimals", "billing: {on_store_error: fail_open, fail_open_credit: 0.0000001}\n", nil, 15, "more than 6 decimal places"},
		{"negative credit", "billing: {on_store_error: fail_open, fail_open_credit: -1}\n", nil, 15, "must not be negative"},
		{"hold_ttl too short", "billing: {hold_ttl: 10s}\n", nil, 15, "hold_ttl in billing must be between 1m and 24h"},
		{"reserve too large", "billing: {reserve_output_tokens: 20000000}\n", nil, 15, "must be at most 10000000"},
		{"reserve negative", "billing: {reserve_output_tokens: -1}\n", nil, 15, "must be at least 0"},
		{"list price in exponent form", "    price: {input: 1e-3, output: 1}\n", nil, 15, `input in price in model "n" is not a valid amount ("1e-3")`},
		{"list price negative", "    price: {input: -0.5, output: 1}\n", nil, 15, "must not be negative"},
		{"list price too high", "    price: {input: 2000000, output: 1}\n", nil, 15, "at most 1000000 per 1M tokens"},
		{"list price empty", "    price: {}\n", nil, 15, `price of model "n" is empty`},
		{"unknown price key", "    price: {input: 1, cached: 1}\n", nil, 15, `unknown key "cached" in price in model "n"`},
		{"model reserve negative", "    reserve_output_tokens: -3\n", nil, 15, `reserve_output_tokens in model "n" must be at least 0`},
		{"realtime hold negative", "    realtime_hold: -1\n", nil, 15, "must not be negative"},
		{"realtime hold not an amount", "    realtime_hold: [1]\n", nil, 15, `realtime_hold in model "n" must be`},
		{"admin key bad hash", "admin_auth: {keys: [{id: ops, sha256: abc}]}\n", nil, 15, `sha256 of admin key "ops" must be 64 hex characters`},
		{"admin key without id", "admin_auth: {keys: [{sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}]}\n", nil, 15, "admin key 1 has no id"},
		{"admin key is a client key", "admin_auth: {keys: [{id: ops, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}\n", nil, 15,
			`admin key "ops" has the same sha256 as client key team-a`},
		{"admin key duplicate id", "admin_auth:\n  keys:\n    - {id: ops, sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}\n    - {id: ops, sha256: 3c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}\n", nil, 18,
			`duplicate admin key id "ops" (first at line 17)`},
		{"admin tenant key", "admin_auth: {keys: [{id: ops, tenant: x, sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}]}\n", nil, 15,
			`unknown key "tenant" in admin key "ops"`},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, walletBase+tc.extra, env(tc.env...), tc.line, tc.sub) })
	}
	// A tenant with a control character cannot be stored.
	bad := strings.Replace(walletBase, "tenant: acme", `tenant: "ac\u0007me"`, 1)
	_, err := Parse([]byte(bad), env())
	if list := errorList(t, err); len(list) != 1 || list[0].Line != 3 || !strings.Contains(list[0].Msg, `tenant of auth key "team-a"`) {
		t.Fatalf("bad tenant: %v", err)
	}
	// Without a tenant the key id names it: with a store, the id must be
	// a name the store takes.
	bad = strings.Replace(walletBase, "id: team-b", `id: "team\u0007b"`, 1) + "store: {}\n"
	_, err = Parse([]byte(bad), env())
	if list := errorList(t, err); len(list) != 1 || list[0].Line != 4 || !strings.Contains(list[0].Msg, "its id names the tenant") {
		t.Fatalf("bad default tenant: %v", err)
	}
	if _, err := Parse([]byte(strings.Replace(walletBase, "id: team-b", `id: "team\u0007b"`, 1)), env()); err != nil {
		t.Fatalf("without a store the key id names no wallet: %v", err)
	}
}

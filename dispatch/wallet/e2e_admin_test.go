package wallet_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/dispatch/config"
)

// Why: every endpoint that changes money or keys needs an admin_auth key
// (401 without the right one; 403 when none is configured, so only the CLI
// changes wallets); each change is audited under the admin key's id; reads
// and errors are JSON that cannot turn into markup.
func TestAdminTenants(t *testing.T) {
	e := newE2E(t, config.StoreSQLite)
	g := e.start(e.configYAML("m", "ok", ""), t0)
	a := g.AdminAddr()
	const evil = `<img src=x onerror=alert(1)>`
	for _, tc := range []struct{ token string }{{""}, {"wrong"}, {acmeKey}} {
		if r := adminDo(t, a, http.MethodPost, "/admin/tenants", tc.token, `{"tenant":"acme"}`); r.status != http.StatusUnauthorized {
			t.Fatalf("create with token %q: %d %s", tc.token, r.status, r.body)
		}
	}
	r := adminDo(t, a, http.MethodPost, "/admin/tenants", adminKey, `{"tenant":"acme"}`)
	if r.status != http.StatusCreated || r.body != `{"tenant":"acme","currency":"USD","balance_micros":0,"reserved_micros":0}`+"\n" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := adminDo(t, a, http.MethodPost, "/admin/tenants", adminKey, `{"tenant":"acme"}`); r.status != http.StatusConflict {
		t.Fatalf("create twice: %d", r.status)
	}
	for _, bad := range []string{`{"amount":"0.0000001"}`, `{"amount":-1}`, `{"amount":"1e3"}`, `{"amount":0}`, `{"amount":"5","x":1}`, `not json`} {
		if r := adminDo(t, a, http.MethodPost, "/admin/tenants/acme/topup", adminKey, bad); r.status != http.StatusBadRequest {
			t.Errorf("top-up %s: %d %s", bad, r.status, r.body)
		}
	}
	if r := adminDo(t, a, http.MethodPost, "/admin/tenants/acme/topup", adminKey, `{"amount":"0.25"}`); r.body != `{"tenant":"acme","amount_micros":250000,"balance_micros":250000}`+"\n" {
		t.Fatalf("top-up: %d %s", r.status, r.body)
	}
	if r := adminDo(t, a, http.MethodPost, "/admin/tenants/acme/topup", adminKey, `{"amount":0.1}`); r.status != http.StatusOK || !strings.Contains(r.body, `"balance_micros":350000`) {
		t.Fatalf("top-up with a JSON number: %d %s", r.status, r.body)
	}
	if r := adminDo(t, a, http.MethodPost, "/admin/tenants/nobody/topup", adminKey, `{"amount":"1"}`); r.status != http.StatusNotFound {
		t.Fatalf("top-up of nobody: %d", r.status)
	}
	r = adminDo(t, a, http.MethodPost, "/admin/tenants/acme/keys", adminKey, "")
	var issued struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}
	if r.status != http.StatusCreated || json.Unmarshal([]byte(r.body), &issued) != nil || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("issue: %d %v %s", r.status, r.header, r.body)
	}
	// The issued key works at once on this gateway.
	if r := post(t, g.Addr(), issued.Key, chatBody(false, 5)); r.status != http.StatusOK {
		t.Fatalf("issued key: %d %s", r.status, r.body)
	}
	if r := adminDo(t, a, http.MethodGet, "/admin/tenants/acme/keys", "", ""); !strings.Contains(r.body, issued.KeyID) || strings.Contains(r.body, "sha256") {
		t.Fatalf("keys: %s", r.body)
	}
	if r := adminDo(t, a, http.MethodDelete, "/admin/tenants/acme/keys/"+issued.KeyID, "", ""); r.status != http.StatusUnauthorized {
		t.Fatalf("revoke without a key: %d", r.status)
	}
	if r := adminDo(t, a, http.MethodDelete, "/admin/tenants/other/keys/"+issued.KeyID, adminKey, ""); r.status != http.StatusNotFound {
		t.Fatalf("revoke under the wrong tenant: %d", r.status)
	}
	if r := adminDo(t, a, http.MethodDelete, "/admin/tenants/acme/keys/"+issued.KeyID, adminKey, ""); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := post(t, g.Addr(), issued.Key, chatBody(false, 5)); r.status != http.StatusUnauthorized {
		t.Fatalf("revoked key on the gateway that revoked it: %d", r.status)
	}
	// Reads: list, show, ledger.
	if r := adminDo(t, a, http.MethodGet, "/admin/tenants", "", ""); !strings.HasPrefix(r.body, `[{"tenant":"acme"`) {
		t.Fatalf("list: %s", r.body)
	}
	r = adminDo(t, a, http.MethodGet, "/admin/tenants/acme/ledger?limit=2", "", "")
	var rows []struct {
		Kind          string `json:"kind"`
		AmountMicros  int64  `json:"amount_micros"`
		BalanceMicros int64  `json:"balance_micros"`
	}
	if json.Unmarshal([]byte(r.body), &rows) != nil || len(rows) != 2 || rows[0].Kind != "charge" || rows[1].AmountMicros != 100_000 {
		t.Fatalf("ledger: %s", r.body)
	}
	if r := adminDo(t, a, http.MethodGet, "/admin/tenants/acme/ledger?limit=0", "", ""); r.status != http.StatusBadRequest {
		t.Fatalf("limit 0: %d", r.status)
	}
	// Every change is audited under the admin key's id.
	audit, _ := e.st.Audit(context.Background(), 0)
	if len(audit) != 5 { // create, 2 top-ups, key add, key revoke
		t.Fatalf("audit %+v", audit)
	}
	for _, row := range audit {
		if row.Actor != "ops-alice" {
			t.Fatalf("audit actor %q", row.Actor)
		}
	}
	// A name that is markup stays inert text in JSON.
	r = adminDo(t, a, http.MethodPost, "/admin/tenants", adminKey, `{"tenant":"`+strings.ReplaceAll(evil, `"`, `\"`)+`"}`)
	if r.status != http.StatusCreated || strings.Contains(r.body, "<img") || !strings.Contains(r.body, `\u003cimg`) ||
		r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("evil create: %d %v %s", r.status, r.header, r.body)
	}
	r = adminDo(t, a, http.MethodGet, "/admin/tenants/"+strings.ReplaceAll(evil, " ", "%20")+"x/ledger", "", "")
	if r.status != http.StatusNotFound || strings.Contains(r.body, "<img") {
		t.Fatalf("evil 404: %d %s", r.status, r.body)
	}
}

// Why: without admin_auth keys the admin listener changes nothing (403),
// whatever token is sent, while reads still work; with admin.token_env,
// reads need that token or an admin key.
func TestAdminTenantsLockedWithoutAdminKeys(t *testing.T) {
	e := newE2E(t, config.StoreSQLite)
	e.st.CreateTenant(context.Background(), "acme", "test")
	yml := e.configYAML("m", "ok", "")
	yml = strings.Replace(yml, "admin_auth:\n  keys:\n    - {id: ops-alice, sha256: "+sha(adminKey)+"}\n", "admin: {token_env: ADMIN_TOKEN}\n", 1)
	e.extraEnv = map[string]string{"ADMIN_TOKEN": "page-token"}
	g := e.start(yml, t0)
	a := g.AdminAddr()
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, "/admin/tenants", `{"tenant":"x"}`},
		{http.MethodPost, "/admin/tenants/acme/topup", `{"amount":"5"}`},
		{http.MethodPost, "/admin/tenants/acme/keys", ""},
		{http.MethodDelete, "/admin/tenants/acme/keys/k", ""},
	} {
		for _, tok := range []string{"", "page-token", adminKey} {
			if r := adminDo(t, a, req.method, req.path, tok, req.body); r.status != http.StatusForbidden {
				t.Errorf("%s %s with %q: %d, want 403", req.method, req.path, tok, r.status)
			}
		}
	}
	if r := adminDo(t, a, http.MethodGet, "/admin/tenants/acme", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("read without the page token: %d", r.status)
	}
	if r := adminDo(t, a, http.MethodGet, "/admin/tenants/acme", "page-token", ""); r.status != http.StatusOK || !strings.Contains(r.body, `"balance_micros":0`) {
		t.Errorf("read with the page token: %d %s", r.status, r.body)
	}
	if tn := e.tenant(); tn.BalanceMicros != 0 {
		t.Fatalf("wallet changed: %+v", tn)
	}
}

// Why: a key revoked on one replica stops working on another within
// store.key_refresh (10 s here, on the other gateway's clock), and a key
// issued on one replica starts working on the other within it too.
func TestRevocationReachesAnotherGateway(t *testing.T) {
	drivers(t, func(t *testing.T, driver string) {
		e := newE2E(t, driver)
		ctx := context.Background()
		e.st.CreateTenant(ctx, "acme", "test")
		e.st.TopUp(ctx, "acme", 1_000_000, "test")
		ga := e.start(e.configYAML("m", "ok", ""), t0)
		gb := e.start(e.configYAML("m", "ok", ""), t0)
		r := adminDo(t, ga.AdminAddr(), http.MethodPost, "/admin/tenants/acme/keys", adminKey, "")
		var issued struct {
			KeyID string `json:"key_id"`
			Key   string `json:"key"`
		}
		if json.Unmarshal([]byte(r.body), &issued) != nil || issued.Key == "" {
			t.Fatalf("issue: %d %s", r.status, r.body)
		}
		if r := post(t, gb.Addr(), issued.Key, chatBody(false, 5)); r.status != http.StatusUnauthorized {
			t.Fatalf("b knew the key before its refresh: %d", r.status)
		}
		gb.clock.Advance(10 * time.Second)
		waitFor(t, "b to learn the key", func() bool { return post(t, gb.Addr(), issued.Key, chatBody(false, 5)).status == http.StatusOK })

		if r := adminDo(t, ga.AdminAddr(), http.MethodDelete, "/admin/tenants/acme/keys/"+issued.KeyID, adminKey, ""); r.status != http.StatusOK {
			t.Fatalf("revoke: %d %s", r.status, r.body)
		}
		if r := post(t, ga.Addr(), issued.Key, chatBody(false, 5)); r.status != http.StatusUnauthorized {
			t.Fatalf("a still accepts the key it revoked: %d", r.status)
		}
		gb.clock.Advance(9 * time.Second) // not yet a refresh period
		if r := post(t, gb.Addr(), issued.Key, chatBody(false, 5)); r.status != http.StatusOK {
			t.Fatalf("b before its refresh: %d", r.status)
		}
		gb.clock.Advance(time.Second)
		waitFor(t, "b to drop the revoked key", func() bool {
			return post(t, gb.Addr(), issued.Key, chatBody(false, 5)).status == http.StatusUnauthorized
		})
		if err := e.st.Verify(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

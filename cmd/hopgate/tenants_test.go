package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/store"
)

// tenantsConfig writes a config whose store is an SQLite file next to it
// and whose channel credential is not set in the environment (the CLI must
// not need it).
func tenantsConfig(t *testing.T) (cfgPath, dbPath string) {
	t.Helper()
	dir := t.TempDir()
	cfgPath = filepath.Join(dir, "hopgate.yaml")
	yml := `auth: {keys: [{id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}]}
store: {driver: sqlite, path: wallets.db}
channels: [{id: a, base_url: "http://127.0.0.1:1/v1", api_key_env: HOPGATE_TEST_UNSET_CREDENTIAL}]
models: [{name: m, chain: [{channel: a}]}]
`
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, filepath.Join(dir, "wallets.db")
}

// tenantsRun runs `hopgate tenants args…` and returns stdout, stderr and
// the exit code.
func tenantsRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"tenants"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// Why: the CLI of DESIGN §9 end to end on a real SQLite file: the JSON
// shapes, amounts parsed exactly, the key printed once and stored only as
// its hash, the ledger newest first, and every change audited as "cli".
func TestTenantsCLIRoundTrip(t *testing.T) {
	cfg, db := tenantsConfig(t)
	mustRun := func(args ...string) string {
		t.Helper()
		out, errs, code := tenantsRun(t, append(args, "--config", cfg)...)
		if code != 0 {
			t.Fatalf("tenants %v: exit %d\n%s", args, code, errs)
		}
		return out
	}
	if out := mustRun("create", "acme"); out != `{"tenant":"acme","currency":"USD","balance_micros":0,"reserved_micros":0}`+"\n" {
		t.Fatalf("create: %s", out)
	}
	if out := mustRun("topup", "acme", "0.1"); out != `{"tenant":"acme","amount_micros":100000,"balance_micros":100000}`+"\n" {
		t.Fatalf("topup: %s", out)
	}
	mustRun("topup", "acme", "5") // flags after positional arguments work too
	if out := mustRun("show", "acme"); out != `{"tenant":"acme","currency":"USD","balance_micros":5100000,"reserved_micros":0}`+"\n" {
		t.Fatalf("show: %s", out)
	}
	var issued struct {
		KeyID string `json:"key_id"`
		Key   string `json:"key"`
	}
	if err := json.Unmarshal([]byte(mustRun("key", "issue", "acme")), &issued); err != nil || issued.KeyID == "" || !strings.HasPrefix(issued.Key, "hg-") {
		t.Fatalf("key issue: %+v %v", issued, err)
	}
	ledger := strings.Split(strings.TrimSpace(mustRun("ledger", "acme")), "\n")
	var newest struct {
		Kind          string `json:"kind"`
		AmountMicros  int64  `json:"amount_micros"`
		BalanceMicros int64  `json:"balance_micros"`
		Time          string `json:"time"`
	}
	if len(ledger) != 2 || json.Unmarshal([]byte(ledger[0]), &newest) != nil ||
		newest.Kind != "topup" || newest.AmountMicros != 5_000_000 || newest.BalanceMicros != 5_100_000 || newest.Time == "" {
		t.Fatalf("ledger:\n%s", strings.Join(ledger, "\n"))
	}
	mustRun("create", "beta")
	if out := mustRun("list"); strings.Count(out, "\n") != 2 || !strings.Contains(out, `"tenant":"beta"`) {
		t.Fatalf("list:\n%s", out)
	}
	if out := mustRun("key", "revoke", issued.KeyID); out != `{"key_id":"`+issued.KeyID+`","revoked":true}`+"\n" {
		t.Fatalf("revoke: %s", out)
	}

	s, err := store.Open(context.Background(), store.Config{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys, _ := s.Keys(context.Background())
	if len(keys) != 1 || !keys[0].Revoked || strings.Contains(keys[0].SHA256, issued.Key) || len(keys[0].SHA256) != 64 {
		t.Fatalf("stored keys %+v", keys)
	}
	audit, _ := s.Audit(context.Background(), 0)
	if len(audit) != 6 { // create, topup, topup, key add, create, key revoke
		t.Fatalf("audit %+v", audit)
	}
	for _, a := range audit {
		if a.Actor != "cli" {
			t.Fatalf("audit actor %q", a.Actor)
		}
	}
	if err := s.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Why: mistakes are refused with a message and a non-zero exit, never a
// silent rounding or a half-done change.
func TestTenantsCLIRefusals(t *testing.T) {
	cfg, _ := tenantsConfig(t)
	if _, errs, code := tenantsRun(t, "create", "acme", "--config", cfg); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		args []string
		code int
		sub  string
	}{
		{[]string{"topup", "acme", "0.0000001"}, 1, "more than 6 decimal places"},
		{[]string{"topup", "acme", "1e3"}, 1, "not a decimal amount"},
		{[]string{"topup", "acme", "0"}, 1, "greater than 0"},
		{[]string{"topup", "nobody", "1"}, 1, "not found"},
		{[]string{"create", "acme"}, 1, "already exists"},
		{[]string{"show"}, 2, "wrong number of arguments"},
		{[]string{"key", "rotate", "x"}, 2, "issue NAME | revoke KEY_ID"},
		{[]string{"key", "revoke", "key-nope"}, 1, "not found"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		_, errs, code := tenantsRun(t, append(tc.args, "--config", cfg)...)
		if code != tc.code || !strings.Contains(errs, tc.sub) {
			t.Errorf("tenants %v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.sub)
		}
	}
	if _, errs, code := tenantsRun(t, "list"); code != 2 || !strings.Contains(errs, "--config FILE is required") {
		t.Errorf("no config: %d %q", code, errs)
	}
	noStore := filepath.Join(t.TempDir(), "x.yaml")
	_ = os.WriteFile(noStore, []byte("auth: {mode: none}\nchannels: [{id: a, base_url: \"http://h\"}]\nmodels: [{name: m, chain: [{channel: a}]}]\n"), 0o600)
	if _, errs, code := tenantsRun(t, "list", "--config", noStore); code != 1 || !strings.Contains(errs, "configures no store") {
		t.Errorf("no store: %d %q", code, errs)
	}
}

// Why: a tenant name is the operator's text; the JSON output escapes it,
// so a name that looks like markup cannot become markup wherever the
// output is shown.
func TestTenantsCLIOutputIsJSONSafe(t *testing.T) {
	cfg, _ := tenantsConfig(t)
	out, errs, code := tenantsRun(t, "create", `<script>alert("x")</script>`, "--config", cfg)
	if code != 0 {
		t.Fatal(errs)
	}
	if strings.Contains(out, "<script>") || !strings.Contains(out, `\u003cscript\u003e`) {
		t.Fatalf("output %s", out)
	}
	var v struct{ Tenant string }
	if json.Unmarshal([]byte(out), &v) != nil || v.Tenant != `<script>alert("x")</script>` {
		t.Fatalf("does not round-trip: %s", out)
	}
}

// Why: flags go anywhere among the arguments, and "--" ends them, so a
// tenant whose name starts with '-' can still be named; without "--" such
// a name is refused as a flag, never taken for a tenant.
func TestTenantsCLIFlagsAnywhere(t *testing.T) {
	cfg, _ := tenantsConfig(t)
	if out, errs, code := tenantsRun(t, "--config", cfg, "create", "acme"); code != 0 || !strings.Contains(out, `"tenant":"acme"`) {
		t.Fatalf("flag first: exit %d, %s%s", code, out, errs)
	}
	if out, errs, code := tenantsRun(t, "--config", cfg, "create", "--", "-dash"); code != 0 || !strings.Contains(out, `"tenant":"-dash"`) {
		t.Fatalf("after --: exit %d, %s%s", code, out, errs)
	}
	if _, errs, code := tenantsRun(t, "--config", cfg, "show", "-other"); code != 2 || !strings.Contains(errs, "-other") {
		t.Fatalf("a dash name without --: exit %d, %q; want 2 and the bad flag named", code, errs)
	}
}

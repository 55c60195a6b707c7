package main

import (
	"strings"
	"testing"
)

// Why: `hopgate tenants limits` (DESIGN §16) sets a tenant's rpm and tpm,
// for all its models or one, prints them back as JSON lines, removes a
// limit with 0/0, and refuses a tenant that does not exist or a negative
// limit with a non-zero exit.
func TestTenantsCLILimits(t *testing.T) {
	cfg, _ := tenantsConfig(t)
	mustRun := func(args ...string) string {
		t.Helper()
		out, errs, code := tenantsRun(t, append(args, "--config", cfg)...)
		if code != 0 {
			t.Fatalf("tenants %v: exit %d\n%s", args, code, errs)
		}
		return out
	}
	mustRun("create", "acme")
	if out := mustRun("limits", "acme", "--rpm", "600", "--tpm", "200000"); out != `{"tenant":"acme","rpm":600,"tpm":200000}`+"\n" {
		t.Fatalf("set: %s", out)
	}
	mustRun("limits", "acme", "--model", "m", "--tpm", "50000")
	mustRun("limits", "acme", "--model", "gone", "--rpm", "1")
	mustRun("limits", "acme", "--model", "gone", "--rpm", "0")
	want := `{"tenant":"acme","rpm":600,"tpm":200000}` + "\n" + `{"tenant":"acme","model":"m","rpm":0,"tpm":50000}` + "\n"
	if out := mustRun("limits", "acme"); out != want {
		t.Fatalf("show:\n%s\nwant:\n%s", out, want)
	}
	for _, bad := range [][]string{
		{"limits", "nobody", "--rpm", "1"},
		{"limits", "nobody"},
		{"limits", "acme", "--rpm", "-1"},
		{"limits"},
	} {
		if _, errs, code := tenantsRun(t, append(bad, "--config", cfg)...); code == 0 || !strings.Contains(errs, "hopgate tenants") {
			t.Errorf("%v: exit %d %q", bad, code, errs)
		}
	}
}

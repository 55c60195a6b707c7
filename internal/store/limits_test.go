package store

import (
	"errors"
	"slices"
	"testing"
)

// Why: `hopgate tenants limits` stores one row per tenant and model on
// both drivers: set, replaced, removed with 0/0, audited, and refused for
// a tenant that does not exist or a negative limit.
func TestTenantLimits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		s := openStore(t, b.newDB(t))
		if _, err := s.CreateTenant(ctx(t), "acme", "cli:root"); err != nil {
			t.Fatal(err)
		}
		for _, l := range []TenantLimit{
			{Tenant: "acme", RPM: 600, TPM: 200000},
			{Tenant: "acme", Model: "gpt-4o", TPM: 1},
			{Tenant: "acme", Model: "gpt-4o", TPM: 50000}, // replaces
			{Tenant: "acme", Model: "old", RPM: 5},
			{Tenant: "acme", Model: "old"}, // removes
		} {
			if err := s.SetLimit(ctx(t), l, "cli:root"); err != nil {
				t.Fatalf("%+v: %v", l, err)
			}
		}
		got, err := s.Limits(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		want := []TenantLimit{{Tenant: "acme", RPM: 600, TPM: 200000}, {Tenant: "acme", Model: "gpt-4o", TPM: 50000}}
		if !slices.Equal(got, want) {
			t.Fatalf("limits %+v, want %+v", got, want)
		}
		if err := s.SetLimit(ctx(t), TenantLimit{Tenant: "nobody", RPM: 1}, "cli:root"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown tenant: %v", err)
		}
		if err := s.SetLimit(ctx(t), TenantLimit{Tenant: "acme", RPM: -1}, "cli:root"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("negative rpm: %v", err)
		}
		audit, err := s.Audit(ctx(t), 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range audit {
			if a.Action == ActionLimits {
				n++
			}
		}
		if n != 5 {
			t.Fatalf("%d limit audit rows, want 5", n)
		}
	})
}

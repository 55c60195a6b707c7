package store

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// latestVersion is the highest migration version shipped for driver.
func latestVersion(t *testing.T, driver string) int64 {
	t.Helper()
	fsys, err := migrationsFS(driver)
	if err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations for %s: %v", driver, err)
	}
	var v int64
	fmt.Sscanf(slices.Max(names), "%d_", &v)
	return v
}

// Open on an empty database applies every migration; a second Open (a
// restart, another replica) finds nothing pending and keeps the data.
func TestMigrationsFromEmptyAndReopen(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		cfg := b.newDB(t)
		s := openStore(t, cfg)
		p, err := newMigrator(s.db, s.driver)
		if err != nil {
			t.Fatal(err)
		}
		v, err := p.GetDBVersion(ctx(t))
		if err != nil || v != latestVersion(t, b.name) {
			t.Fatalf("schema version %d, %v; want %d", v, err, latestVersion(t, b.name))
		}
		if _, err := s.CreateTenant(ctx(t), "acme", actor); err != nil {
			t.Fatal(err)
		}
		s.Close()

		s2 := openStore(t, cfg)
		p, _ = newMigrator(s2.db, s2.driver)
		if pending, err := p.HasPending(ctx(t)); err != nil || pending {
			t.Fatalf("pending migrations after re-open: %v, %v", pending, err)
		}
		if _, err := s2.Tenant(ctx(t), "acme"); err != nil {
			t.Fatalf("tenant lost across re-open: %v", err)
		}
	})
}

// Both drivers' migrations have the same versions, and the schemas they
// build have the same tables and columns: "same schema" is checked, not
// promised.
func TestSchemasAgree(t *testing.T) {
	if latestVersion(t, DriverSQLite) != latestVersion(t, DriverPostgres) {
		t.Fatal("the drivers' migrations end at different versions")
	}
	lite := openStore(t, backends[0].newDB(t))
	pg := openStore(t, backends[1].newDB(t))
	liteCols := columns(t, lite, `SELECT m.name || '.' || p.name FROM sqlite_master m, pragma_table_info(m.name) p
		WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'`)
	pgCols := columns(t, pg, `SELECT table_name || '.' || column_name FROM information_schema.columns
		WHERE table_schema = 'public'`)
	if !slices.Equal(liteCols, pgCols) {
		t.Fatalf("schemas differ:\nsqlite:   %v\npostgres: %v", liteCols, pgCols)
	}
	if len(liteCols) < 20 {
		t.Fatalf("suspiciously few columns: %v", liteCols)
	}
}

func columns(t *testing.T, s *Store, query string) []string {
	t.Helper()
	rows, err := s.db.QueryContext(ctx(t), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Config errors are ErrInvalid, before anything is opened.
func TestOpenRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"unknown driver":   {Driver: "mysql"},
		"sqlite, no path":  {Driver: DriverSQLite},
		"postgres, no dsn": {Driver: DriverPostgres},
		"bad dsn":          {Driver: DriverPostgres, DSN: "postgres://u:secret@h:notaport/db"},
		"bad currency":     {Path: "x.db", Currency: "usd"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Open(ctx(t), cfg)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Open: %v, want ErrInvalid", err)
			}
			if strings.Contains(fmt.Sprint(err), "secret") {
				t.Fatalf("the error quotes the DSN's password: %v", err)
			}
		})
	}
}

// Tenants are created once, in the store's currency, with an empty wallet
// and an audit row; unknown names are ErrNotFound.
func TestTenants(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clock := newClock()
		cfg := b.newDB(t)
		cfg.Currency, cfg.Clock = "EUR", clock.Now
		s := openStore(t, cfg)

		got, err := s.CreateTenant(ctx(t), "acme", actor)
		if err != nil {
			t.Fatal(err)
		}
		want := Tenant{Name: "acme", Currency: "EUR", CreatedAt: clock.Now().Truncate(time.Microsecond)}
		if got != want {
			t.Fatalf("CreateTenant = %+v, want %+v", got, want)
		}
		if _, err := s.CreateTenant(ctx(t), "acme", actor); !errors.Is(err, ErrExists) {
			t.Fatalf("second CreateTenant: %v, want ErrExists", err)
		}
		if _, err := s.CreateTenant(ctx(t), "", actor); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty name: %v, want ErrInvalid", err)
		}
		if _, err := s.CreateTenant(ctx(t), "beta", ""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty actor: %v, want ErrInvalid", err)
		}
		if _, err := s.CreateTenant(ctx(t), "beta", actor); err != nil {
			t.Fatal(err)
		}
		if read, err := s.Tenant(ctx(t), "acme"); err != nil || read != want {
			t.Fatalf("Tenant = %+v, %v; want %+v", read, err, want)
		}
		if _, err := s.Tenant(ctx(t), "nobody"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown tenant: %v, want ErrNotFound", err)
		}
		all, err := s.Tenants(ctx(t))
		if err != nil || len(all) != 2 || all[0].Name != "acme" || all[1].Name != "beta" {
			t.Fatalf("Tenants = %+v, %v", all, err)
		}
		audit, err := s.Audit(ctx(t), 0)
		if err != nil || len(audit) != 2 {
			t.Fatalf("audit = %+v, %v; want the two creations", audit, err)
		}
		if a := audit[1]; a.Action != ActionTenantCreate || a.Subject != "acme" || a.Actor != actor ||
			a.Detail != "currency=EUR" || !a.Time.Equal(want.CreatedAt) {
			t.Fatalf("audit row %+v", a)
		}
	})
}

func sum(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Keys are stored by hash only, found by hash (revoked ones too, marked),
// revoked once, listed whole for replicas; each change is audited.
func TestKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clock := newClock()
		cfg := b.newDB(t)
		cfg.Clock = clock.Now
		s := openStore(t, cfg)
		if _, err := s.CreateTenant(ctx(t), "acme", actor); err != nil {
			t.Fatal(err)
		}
		k := KeyRecord{KeyID: "team-a", Tenant: "acme", SHA256: strings.ToUpper(sum("sk-a"))}
		if err := s.AddKey(ctx(t), k, actor); err != nil {
			t.Fatal(err)
		}
		for name, tc := range map[string]struct {
			k    KeyRecord
			want error
		}{
			"same id":        {KeyRecord{KeyID: "team-a", Tenant: "acme", SHA256: sum("sk-other")}, ErrExists},
			"same hash":      {KeyRecord{KeyID: "team-b", Tenant: "acme", SHA256: sum("sk-a")}, ErrExists},
			"unknown tenant": {KeyRecord{KeyID: "team-c", Tenant: "nobody", SHA256: sum("sk-c")}, ErrNotFound},
			"short hash":     {KeyRecord{KeyID: "team-d", Tenant: "acme", SHA256: "9f86d0"}, ErrInvalid},
			"not hex":        {KeyRecord{KeyID: "team-e", Tenant: "acme", SHA256: strings.Repeat("g", 64)}, ErrInvalid},
		} {
			if err := s.AddKey(ctx(t), tc.k, actor); !errors.Is(err, tc.want) {
				t.Errorf("%s: AddKey = %v, want %v", name, err, tc.want)
			}
		}

		got, err := s.KeyBySHA256(ctx(t), sum("sk-a"))
		want := KeyRecord{KeyID: "team-a", Tenant: "acme", SHA256: sum("sk-a"), CreatedAt: clock.Now().Truncate(time.Microsecond)}
		if err != nil || got != want {
			t.Fatalf("KeyBySHA256 = %+v, %v; want %+v", got, err, want)
		}
		if _, err := s.KeyBySHA256(ctx(t), sum("sk-unknown")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown hash: %v, want ErrNotFound", err)
		}

		clock.Advance(time.Hour)
		if err := s.RevokeKey(ctx(t), "team-a", actor); err != nil {
			t.Fatal(err)
		}
		revokedAt := clock.Now().Truncate(time.Microsecond)
		clock.Advance(time.Hour)
		if err := s.RevokeKey(ctx(t), "team-a", actor); err != nil {
			t.Fatalf("second revoke: %v", err)
		}
		if err := s.RevokeKey(ctx(t), "nobody", actor); !errors.Is(err, ErrNotFound) {
			t.Fatalf("revoke unknown: %v, want ErrNotFound", err)
		}
		got, err = s.KeyBySHA256(ctx(t), strings.ToUpper(sum("sk-a")))
		if err != nil || !got.Revoked || !got.RevokedAt.Equal(revokedAt) {
			t.Fatalf("revoked key reads %+v, %v; want revoked at %v (the first revocation)", got, err, revokedAt)
		}

		if err := s.AddKey(ctx(t), KeyRecord{KeyID: "team-b", Tenant: "acme", SHA256: sum("sk-b")}, actor); err != nil {
			t.Fatal(err)
		}
		keys, err := s.Keys(ctx(t))
		if err != nil || len(keys) != 2 || keys[0].KeyID != "team-a" || !keys[0].Revoked || keys[1].Revoked {
			t.Fatalf("Keys = %+v, %v", keys, err)
		}

		var actions []string
		audit, _ := s.Audit(ctx(t), 0)
		for _, a := range audit {
			actions = append(actions, a.Action+" "+a.Subject)
		}
		wantActions := []string{"key.add team-b", "key.revoke team-a", "key.add team-a", "tenant.create acme"}
		if !slices.Equal(actions, wantActions) {
			t.Fatalf("audit %q, want %q (newest first, one revocation)", actions, wantActions)
		}
	})
}

// A top-up changes the balance, writes a ledger row with the balance
// after it and an audit row, all at once; bad amounts change nothing.
func TestTopUp(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clock := newClock()
		cfg := b.newDB(t)
		cfg.Clock = clock.Now
		s := openStore(t, cfg)
		if _, err := s.CreateTenant(ctx(t), "acme", actor); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []int64{0, -1, maxAmount + 1} {
			if _, err := s.TopUp(ctx(t), "acme", bad, actor); !errors.Is(err, ErrInvalid) {
				t.Errorf("TopUp(%d) = %v, want ErrInvalid", bad, err)
			}
		}
		if _, err := s.TopUp(ctx(t), "nobody", 5, actor); !errors.Is(err, ErrNotFound) {
			t.Fatalf("TopUp(unknown) = %v, want ErrNotFound", err)
		}
		for i, amount := range []int64{5_000_000, 250_000} {
			clock.Advance(time.Minute)
			bal, err := s.TopUp(ctx(t), "acme", amount, "cli:root")
			if want := []int64{5_000_000, 5_250_000}[i]; err != nil || bal != want {
				t.Fatalf("TopUp #%d = %d, %v; want %d", i, bal, err, want)
			}
		}
		ledger, err := s.Ledger(ctx(t), "acme", 0)
		if err != nil {
			t.Fatal(err)
		}
		want := []LedgerEntry{
			{Time: clock.Now().Truncate(time.Microsecond), Tenant: "acme", Kind: KindTopUp, AmountMicros: 250_000, BalanceMicros: 5_250_000},
			{Time: clock.Now().Add(-time.Minute).Truncate(time.Microsecond), Tenant: "acme", Kind: KindTopUp, AmountMicros: 5_000_000, BalanceMicros: 5_000_000},
		}
		if !slices.Equal(ledger, want) {
			t.Fatalf("ledger %+v\nwant   %+v", ledger, want)
		}
		if one, _ := s.Ledger(ctx(t), "acme", 1); len(one) != 1 || one[0] != want[0] {
			t.Fatalf("Ledger(limit 1) = %+v", one)
		}
		if _, err := s.Ledger(ctx(t), "nobody", 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Ledger(unknown) = %v, want ErrNotFound", err)
		}
		audit, _ := s.Audit(ctx(t), 1)
		if len(audit) != 1 || audit[0] != (AuditEntry{Time: want[0].Time, Actor: "cli:root", Action: ActionTopUp,
			Subject: "acme", Detail: "amount_micros=250000 balance_micros=5250000"}) {
			t.Fatalf("audit %+v", audit)
		}
		if err := s.Verify(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

// classify marks connection failures, server shutdowns, timeouts and a
// locked SQLite file as ErrUnavailable, keeps the cause inspectable, and
// leaves everything else (and cancellation) alone.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unavailable bool
	}{
		{driver.ErrBadConn, true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, true},
		{&pgconn.PgError{Code: "57P01"}, true}, // admin_shutdown
		{&pgconn.PgError{Code: "57P03"}, true}, // starting up
		{&pgconn.PgError{Code: "08006"}, true}, // connection failure
		{&pgconn.PgError{Code: "53300"}, true}, // too many connections
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{context.Canceled, false},
		{ErrNotFound, false},
		{errors.New("syntax error"), false},
	} {
		got := classify(tc.err)
		if errors.Is(got, ErrUnavailable) != tc.unavailable {
			t.Errorf("classify(%v) = %v; unavailable %v", tc.err, got, !tc.unavailable)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("classify(%v) lost its cause", tc.err)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

// Replicas starting at once on a new database (or processes on a new
// SQLite file) all open it, and the migrations are applied once.
func TestConcurrentOpen(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		cfg := b.newDB(t)
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				s, err := Open(ctx(t), cfg)
				if err == nil {
					s.Close()
				}
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("concurrent Open: %v", err)
			}
		}
		s := openStore(t, cfg)
		p, _ := newMigrator(s.db, s.driver)
		if v, err := p.GetDBVersion(ctx(t)); err != nil || v != latestVersion(t, b.name) {
			t.Fatalf("schema version %d, %v", v, err)
		}
	})
}

// TestMemoryDatabaseIsOne: path ":memory:" is one database however many
// callers use it at once. Each SQLite connection to ":memory:" is a
// database of its own, so a pool of several would answer a concurrent
// caller "no such table".
func TestMemoryDatabaseIsOne(t *testing.T) {
	s := openStore(t, Config{Driver: DriverSQLite, Path: ":memory:"})
	if _, err := s.CreateTenant(ctx(t), "acme", actor); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			ts, err := s.Tenants(ctx(t))
			if err == nil && len(ts) != 1 {
				err = fmt.Errorf("%d tenants", len(ts))
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

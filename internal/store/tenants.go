package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Tenant is who pays: a wallet in micro-units of Currency. The JSON shape
// is `hopgate tenants show`'s (DESIGN §9).
type Tenant struct {
	Name     string `json:"tenant"`
	Currency string `json:"currency"`
	// BalanceMicros is top-ups minus charges; it goes below zero only by
	// charges above their holds (see the package doc).
	BalanceMicros int64 `json:"balance_micros"`
	// ReservedMicros is the sum of the tenant's live holds.
	ReservedMicros int64     `json:"reserved_micros"`
	CreatedAt      time.Time `json:"created_at"`
	// InDoubt counts the tenant's in-doubt charges (InDoubtCharges), and
	// InDoubtMicros sums them: delivered or not, nobody knows, and
	// nothing is charged until an operator decides.
	InDoubt       int64 `json:"in_doubt,omitempty"`
	InDoubtMicros int64 `json:"in_doubt_micros,omitempty"`
}

// AvailableMicros is what new holds may still take: balance − reserved.
func (t Tenant) AvailableMicros() int64 { return t.BalanceMicros - t.ReservedMicros }

// KeyRecord is a client key as stored: its id, its tenant and the hex
// SHA-256 of the secret (the secret itself is never stored).
type KeyRecord struct {
	KeyID  string `json:"key_id"`
	Tenant string `json:"tenant"`
	// SHA256 is 64 hex digits, stored in lower case.
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
	Revoked   bool      `json:"revoked"`
	// RevokedAt is zero while the key is valid.
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// AuditEntry is one change of money or keys: who (Actor), what (Action on
// Subject, with Detail), when.
type AuditEntry struct {
	Time    time.Time `json:"time"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	Subject string    `json:"subject"`
	Detail  string    `json:"detail"`
}

// Audit actions.
const (
	ActionTenantCreate = "tenant.create"
	ActionTopUp        = "wallet.topup"
	ActionKeyAdd       = "key.add"
	ActionKeyRevoke    = "key.revoke"
	// ActionAdjust is an operator's correction of a balance (Adjust).
	ActionAdjust = "wallet.adjust"
	// ActionResolveCharge and ActionResolveRelease decide an in-doubt
	// charge (ResolveInDoubt).
	ActionResolveCharge  = "in_doubt.charge"
	ActionResolveRelease = "in_doubt.release"
)

// CreateTenant creates a tenant with an empty wallet in the store's
// currency. ErrExists when the name is taken.
func (s *Store) CreateTenant(ctx context.Context, name, actor string) (Tenant, error) {
	if !validName(name) || !validName(actor) {
		return Tenant{}, invalid("tenant %q, actor %q", name, actor)
	}
	now := s.now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO tenants (name, currency, created_us) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
			name, s.currency, micros(now))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("tenant %q: %w", name, ErrExists)
		}
		return s.audit(ctx, tx, actor, ActionTenantCreate, name, "currency="+s.currency)
	})
	if err != nil {
		return Tenant{}, err
	}
	return Tenant{Name: name, Currency: s.currency, CreatedAt: fromMicros(micros(now))}, nil
}

const tenantColumns = `name, currency, balance_micros, reserved_micros, created_us,
	(SELECT COUNT(*) FROM in_doubt d WHERE d.tenant = tenants.name),
	(SELECT COALESCE(CAST(SUM(d.amount_micros) AS BIGINT), 0) FROM in_doubt d WHERE d.tenant = tenants.name)`

func scanTenant(row interface{ Scan(...any) error }) (Tenant, error) {
	var t Tenant
	var created int64
	err := row.Scan(&t.Name, &t.Currency, &t.BalanceMicros, &t.ReservedMicros, &created, &t.InDoubt, &t.InDoubtMicros)
	t.CreatedAt = fromMicros(created)
	return t, err
}

// Tenant returns one tenant's wallet. ErrNotFound when there is none.
func (s *Store) Tenant(ctx context.Context, name string) (Tenant, error) {
	t, err := scanTenant(s.queryRow(ctx,
		`SELECT `+tenantColumns+` FROM tenants WHERE name = $1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, ErrNotFound)
	}
	return t, classify(err)
}

// Tenants returns every tenant, by name.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.query(ctx, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, t)
	}
	return out, classify(rows.Err())
}

// TopUp adds amountMicros (> 0) to the tenant's balance and returns the new
// balance. The ledger row (kind "topup") and the audit row are written in
// the same transaction as the balance.
func (s *Store) TopUp(ctx context.Context, tenant string, amountMicros int64, actor string) (int64, error) {
	if !validName(tenant) || !validName(actor) || amountMicros <= 0 || !validAmount(amountMicros) {
		return 0, invalid("top-up of %d for tenant %q by %q", amountMicros, tenant, actor)
	}
	var balance int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if balance, err = s.move(ctx, tx, tenant, KindTopUp, amountMicros); err != nil {
			return err
		}
		return s.audit(ctx, tx, actor, ActionTopUp, tenant,
			fmt.Sprintf("amount_micros=%d balance_micros=%d", amountMicros, balance))
	})
	return balance, err
}

// AddKey stores a client key of an existing tenant (ErrNotFound
// otherwise). ErrExists when the key id or the hash is already stored.
// CreatedAt and the revocation fields of k are ignored.
func (s *Store) AddKey(ctx context.Context, k KeyRecord, actor string) error {
	k.SHA256 = strings.ToLower(k.SHA256)
	if !validName(k.KeyID) || !validName(k.Tenant) || !validName(actor) || !validSHA256(k.SHA256) {
		return invalid("key %q of tenant %q by %q (sha256 must be 64 hex digits)", k.KeyID, k.Tenant, actor)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO api_keys (key_id, tenant, sha256, created_us) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
			k.KeyID, k.Tenant, k.SHA256, micros(s.now()))
		if foreignKeyViolation(err) {
			return fmt.Errorf("tenant %q: %w", k.Tenant, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("key %q (or its hash): %w", k.KeyID, ErrExists)
		}
		return s.audit(ctx, tx, actor, ActionKeyAdd, k.KeyID, "tenant="+k.Tenant)
	})
}

// RevokeKey marks a key revoked. Revoking a revoked key changes nothing
// (and writes no audit row); ErrNotFound when there is no such key.
func (s *Store) RevokeKey(ctx context.Context, keyID, actor string) error {
	if !validName(keyID) || !validName(actor) {
		return invalid("revoke key %q by %q", keyID, actor)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var tenant string
		err := tx.QueryRowContext(ctx,
			`UPDATE api_keys SET revoked_us = $2 WHERE key_id = $1 AND revoked_us IS NULL RETURNING tenant`,
			keyID, micros(s.now())).Scan(&tenant)
		if errors.Is(err, sql.ErrNoRows) {
			var one int
			err = tx.QueryRowContext(ctx, `SELECT 1 FROM api_keys WHERE key_id = $1`, keyID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("key %q: %w", keyID, ErrNotFound)
			}
			return err // nil: already revoked
		}
		if err != nil {
			return err
		}
		return s.audit(ctx, tx, actor, ActionKeyRevoke, keyID, "tenant="+tenant)
	})
}

const keyColumns = `key_id, tenant, sha256, created_us, revoked_us`

func scanKey(row interface{ Scan(...any) error }) (KeyRecord, error) {
	var k KeyRecord
	var created int64
	var revoked sql.NullInt64
	err := row.Scan(&k.KeyID, &k.Tenant, &k.SHA256, &created, &revoked)
	k.CreatedAt = fromMicros(created)
	if revoked.Valid {
		k.Revoked, k.RevokedAt = true, fromMicros(revoked.Int64)
	}
	return k, err
}

// KeyBySHA256 finds a key, revoked or not, by the hex SHA-256 of its
// secret. ErrNotFound when no key has it.
func (s *Store) KeyBySHA256(ctx context.Context, sha256Hex string) (KeyRecord, error) {
	k, err := scanKey(s.queryRow(ctx,
		`SELECT `+keyColumns+` FROM api_keys WHERE sha256 = $1`, strings.ToLower(sha256Hex)))
	if errors.Is(err, sql.ErrNoRows) {
		return KeyRecord{}, fmt.Errorf("key: %w", ErrNotFound)
	}
	return k, classify(err)
}

// Keys returns every key, revoked ones included, by id: what a replica
// loads periodically, so that a key revoked anywhere stops working on
// every replica within its refresh period.
func (s *Store) Keys(ctx context.Context) ([]KeyRecord, error) {
	rows, err := s.query(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY key_id`)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []KeyRecord
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, k)
	}
	return out, classify(rows.Err())
}

func validSHA256(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, r := range h {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// Audit returns the newest audit rows first, at most limit (all when limit
// ≤ 0).
func (s *Store) Audit(ctx context.Context, limit int) ([]AuditEntry, error) {
	rows, err := s.query(ctx,
		`SELECT time_us, actor, action, subject, detail FROM audit ORDER BY id DESC LIMIT $1`, sqlLimit(limit))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var a AuditEntry
		var us int64
		if err := rows.Scan(&us, &a.Actor, &a.Action, &a.Subject, &a.Detail); err != nil {
			return nil, classify(err)
		}
		a.Time = fromMicros(us)
		out = append(out, a)
	}
	return out, classify(rows.Err())
}

// sqlLimit turns "≤ 0 means all" into a LIMIT both dialects accept.
func sqlLimit(limit int) int64 {
	if limit <= 0 {
		return 1<<63 - 1
	}
	return int64(limit)
}

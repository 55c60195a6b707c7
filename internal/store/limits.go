package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// TenantLimit is a tenant's rate limit as stored by `hopgate tenants
// limits` (DESIGN §16): requests and tokens per minute, for all its
// models (Model empty) or one; 0 leaves that kind unlimited.
type TenantLimit struct {
	Tenant string `json:"tenant"`
	Model  string `json:"model,omitempty"`
	RPM    int64  `json:"rpm"`
	TPM    int64  `json:"tpm"`
}

// ActionLimits is the audit action of SetLimit.
const ActionLimits = "tenant.limits"

// maxLimit mirrors config.MaxRateLimit (the store does not import config).
const maxLimit = 1_000_000_000

// SetLimit stores l for an existing tenant (ErrNotFound otherwise),
// replacing what was stored for the same tenant and model; rpm and tpm
// both 0 remove it. The audit row is written in the same transaction.
func (s *Store) SetLimit(ctx context.Context, l TenantLimit, actor string) error {
	if !validName(l.Tenant) || !validName(actor) || l.Model != "" && !validName(l.Model) ||
		l.RPM < 0 || l.TPM < 0 || l.RPM > maxLimit || l.TPM > maxLimit {
		return invalid("limits rpm=%d tpm=%d of tenant %q model %q by %q (0 to %d each)", l.RPM, l.TPM, l.Tenant, l.Model, actor, maxLimit)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE name = $1`, l.Tenant).Scan(&one); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("tenant %q: %w", l.Tenant, ErrNotFound)
			}
			return err
		}
		var err error
		if l.RPM == 0 && l.TPM == 0 {
			_, err = tx.ExecContext(ctx, `DELETE FROM tenant_limits WHERE tenant = $1 AND model = $2`, l.Tenant, l.Model)
		} else {
			_, err = tx.ExecContext(ctx,
				`INSERT INTO tenant_limits (tenant, model, rpm, tpm, updated_us) VALUES ($1, $2, $3, $4, $5)
				 ON CONFLICT (tenant, model) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm, updated_us = excluded.updated_us`,
				l.Tenant, l.Model, l.RPM, l.TPM, micros(s.now()))
		}
		if err != nil {
			return err
		}
		return s.audit(ctx, tx, actor, ActionLimits, l.Tenant, fmt.Sprintf("model=%s rpm=%d tpm=%d", l.Model, l.RPM, l.TPM))
	})
}

// Limits returns every stored limit, by tenant then model.
func (s *Store) Limits(ctx context.Context) ([]TenantLimit, error) {
	rows, err := s.query(ctx, `SELECT tenant, model, rpm, tpm FROM tenant_limits ORDER BY tenant, model`)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []TenantLimit
	for rows.Next() {
		var l TenantLimit
		if err := rows.Scan(&l.Tenant, &l.Model, &l.RPM, &l.TPM); err != nil {
			return nil, classify(err)
		}
		out = append(out, l)
	}
	return out, classify(rows.Err())
}

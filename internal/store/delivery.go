package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// InDoubt is a charge nobody knows was delivered: its request had marked
// its hold "delivering" (MarkDelivering: the answer's last byte was about
// to be written) and was neither settled nor released before the hold
// expired — its replica died in that window. Nothing is charged until an
// operator resolves it (ResolveInDoubt). The JSON shape is the in-doubt
// line of `hopgate tenants ledger`.
type InDoubt struct {
	Kind         string    `json:"kind"` // always "in_doubt"
	RequestID    string    `json:"request_id"`
	Tenant       string    `json:"tenant"`
	Model        string    `json:"model,omitempty"`
	AmountMicros int64     `json:"amount_micros"` // the charge it would be (positive)
	InputTokens  int64     `json:"input_tokens,omitempty"`
	OutputTokens int64     `json:"output_tokens,omitempty"`
	Estimated    bool      `json:"estimated,omitempty"`
	Delivering   time.Time `json:"delivering"` // when the last write was about to happen
	Recorded     time.Time `json:"time"`       // when it became in doubt
}

// KindInDoubt is InDoubt's Kind.
const KindInDoubt = "in_doubt"

// MarkDelivering records on the request's hold the charge it is about to
// become and that its answer's last byte is about to be written. It
// reports whether there was a hold to mark (none: served on credit, or
// the hold expired). A hold so marked that expires is not released
// silently: ExpireHolds moves it to the in-doubt rows.
func (s *Store) MarkDelivering(ctx context.Context, c Charge) (bool, error) {
	if !validCharge(c) {
		return false, invalid("delivering charge %d for request %q of tenant %q", c.AmountMicros, c.RequestID, c.Tenant)
	}
	var marked bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE holds SET delivering_us = $3, model = $4, charge_micros = $5, input_tokens = $6,
			                  output_tokens = $7, estimated = $8
			 WHERE request_id = $1 AND tenant = $2`,
			c.RequestID, c.Tenant, micros(s.now()), c.Model, c.AmountMicros, c.InputTokens, c.OutputTokens, c.Estimated)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		marked = n > 0
		return err
	})
	return marked && err == nil, err
}

func validCharge(c Charge) bool {
	return validName(c.RequestID) && validName(c.Tenant) && validAmount(c.AmountMicros) &&
		c.InputTokens >= 0 && c.OutputTokens >= 0
}

// expiredHold is a row ExpireHolds deleted.
type expiredHold struct {
	tenant string
	amount int64
	doubt  *InDoubt // the hold was delivering
}

// expire deletes the holds expired as of now inside tx, gives their
// amounts back to their tenants' reservations and records the delivering
// ones as in doubt. It returns how many holds and how many became in doubt.
func (s *Store) expire(ctx context.Context, tx *sql.Tx, now time.Time) (int, int, error) {
	rows, err := tx.QueryContext(ctx,
		`DELETE FROM holds WHERE expires_us <= $1
		 RETURNING request_id, tenant, amount_micros, delivering_us, model, charge_micros, input_tokens, output_tokens, estimated`,
		micros(now))
	if err != nil {
		return 0, 0, err
	}
	var expired []expiredHold
	for rows.Next() {
		var h expiredHold
		var d InDoubt
		var delivering sql.NullInt64
		if err := rows.Scan(&d.RequestID, &h.tenant, &h.amount, &delivering, &d.Model, &d.AmountMicros,
			&d.InputTokens, &d.OutputTokens, &d.Estimated); err != nil {
			rows.Close()
			return 0, 0, err
		}
		if delivering.Valid {
			d.Tenant, d.Delivering = h.tenant, fromMicros(delivering.Int64)
			h.doubt = &d
		}
		expired = append(expired, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	freed := map[string]int64{}
	doubts := 0
	for _, h := range expired {
		freed[h.tenant] += h.amount
		if h.doubt != nil {
			if err := s.insertDoubt(ctx, tx, h.doubt); err != nil {
				return 0, 0, err
			}
			doubts++
		}
	}
	// Tenants in name order: two expiries lock them in the same order.
	for _, tenant := range slices.Sorted(maps.Keys(freed)) {
		if _, err := tx.ExecContext(ctx,
			`UPDATE tenants SET reserved_micros = reserved_micros - $2 WHERE name = $1`,
			tenant, freed[tenant]); err != nil {
			return 0, 0, err
		}
	}
	return len(expired), doubts, nil
}

// insertDoubt records d as in doubt unless its request was charged (or is
// in doubt) already.
func (s *Store) insertDoubt(ctx context.Context, tx *sql.Tx, d *InDoubt) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO in_doubt (request_id, tenant, model, amount_micros, input_tokens, output_tokens, estimated,
		                       delivering_us, recorded_us)
		 SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9
		 WHERE NOT EXISTS (SELECT 1 FROM ledger WHERE request_id = $1)
		 ON CONFLICT (request_id) DO NOTHING`,
		d.RequestID, d.Tenant, d.Model, d.AmountMicros, d.InputTokens, d.OutputTokens, d.Estimated,
		micros(d.Delivering), micros(s.now()))
	return err
}

// RecordInDoubt records a charge as in doubt on the word of a replica's
// journal (its process died between the delivering mark and the charge,
// with the store unreachable): the request's hold, if still there, is
// released, and an in-doubt row written, unless the request was charged
// already. Idempotent per request id; it reports whether a row was added.
func (s *Store) RecordInDoubt(ctx context.Context, c Charge, delivering time.Time) (bool, error) {
	if !validCharge(c) {
		return false, invalid("in-doubt charge %d for request %q of tenant %q", c.AmountMicros, c.RequestID, c.Tenant)
	}
	d := &InDoubt{RequestID: c.RequestID, Tenant: c.Tenant, Model: c.Model, AmountMicros: c.AmountMicros,
		InputTokens: c.InputTokens, OutputTokens: c.OutputTokens, Estimated: c.Estimated, Delivering: delivering}
	var added bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		tenant, amount, err := deleteHold(ctx, tx, c.RequestID)
		if err != nil {
			return err
		}
		if tenant != "" {
			if _, err := tx.ExecContext(ctx,
				`UPDATE tenants SET reserved_micros = reserved_micros - $2 WHERE name = $1`, tenant, amount); err != nil {
				return err
			}
		}
		var before, after int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM in_doubt WHERE request_id = $1`, c.RequestID).Scan(&before); err != nil {
			return err
		}
		if err := s.insertDoubt(ctx, tx, d); foreignKeyViolation(err) {
			return fmt.Errorf("tenant %q: %w", c.Tenant, ErrNotFound)
		} else if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM in_doubt WHERE request_id = $1`, c.RequestID).Scan(&after); err != nil {
			return err
		}
		added = after > before
		return nil
	})
	return added && err == nil, err
}

const inDoubtColumns = `request_id, tenant, model, amount_micros, input_tokens, output_tokens, estimated,
	delivering_us, recorded_us`

func scanDoubt(row interface{ Scan(...any) error }) (InDoubt, error) {
	d := InDoubt{Kind: KindInDoubt}
	var delivering, recorded int64
	err := row.Scan(&d.RequestID, &d.Tenant, &d.Model, &d.AmountMicros, &d.InputTokens, &d.OutputTokens,
		&d.Estimated, &delivering, &recorded)
	d.Delivering, d.Recorded = fromMicros(delivering), fromMicros(recorded)
	return d, err
}

// InDoubtCharges returns the in-doubt charges of tenant ("": of every
// tenant), newest first.
func (s *Store) InDoubtCharges(ctx context.Context, tenant string) ([]InDoubt, error) {
	rows, err := s.query(ctx, `SELECT `+inDoubtColumns+` FROM in_doubt
		WHERE $1 = '' OR tenant = $1 ORDER BY recorded_us DESC, request_id`, tenant)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []InDoubt
	for rows.Next() {
		d, err := scanDoubt(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, d)
	}
	return out, classify(rows.Err())
}

// Resolution is how an operator decides an in-doubt charge.
type Resolution string

// The two resolutions.
const (
	// ResolveCharge: the answer was delivered; charge it (a ledger row).
	ResolveCharge Resolution = "charge"
	// ResolveRelease: it was not; charge nothing.
	ResolveRelease Resolution = "release"
)

// ResolveInDoubt decides an in-doubt charge, with an audit row naming the
// actor and the reason: charged (the ledger row of a charge, against no
// hold) or released. ErrNotFound when the request is not in doubt (never
// was, or was resolved already).
func (s *Store) ResolveInDoubt(ctx context.Context, requestID string, how Resolution, actor, reason string) (InDoubt, *LedgerEntry, error) {
	if !validName(requestID) || !validName(actor) || !validName(reason) || how != ResolveCharge && how != ResolveRelease {
		return InDoubt{}, nil, invalid("resolve %q as %q by %q (a reason is required)", requestID, how, actor)
	}
	var d InDoubt
	var entry *LedgerEntry
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		entry = nil
		var err error
		d, err = scanDoubt(tx.QueryRowContext(ctx,
			`DELETE FROM in_doubt WHERE request_id = $1 RETURNING `+inDoubtColumns, requestID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("request %q is not in doubt: %w", requestID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		action := ActionResolveRelease
		if how == ResolveCharge {
			action = ActionResolveCharge
			entry = &LedgerEntry{Time: fromMicros(micros(s.now())), Tenant: d.Tenant, Kind: KindCharge,
				RequestID: d.RequestID, Model: d.Model, AmountMicros: -d.AmountMicros,
				InputTokens: d.InputTokens, OutputTokens: d.OutputTokens, Estimated: d.Estimated}
			if err := s.charge(ctx, tx, entry, 0); err != nil {
				return err
			}
		}
		return s.audit(ctx, tx, actor, action, d.Tenant,
			fmt.Sprintf("request_id=%s amount_micros=%d reason=%s", d.RequestID, d.AmountMicros, reason))
	})
	if errors.Is(err, errDuplicate) {
		// Charged meanwhile (a journal's late charge): nothing to decide.
		return InDoubt{}, nil, fmt.Errorf("request %q was charged already: %w", requestID, ErrExists)
	}
	if err != nil {
		return InDoubt{}, nil, err
	}
	return d, entry, nil
}

// Adjust corrects a tenant's balance by amountMicros (either sign, not 0):
// a ledger row of kind "adjust" and an audit row with the actor and the
// reason, in one transaction with the balance. It returns the new balance.
func (s *Store) Adjust(ctx context.Context, tenant string, amountMicros int64, actor, reason string) (int64, error) {
	if !validName(tenant) || !validName(actor) || !validName(reason) || amountMicros == 0 ||
		!validAmount(amountMicros) && !validAmount(-amountMicros) {
		return 0, invalid("adjustment of %d for tenant %q by %q (a reason is required)", amountMicros, tenant, actor)
	}
	var balance int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if balance, err = s.move(ctx, tx, tenant, KindAdjust, amountMicros); err != nil {
			return err
		}
		return s.audit(ctx, tx, actor, ActionAdjust, tenant,
			fmt.Sprintf("amount_micros=%d balance_micros=%d reason=%s", amountMicros, balance, reason))
	})
	return balance, err
}

// move adds amountMicros to a tenant's balance with its ledger row of kind
// (a top-up or an adjustment) inside tx, and returns the new balance.
func (s *Store) move(ctx context.Context, tx *sql.Tx, tenant string, kind Kind, amountMicros int64) (int64, error) {
	var balance, reserved int64
	err := tx.QueryRowContext(ctx,
		`UPDATE tenants SET balance_micros = balance_micros + $2 WHERE name = $1 RETURNING balance_micros, reserved_micros`,
		tenant, amountMicros).Scan(&balance, &reserved)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("tenant %q: %w", tenant, ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	_, err = tx.ExecContext(ctx,
		`INSERT INTO ledger (tenant, time_us, kind, amount_micros, balance_micros, reserved_micros)
		 VALUES ($1, $2, $3, $4, $5, $6)`,
		tenant, micros(s.now()), kind, amountMicros, balance, reserved)
	return balance, err
}

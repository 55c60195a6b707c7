package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind is a ledger row's kind.
type Kind string

// The kinds of ledger rows.
const (
	KindTopUp  Kind = "topup"
	KindCharge Kind = "charge"
	// KindAdjust is an operator's correction (Adjust), either sign.
	KindAdjust Kind = "adjust"
)

// Hold reserves AmountMicros of Tenant's wallet for request RequestID
// until it is settled, released, or expires at ExpiresAt.
type Hold struct {
	RequestID    string
	Tenant       string
	AmountMicros int64
	ExpiresAt    time.Time
}

// Charge is what a request costs its tenant: the list price of Model for
// the usage the upstream reported (or an estimate, when a stream ended
// without a usage report).
type Charge struct {
	RequestID    string
	Tenant       string
	Model        string
	AmountMicros int64 // ≥ 0; recorded negated in the ledger
	InputTokens  int64
	OutputTokens int64
	Estimated    bool // the usage was estimated, not reported
}

// Settlement is the outcome of Settle.
type Settlement struct {
	// Entry is the request's ledger row: the one just written, or for a
	// Duplicate the one written by the first Settle.
	Entry LedgerEntry
	// Duplicate: the request had been charged already; nothing changed
	// (a hold made again under its id was released).
	Duplicate bool
	// HeldMicros is the hold this charge released: 0 when it had expired
	// (or there was none), in which case the charge may take the balance
	// below zero.
	HeldMicros int64
}

// LedgerEntry is one ledger row. The JSON shape is `hopgate tenants
// ledger`'s (DESIGN §9).
type LedgerEntry struct {
	Time      time.Time `json:"time"`
	Tenant    string    `json:"-"`
	Kind      Kind      `json:"kind"`
	RequestID string    `json:"request_id,omitempty"`
	Model     string    `json:"model,omitempty"`
	// AmountMicros: top-ups positive, charges negative.
	AmountMicros int64 `json:"amount_micros"`
	// BalanceMicros is the tenant's balance after this row.
	BalanceMicros int64 `json:"balance_micros"`
	InputTokens   int64 `json:"input_tokens,omitempty"`
	OutputTokens  int64 `json:"output_tokens,omitempty"`
	Estimated     bool  `json:"estimated,omitempty"`
	// HeldMicros is the hold a charge released (0: none, or it had
	// expired): what the charge ran over it by is its overrun.
	HeldMicros int64 `json:"held_micros,omitempty"`
	// ReservedMicros is the tenant's reservation after this row, so
	// balance − reserved (what new holds may take) is known at every row.
	ReservedMicros int64 `json:"reserved_micros"`
}

// Hold reserves h.AmountMicros (≥ 0) of the tenant's wallet with one
// conditional update (balance − reserved ≥ amount): concurrent holds,
// from any number of processes, never reserve more than the balance.
// ErrInsufficientBalance when it does not fit (a tenant whose balance is
// below zero cannot even hold 0), ErrNotFound for an unknown tenant.
// Idempotent per RequestID: a hold already there is left as it is and
// reported as success.
func (s *Store) Hold(ctx context.Context, h Hold) error {
	if !validName(h.RequestID) || !validName(h.Tenant) || !validAmount(h.AmountMicros) {
		return invalid("hold %d for request %q of tenant %q", h.AmountMicros, h.RequestID, h.Tenant)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`INSERT INTO holds (request_id, tenant, amount_micros, created_us, expires_us)
			 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (request_id) DO NOTHING`,
			h.RequestID, h.Tenant, h.AmountMicros, micros(s.now()), micros(h.ExpiresAt))
		if foreignKeyViolation(err) {
			return fmt.Errorf("tenant %q: %w", h.Tenant, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return nil // held already: idempotent
		}
		// The decision: one statement, evaluated on the row as it is when
		// this transaction holds its lock (PostgreSQL re-checks the WHERE
		// on the latest version; SQLite has one writer at a time).
		res, err = tx.ExecContext(ctx,
			`UPDATE tenants SET reserved_micros = reserved_micros + $2
			 WHERE name = $1 AND balance_micros - reserved_micros >= $2`,
			h.Tenant, h.AmountMicros)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("tenant %q, hold %d: %w", h.Tenant, h.AmountMicros, ErrInsufficientBalance)
		}
		return nil
	})
}

// errDuplicate rolls back a Settle whose request was charged already.
var errDuplicate = errors.New("store: request already settled")

// Settle charges a request, in one transaction: it releases the request's
// hold if it is still there, subtracts the charge from the balance, and
// writes the ledger row (with the balance after it) keyed by the request
// id. The charge is taken whatever the hold was: a hold that expired, or a
// charge above its hold, may take the balance below zero (see the package
// doc for the bound). A second Settle of the same request charges nothing
// and returns the first one's row with Duplicate set, so a caller that
// lost the answer (ErrUnavailable) retries safely.
func (s *Store) Settle(ctx context.Context, c Charge) (Settlement, error) {
	if !validName(c.RequestID) || !validName(c.Tenant) || !validAmount(c.AmountMicros) ||
		c.InputTokens < 0 || c.OutputTokens < 0 {
		return Settlement{}, invalid("charge %d for request %q of tenant %q", c.AmountMicros, c.RequestID, c.Tenant)
	}
	entry := LedgerEntry{
		Time:         fromMicros(micros(s.now())),
		Tenant:       c.Tenant,
		Kind:         KindCharge,
		RequestID:    c.RequestID,
		Model:        c.Model,
		AmountMicros: -c.AmountMicros,
		InputTokens:  c.InputTokens,
		OutputTokens: c.OutputTokens,
		Estimated:    c.Estimated,
	}
	var held int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Locks in the order every writer takes them (hold, then tenant),
		// so concurrent settles, releases and expiries cannot deadlock.
		holdTenant, amount, err := deleteHold(ctx, tx, c.RequestID)
		if err != nil {
			return err
		}
		if holdTenant != "" && holdTenant != c.Tenant {
			return invalid("request %q was held for tenant %q, charged to %q", c.RequestID, holdTenant, c.Tenant)
		}
		held = amount
		return s.charge(ctx, tx, &entry, held)
	})
	if errors.Is(err, errDuplicate) {
		return s.settled(ctx, c.RequestID)
	}
	if err != nil {
		return Settlement{}, err
	}
	return Settlement{Entry: entry, HeldMicros: held}, nil
}

// charge applies the charge entry describes (AmountMicros negative) inside
// tx, after its hold of held micro-units was deleted: the balance and the
// reservation, the ledger row (errDuplicate when the request was charged
// already) and the end of any in-doubt row of the request (its charge is
// final now). It fills in the balance and reservation after it.
func (s *Store) charge(ctx context.Context, tx *sql.Tx, entry *LedgerEntry, held int64) error {
	err := tx.QueryRowContext(ctx,
		`UPDATE tenants SET balance_micros = balance_micros + $2, reserved_micros = reserved_micros - $3
		 WHERE name = $1 RETURNING balance_micros, reserved_micros`,
		entry.Tenant, entry.AmountMicros, held).Scan(&entry.BalanceMicros, &entry.ReservedMicros)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("tenant %q: %w", entry.Tenant, ErrNotFound)
	}
	if err != nil {
		return err
	}
	entry.HeldMicros = held
	// Written while the tenant's row is locked, so ledger ids follow the
	// order of the balances they record.
	var id int64
	err = tx.QueryRowContext(ctx,
		`INSERT INTO ledger (tenant, time_us, kind, request_id, model, amount_micros, balance_micros,
		                     input_tokens, output_tokens, estimated, held_micros, reserved_micros)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		 ON CONFLICT (request_id) DO NOTHING RETURNING id`,
		entry.Tenant, micros(entry.Time), KindCharge, entry.RequestID, entry.Model, entry.AmountMicros,
		entry.BalanceMicros, entry.InputTokens, entry.OutputTokens, entry.Estimated, held, entry.ReservedMicros).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return errDuplicate
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM in_doubt WHERE request_id = $1`, entry.RequestID)
	return err
}

// settled answers a duplicate Settle: any hold made again under the
// request id is released, and the first charge's row returned.
func (s *Store) settled(ctx context.Context, requestID string) (Settlement, error) {
	if _, err := s.Release(ctx, requestID); err != nil {
		return Settlement{}, err
	}
	e, err := scanLedger(s.queryRow(ctx,
		`SELECT `+ledgerColumns+` FROM ledger WHERE request_id = $1`, requestID))
	if err != nil {
		return Settlement{}, classify(err)
	}
	return Settlement{Entry: e, Duplicate: true}, nil
}

// deleteHold removes a request's hold and returns its tenant and amount
// ("" and 0 when there was none); the caller gives the amount back to the
// tenant's reservation in the same transaction.
func deleteHold(ctx context.Context, tx *sql.Tx, requestID string) (string, int64, error) {
	var tenant string
	var amount int64
	err := tx.QueryRowContext(ctx,
		`DELETE FROM holds WHERE request_id = $1 RETURNING tenant, amount_micros`, requestID).Scan(&tenant, &amount)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return tenant, amount, err
}

// Release drops a request's hold without a charge (the request failed, the
// client went away) and reports whether there was one.
func (s *Store) Release(ctx context.Context, requestID string) (bool, error) {
	if !validName(requestID) {
		return false, invalid("release request %q", requestID)
	}
	var released bool
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		tenant, amount, err := deleteHold(ctx, tx, requestID)
		if err != nil || tenant == "" {
			return err
		}
		released = true
		_, err = tx.ExecContext(ctx,
			`UPDATE tenants SET reserved_micros = reserved_micros - $2 WHERE name = $1`, tenant, amount)
		return err
	})
	return released && err == nil, err
}

// ExpireHolds releases every hold whose ExpiresAt is at or before now and
// returns how many: the holds of a process that died (SIGKILL, a lost
// node) before it settled or released them. A hold marked delivering
// (MarkDelivering) is not charged and not forgotten: it becomes an
// in-doubt row (InDoubtCharges) for an operator to resolve. Any replica may
// call it periodically; concurrent calls release each hold once.
func (s *Store) ExpireHolds(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, _, err = s.expire(ctx, tx, now)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

const ledgerColumns = `time_us, tenant, kind, COALESCE(request_id, ''), model, amount_micros, balance_micros,
	input_tokens, output_tokens, estimated, held_micros, reserved_micros`

func scanLedger(row interface{ Scan(...any) error }) (LedgerEntry, error) {
	var e LedgerEntry
	var us int64
	var kind string
	err := row.Scan(&us, &e.Tenant, &kind, &e.RequestID, &e.Model, &e.AmountMicros, &e.BalanceMicros,
		&e.InputTokens, &e.OutputTokens, &e.Estimated, &e.HeldMicros, &e.ReservedMicros)
	e.Time, e.Kind = fromMicros(us), Kind(kind)
	return e, err
}

// Ledger returns a tenant's ledger, newest first, at most limit rows (all
// when limit ≤ 0). ErrNotFound for an unknown tenant.
func (s *Store) Ledger(ctx context.Context, tenant string, limit int) ([]LedgerEntry, error) {
	if _, err := s.Tenant(ctx, tenant); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx,
		`SELECT `+ledgerColumns+` FROM ledger WHERE tenant = $1 ORDER BY id DESC LIMIT $2`, tenant, sqlLimit(limit))
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []LedgerEntry
	for rows.Next() {
		e, err := scanLedger(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, e)
	}
	return out, classify(rows.Err())
}

// Verify checks the wallets' invariants: every balance equals the sum of
// its ledger's amounts, every ledger row's balance is the previous row's
// plus its amount, and every reservation equals the sum of the tenant's
// holds. It returns an error wrapping ErrInconsistent that names the first
// tenants that break them.
func (s *Store) Verify(ctx context.Context) error {
	var problems []string
	rows, err := s.query(ctx, `
		SELECT t.name, t.balance_micros, COALESCE(l.total, 0), t.reserved_micros, COALESCE(h.total, 0)
		FROM tenants t
		LEFT JOIN (SELECT tenant, CAST(SUM(amount_micros) AS BIGINT) AS total FROM ledger GROUP BY tenant) l
		       ON l.tenant = t.name
		LEFT JOIN (SELECT tenant, CAST(SUM(amount_micros) AS BIGINT) AS total FROM holds GROUP BY tenant) h
		       ON h.tenant = t.name
		WHERE t.balance_micros <> COALESCE(l.total, 0) OR t.reserved_micros <> COALESCE(h.total, 0)
		ORDER BY t.name LIMIT 10`)
	if err != nil {
		return classify(err)
	}
	for rows.Next() {
		var name string
		var balance, ledger, reserved, holds int64
		if err := rows.Scan(&name, &balance, &ledger, &reserved, &holds); err != nil {
			rows.Close()
			return classify(err)
		}
		problems = append(problems, fmt.Sprintf(
			"tenant %q: balance %d, ledger sum %d, reserved %d, holds sum %d", name, balance, ledger, reserved, holds))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	rows, err = s.query(ctx, `
		SELECT tenant, id, balance_micros, prev + amount_micros FROM (
			SELECT tenant, id, amount_micros, balance_micros,
			       LAG(balance_micros, 1, 0) OVER (PARTITION BY tenant ORDER BY id) AS prev
			FROM ledger) chain
		WHERE balance_micros <> prev + amount_micros
		ORDER BY tenant, id LIMIT 10`)
	if err != nil {
		return classify(err)
	}
	for rows.Next() {
		var tenant string
		var id, got, want int64
		if err := rows.Scan(&tenant, &id, &got, &want); err != nil {
			rows.Close()
			return classify(err)
		}
		problems = append(problems, fmt.Sprintf(
			"tenant %q: ledger row %d records balance %d, previous row plus amount is %d", tenant, id, got, want))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify(err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInconsistent, strings.Join(problems, "; "))
	}
	return nil
}

package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers database/sql driver "sqlite"

	"github.com/hopgate/hopgate/internal/money"
)

// The two drivers of Config.Driver.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// Defaults of Config.
const (
	DefaultCurrency    = "USD"
	DefaultBusyTimeout = 5 * time.Second
)

// Config says which database to open and how.
type Config struct {
	// Driver is DriverSQLite (also when empty) or DriverPostgres.
	Driver string
	// Path is the SQLite file, created when missing (SQLite only). The
	// caller resolves it (the config puts it next to the config file).
	Path string
	// DSN is the PostgreSQL connection string, URL or key=value (PostgreSQL
	// only). The caller reads it from the environment; it holds a password.
	DSN string
	// Currency is the ISO 4217 code new tenants' wallets are kept in
	// (amounts are micro-units of it). Default DefaultCurrency. Existing
	// tenants keep the currency they were created with.
	Currency string
	// Clock stamps rows (created, ledger and audit times). Default
	// time.Now. Decisions on time (hold expiry, pruning) take "now" as a
	// parameter instead.
	Clock func() time.Time
	// BusyTimeout is how long an SQLite writer waits for another
	// connection's or process's write lock before the call fails with
	// ErrUnavailable. Default DefaultBusyTimeout.
	BusyTimeout time.Duration
	// MaxConns bounds the connection pool. Default 4 for SQLite (writers
	// queue in the pool rather than in SQLite's sleeping busy handler), 10
	// for PostgreSQL.
	MaxConns int

	// shouldPing, when set, decides whether pgx pings a pooled PostgreSQL
	// connection before reusing it. nil: pgx's default, a ping when the
	// connection was idle over a second by the wall clock. Tests set it,
	// so that a connection a restart ended is still in the pool after the
	// restart, however long the restart took.
	shouldPing func(context.Context, stdlib.ShouldPingParams) bool
}

// Store is hopgate's persistent state: tenants, keys, wallets, the ledger,
// the audit trail and the status history. Its methods are safe for
// concurrent use, and several Stores (processes) may share one database.
type Store struct {
	db       *sql.DB
	driver   string
	currency string
	now      func() time.Time
	maxConns int          // the pool's size: how many stale connections a call may meet
	stale    atomic.Int64 // calls run again after a stale connection (tests)
}

// Open connects to the database, applies pending migrations and returns
// the Store. A database that cannot be reached gives an error that
// errors.Is ErrUnavailable.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s := &Store{driver: cfg.Driver, currency: cfg.Currency, now: cfg.Clock}
	if s.driver == "" {
		s.driver = DriverSQLite
	}
	if s.currency == "" {
		s.currency = DefaultCurrency
	}
	if !validCurrency(s.currency) {
		return nil, fmt.Errorf("%w: currency %q is not a three-letter ISO 4217 code", ErrInvalid, s.currency)
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	switch s.driver {
	case DriverSQLite:
		s.maxConns = maxConns(cfg, 4)
		s.db, err = openSQLite(cfg)
	case DriverPostgres:
		s.maxConns = maxConns(cfg, 10)
		s.db, err = openPostgres(cfg)
	default:
		err = fmt.Errorf("%w: driver %q (want %q or %q)", ErrInvalid, cfg.Driver, DriverSQLite, DriverPostgres)
	}
	if err != nil {
		return nil, err
	}
	if err := s.ping(ctx); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("store: open %s: %w", s.driver, classify(err))
	}
	if err := migrate(ctx, s.db, s.driver); err != nil {
		s.db.Close()
		return nil, fmt.Errorf("store: migrate %s: %w", s.driver, classify(err))
	}
	return s, nil
}

// ping opens the first connection. On SQLite that connection's pragmas
// switch a new file to WAL, which needs the file to itself: another
// process (or pool) opening it at the same moment gets SQLITE_BUSY at once,
// without the busy_timeout wait. Like a migration that met it (migrate),
// it tries again, a bounded number of times.
func (s *Store) ping(ctx context.Context) error {
	for busy := 0; ; busy++ {
		err := s.db.PingContext(ctx)
		if err == nil || s.driver != DriverSQLite || busy >= maxMigrateBusy || !errors.Is(classify(err), ErrUnavailable) {
			return err
		}
	}
}

func openSQLite(cfg Config) (*sql.DB, error) {
	if cfg.Path == "" || strings.ContainsRune(cfg.Path, '?') {
		return nil, fmt.Errorf("%w: sqlite path %q", ErrInvalid, cfg.Path)
	}
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)") // readers never block the writer
	q.Add("_pragma", "synchronous(FULL)") // a committed charge survives power loss too
	q.Add("_pragma", "foreign_keys(1)")
	// BEGIN IMMEDIATE: a write transaction takes the write lock when it
	// starts, so it waits (busy_timeout) instead of failing with
	// SQLITE_BUSY when it first writes after reading a stale snapshot.
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", cfg.Path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite: %w", err)
	}
	if cfg.Path == ":memory:" {
		// Every connection to ":memory:" opens a database of its own: a
		// second pooled connection would see no tables and no rows. One
		// connection, never closed, is the whole database.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		return db, nil
	}
	db.SetMaxOpenConns(maxConns(cfg, 4))
	return db, nil
}

func openPostgres(cfg Config) (*sql.DB, error) {
	if cfg.DSN == "" {
		return nil, fmt.Errorf("%w: postgres needs a DSN", ErrInvalid)
	}
	pc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		// pgx's message may quote the DSN, password included: keep it out.
		return nil, fmt.Errorf("%w: postgres DSN does not parse", ErrInvalid)
	}
	var opts []stdlib.OptionOpenDB
	if cfg.shouldPing != nil {
		opts = append(opts, stdlib.OptionShouldPing(cfg.shouldPing))
	}
	db := stdlib.OpenDB(*pc, opts...)
	n := maxConns(cfg, 10)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db, nil
}

func maxConns(cfg Config, def int) int {
	if cfg.MaxConns > 0 {
		return cfg.MaxConns
	}
	return def
}

// Close closes the database connections.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the database answers; errors.Is(err, ErrUnavailable)
// when it does not.
func (s *Store) Ping(ctx context.Context) error {
	return classify(s.retryStale(func() error { return s.db.PingContext(ctx) }))
}

// Driver returns DriverSQLite or DriverPostgres.
func (s *Store) Driver() string { return s.driver }

// Currency returns the currency new tenants are created with.
func (s *Store) Currency() string { return s.currency }

// inTx runs fn in one transaction: committed when fn returns nil, rolled
// back otherwise. Errors come back classified.
//
// A transaction that failed on a stale connection before its commit was
// sent did nothing: it runs again on another connection (see retryStale).
// One whose commit's answer was lost is not run again: it may have
// committed.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err == nil {
			if err = fn(tx); err == nil {
				return classify(tx.Commit())
			}
			tx.Rollback()
		}
		if attempt >= s.maxConns || !staleConn(err) {
			return classify(err)
		}
		s.stale.Add(1)
	}
}

// retryStale runs call again while it fails on a stale connection, at
// most once per pooled connection. After PostgreSQL restarts (or fails
// over), every pooled connection that was in use within the last second
// fails once with the server's goodbye before database/sql drops it (older
// ones are pinged first and dropped quietly): without this, a restart
// costs as many calls an error as the pool has connections. A server that
// is down fails a fresh connection with a connect error, which is not
// retried, so an outage is reported at once.
func (s *Store) retryStale(call func() error) error {
	for attempt := 0; ; attempt++ {
		err := call()
		if err == nil || attempt >= s.maxConns || !staleConn(err) {
			return err
		}
		s.stale.Add(1)
	}
}

// query is QueryContext, retried on a stale connection: the server's
// goodbye is read as the query's first answer.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	var rows *sql.Rows
	err := s.retryStale(func() (err error) {
		rows, err = s.db.QueryContext(ctx, q, args...)
		return err
	})
	return rows, err
}

// queryRow is QueryRowContext, retried on a stale connection: a row
// reports its query's error at Scan, so Scan is where it retries.
func (s *Store) queryRow(ctx context.Context, q string, args ...any) row {
	return row{s, ctx, q, args}
}

type row struct {
	s    *Store
	ctx  context.Context
	q    string
	args []any
}

func (r row) Scan(dest ...any) error {
	return r.s.retryStale(func() error { return r.s.db.QueryRowContext(r.ctx, r.q, r.args...).Scan(dest...) })
}

// audit writes one audit row inside tx.
func (s *Store) audit(ctx context.Context, tx *sql.Tx, actor, action, subject, detail string) error {
	_, err := tx.ExecContext(ctx,
		`INSERT INTO audit (time_us, actor, action, subject, detail) VALUES ($1, $2, $3, $4, $5)`,
		s.now().UnixMicro(), actor, action, subject, detail)
	return err
}

// micros and fromMicros convert times to and from the schema's BIGINT
// microseconds since the Unix epoch.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// maxAmount bounds every single amount: money.MaxAmount (10^9 currency
// units), far beyond any real top-up or request, and far from int64
// overflow, which SQLite would turn into floating point without an error.
const maxAmount = money.MaxAmount

func validAmount(v int64) bool { return v >= 0 && v <= maxAmount }

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range c {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// validName accepts tenant names, key ids, request ids and actors: not
// empty, at most 200 bytes, no control characters.
func validName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

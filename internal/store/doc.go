// Package store is hopgate's persistent state (DESIGN §9 and §10): tenants
// and their client keys (only a key's SHA-256 is stored), prepaid wallets
// with holds, the ledger of top-ups and charges, the audit trail of changes
// to money and keys, and the per-model status history behind /status.
//
// It owns the schema, its migrations and every SQL statement; it decides
// nothing about requests. Prices, reservation sizes, hold lifetimes, when
// to expire or prune, and what an error means for a client are the
// caller's (the gateway's) business; "now" is always a parameter where the
// store compares times, and Config.Clock stamps rows.
//
// # Two drivers, one schema
//
// SQLite is the default: a file, nothing to install, in WAL mode (readers
// never block the writer) with busy_timeout (a writer waits for another
// process's write lock), synchronous=FULL and write transactions that take
// the lock when they begin. PostgreSQL (13 or newer) is for replicas
// sharing wallets. Both run the same SQL through database/sql ($1 placeholders, ON
// CONFLICT, RETURNING); the schema lives in migrations/<driver>/, the same
// versions in both dialects (identity columns are the only difference), and
// a test compares the tables and columns both build. Times are stored as
// BIGINT microseconds since the Unix epoch, money as BIGINT micro-units of
// one currency: never floats.
//
// # Money
//
//   - TopUp adds to a balance; Settle subtracts a charge. Each writes its
//     ledger row, with the balance after it, in the same transaction as
//     the balance, so a balance always equals the sum of its ledger
//     (Verify checks this, and the chain of balances row by row).
//   - A charge's ledger row is keyed by its request id (unique): a second
//     Settle of a request charges nothing. A caller that lost the answer of
//     a Settle (ErrUnavailable: the commit may or may not have happened)
//     retries it until it gets one; no charge is lost or taken twice.
//   - Hold reserves an amount with one conditional update,
//     balance − reserved ≥ amount, never a read-then-write. Holds therefore
//     never overspend: when a hold is made, the live holds of its tenant,
//     made by any number of processes, sum to at most its balance (only a
//     later overrun, below, can leave them larger).
//   - Settle releases the request's hold and takes the real charge. A
//     charge at or below its hold never lowers the available amount. Only a charge above its hold
//     can overspend: usage above the reservation's estimate, or a hold that
//     expired (ExpireHolds released it) before the request settled, which
//     is then charged in full against no hold. The overspend bound: an
//     overrun (charge − hold, an expired hold counting as 0) lowers the
//     available amount (balance − reserved), and no hold is admitted while
//     that is below zero, so the balance goes below zero by at most the
//     sum of the overruns of the requests in flight when the available
//     amount first went below zero. It does not compound: the tenant gets
//     402 until it is topped up. Each charge's ledger row records the hold
//     it released and the reservation after it, so the bound can be
//     checked from the ledger.
//   - MarkDelivering records on a hold the charge it is about to become
//     just before the answer's last write; a hold so marked that expires
//     becomes an in-doubt row (InDoubtCharges), neither charged nor
//     forgotten, until ResolveInDoubt (audited) decides it. Adjust
//     corrects a balance either way (ledger kind "adjust", audited).
//   - Release drops a hold without a charge; ExpireHolds drops the holds of
//     processes that died, so a reservation is never held forever.
//
// Every writer locks rows in the same order (a hold, then its tenant), so
// concurrent settles, releases and expiries on PostgreSQL cannot deadlock;
// SQLite has one writer at a time.
//
// # Audit
//
// Every change an operator makes to money or keys (tenant creation,
// top-up, key added or revoked) writes an audit row (time, actor, action,
// subject, detail) in the same transaction as the change. Charges are
// recorded by the ledger, which names the request; they are not repeated
// in the audit trail, which stays readable as the operators' log.
//
// # Errors
//
// ErrNotFound, ErrExists, ErrInsufficientBalance and ErrInvalid are
// answers. ErrUnavailable wraps every failure to reach the database (the
// connection refused or lost, PostgreSQL shutting down or starting, an
// SQLite file locked past busy_timeout, a full disk, a deadline): the
// gateway answers 503 for charged requests. The Store recovers by itself
// once the database is back; it need not be reopened.
//
// # Libraries
//
//   - modernc.org/sqlite: SQLite translated to pure Go, so hopgate stays a
//     static binary built without cgo and cross-compiles; the cost is
//     speed we do not need at a wallet's write rate.
//   - github.com/jackc/pgx/v5 (through its database/sql adapter, so both
//     drivers share one code path): the maintained PostgreSQL driver, with
//     typed errors (SQLSTATE codes) that classify needs.
//   - github.com/pressly/goose/v3, its Provider API: migrations from an
//     embed.FS on a *sql.DB we opened, no global state, each migration in
//     its own transaction (a failed one rolls back whole; golang-migrate
//     instead leaves a "dirty" version to force by hand), and an advisory
//     lock on PostgreSQL so replicas starting together migrate once. Pinned
//     at v3.28.0, the newest release whose requirements move none of the
//     module's other dependencies.
package store

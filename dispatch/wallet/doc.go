// Package wallet charges tenants for the requests hopgate serves (DESIGN
// §9): it reserves before dispatch, settles with the upstream's usage
// after the answer, releases what was not answered, and keeps the client
// keys issued at run time in memory so authenticating them never waits on
// the database.
//
// One Wallet serves the process. Per request, package api calls Reserve
// after the model is resolved (a hold sized from the request at the
// model's list price; store.ErrInsufficientBalance means 402), then
// Reservation.Finish with what the engine reports, and defers
// Reservation.Guard so a panic or a forgotten Finish releases the hold.
// A realtime session (session.go) holds its model's realtime_hold with
// ReserveSession from before the upgrade to its close, and each of its
// responses is settled like a request of its own (Session.Charge).
// In the background the Wallet re-reads the store's keys every
// store.key_refresh, releases expired holds (ExpireHolds) so a replica
// killed mid-request blocks no wallet for longer than billing.hold_ttl
// plus one sweep, and retries every settle or release the store could not
// take until it lands: Settle is idempotent per request id, so a charge is
// neither lost nor taken twice. At shutdown, Close refuses new
// reservations and waits a bounded while (Options.CloseWait) for those in
// flight to be settled or released: the gateway closes the store after
// the last settle of the requests its drain timeout cut, not under it.
//
// The delivery rule (delivery.go): the engine calls Reservation.Deliver
// just before an answer's last write, which marks the hold "delivering"
// with the charge it is about to become; Finish after the write makes it
// final. A kill in between leaves an in-doubt row, not a guess. The
// journal (journal.go, Options.Journal) keeps every charge (and mark) the
// store could not take, fsynced, until it does, and Start applies what a
// previous process left in it: with the store down at shutdown, the
// charges wait there for the next start rather than in a log line.
//
// It owns the estimates (estimate.go): what a reservation assumes, and what
// a stream that ended without a usage report is charged. It must not parse
// HTTP, write responses or decide routing; the store's SQL is package
// store's.
package wallet

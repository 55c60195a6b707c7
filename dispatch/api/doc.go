// Package api is hopgate's client-facing HTTP API: the OpenAI-compatible
// routes of the main listener (routes.go: one entry per endpoint, with its
// operation, upstream path, body kind and stream classifier), client
// authentication, and the front-door checks that keep bad input away from
// upstreams (method, key, body size, JSON or multipart body, model,
// operation). With wallets (a store and auth.mode keys) it also
// authenticates keys issued at run time and, before dispatch, reserves the
// request's cost in its tenant's wallet (402 insufficient_balance when it
// does not fit), then settles or releases it once the engine is done
// (wallet.go, package wallet). A request that passes is handed to
// dispatch.Engine; the package never talks to an upstream itself. The
// public status page (/status, /status.json; package status) is routed
// here too (status.go), and each proxied request's outcome is counted for
// it.
package api

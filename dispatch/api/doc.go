// Package api is hopgate's client-facing HTTP API: the OpenAI-compatible
// routes of the main listener and Anthropic's POST /v1/messages (routes.go:
// one entry per endpoint, with its operation, upstream path, body kind and
// stream classifier), client authentication (Authorization: Bearer, or
// x-api-key as Anthropic's clients send it), and the front-door checks that
// keep bad input away from upstreams (method, key, body size, JSON or
// multipart body, model, operation), refused in the client's own error
// shape. Overload protection sheds a request it cannot admit at once (503
// engine_overloaded, X-Hopgate-Shed; package overload). With wallets (a store and auth.mode keys) it also
// authenticates keys issued at run time and, before dispatch, reserves the
// request's cost in its tenant's wallet (402 insufficient_balance when it
// does not fit), then settles or releases it once the engine is done
// (wallet.go, package wallet). A request that passes is handed to
// dispatch.Engine; the package never talks to an upstream itself. The
// public status page (/status, /status.json; package status) is routed
// here too (status.go), and each proxied request's outcome is counted for
// it. GET /v1/realtime (realtime.go) runs the same checks before the
// WebSocket upgrade (the key may come as the browser's
// openai-insecure-api-key.<key> subprotocol) and hands the session to
// dispatch.Engine.StartRealtime, Realtime.Relay and Realtime.End (the
// relay runs from the route's own small frame: an idle session parks
// there); with wallets, a session holds its model's realtime_hold before
// the upgrade (402 otherwise), each response.done is charged and the hold
// is released when the session ends (realtime_wallet.go, wallet.Session).
package api

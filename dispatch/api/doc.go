// Package api is hopgate's client-facing HTTP API: the OpenAI-compatible
// routes of the main listener, client authentication, and the front-door
// checks that keep bad input away from upstreams (method, key, body size,
// JSON, model). A request that passes is handed to dispatch.Engine; the
// package never talks to an upstream itself.
package api

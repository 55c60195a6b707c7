// Package reqbody reads the routing fields of a client request body (model,
// stream, stream_options.include_usage, messages, and the token limits
// max_tokens, max_completion_tokens and max_output_tokens that size a
// wallet's reservation) and rewrites the few bytes
// the gateway must change — the model name, include_usage, an assistant
// prefix for mid-stream resume — without decoding and re-encoding the body:
// every other byte reaches the upstream exactly as the client sent it.
//
// It owns the validity rules for client bodies that the gateway enforces
// before routing: one JSON object, json.Valid grammar, and no duplicate or
// case-variant routing keys, because an upstream that reads a different
// "model" than the gateway routed on is a billing and policy bypass.
//
// It must not do I/O, read limits or timeouts (the HTTP layer enforces the
// body size), nor decide routing: it only reports and splices bytes.
package reqbody

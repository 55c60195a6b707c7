// Package apierror writes errors produced by hopgate itself, with the codes
// of DESIGN.md §3: in the OpenAI error shape,
// {"error":{"message","type","code","param"},"request_id"}, and for clients
// of POST /v1/messages in Anthropic's, {"type":"error","error":{"type",
// "message"},"request_id"}, hopgate's code leading the message and the type
// the one Anthropic's API gives the status (package translate's mapping).
// Upstream error bodies are never rewritten here: a final upstream error
// goes back unchanged, or translated into the client's shape by the
// request path when the chain crossed families.
package apierror

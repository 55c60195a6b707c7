// Package apierror writes errors produced by hopgate itself in the OpenAI
// error shape, {"error":{"message","type","code","param"},"request_id"}, with
// the codes of DESIGN.md §3. Upstream error bodies are never rewritten here:
// final upstream errors go back to the client unchanged.
package apierror

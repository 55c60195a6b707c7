package api

import (
	"net/http"
	"strings"
)

// anthropicClient reports a request whose errors an Anthropic client reads
// (DESIGN.md §14): one on Anthropic's Messages paths (/v1/messages and
// what is under it: count_tokens, and the unknown ones such as batches),
// or one carrying anthropic-version, whatever its path (the Anthropic
// SDKs send it on every call: GET /v1/models/{id} included). Every other
// request is answered in OpenAI's shape.
func anthropicClient(r *http.Request) bool {
	p := r.URL.Path
	if p == messagesPath || strings.HasPrefix(p, messagesPath+"/") {
		return true
	}
	return r.Header.Get("Anthropic-Version") != ""
}

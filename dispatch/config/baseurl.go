package config

import (
	"net/url"
	"strings"
)

// lintBaseURL refuses a base_url that repeats the API's own path, which
// hopgate appends (DESIGN.md §14): an anthropic base_url ending in /v1
// sends every request to /v1/v1/messages, a final 404. The error names
// the fix. Only the API's path itself is refused, at the end of the
// base_url or followed by what hopgate appends after it: a gateway's own
// prefix that happens to hold the same segment (Cloudflare AI Gateway's
// https://gateway.ai.cloudflare.com/v1/{account}/{gateway}/anthropic) is
// a path prefix like any other.
func (p *parser) lintBaseURL(ch *Channel, rc *rawChannel, ctx string) {
	u, err := url.Parse(ch.BaseURL)
	if err != nil {
		return // refused by baseURL already
	}
	r, ok := apiPaths[ch.Provider]
	if !ok {
		return
	}
	path := strings.TrimRight(u.Path, "/")
	cut := r.repeatedAt(path)
	if cut < 0 {
		return
	}
	v := *u
	v.Path = strings.TrimRight(path[:cut], "/")
	v.RawPath = ""
	p.errorf(rc.baseURL.node, "base_url of %s (provider %s) repeats %s, which hopgate appends (%s): use base_url: %s",
		ctx, ch.Provider, r.repeat, r.appended, v.String())
}

// apiPath is, per family, the path segment a base_url must not hold and
// how the error names it and what hopgate appends.
type apiPath struct {
	// marker is the API's path, whole segments with no trailing slash.
	marker string
	// tails, when set, are what may follow the marker for it to be the
	// API's path (besides nothing at all); unset, anything may.
	tails            []string
	repeat, appended string
}

// repeatedAt is where in path (no trailing slash) the API's own path
// starts, or -1 when it holds none.
func (r apiPath) repeatedAt(path string) int {
	for from := 0; ; {
		i := strings.Index(path[from:], r.marker)
		if i < 0 {
			return -1
		}
		i += from
		rest := path[i+len(r.marker):]
		if rest == "" {
			return i
		}
		if rest[0] == '/' {
			if r.tails == nil {
				return i
			}
			for _, t := range r.tails {
				if rest == t || strings.HasPrefix(rest, t+"/") {
					return i
				}
			}
		}
		from = i + 1
	}
}

var apiPaths = map[string]apiPath{
	ProviderAnthropic: {marker: "/v1", tails: []string{"/messages", "/complete", "/models"},
		repeat: "/v1", appended: "/v1/messages"},
	ProviderElevenLabs: {marker: "/v1", tails: []string{"/text-to-speech", "/models", "/voices"},
		repeat: "/v1", appended: "/v1/text-to-speech/{voice_id}/stream"},
	ProviderAzure: {marker: "/openai", tails: []string{"/deployments", "/v1", "/realtime", "/responses"},
		repeat: "/openai", appended: "/openai/deployments/{deployment}/… or /openai/v1/…"},
	ProviderBedrock: {marker: "/model", repeat: "a model path", appended: "/model/{upstream_model}/invoke"},
	ProviderVertex: {marker: "/v1/projects", repeat: "a model path",
		appended: "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{upstream_model}:rawPredict"},
}

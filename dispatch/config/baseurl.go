package config

import (
	"net/url"
	"strings"
)

// lintBaseURL refuses a base_url that repeats the API's own path, which
// hopgate appends (DESIGN.md §14): an anthropic base_url ending in /v1
// sends every request to /v1/v1/messages, a final 404. The error names
// the fix.
func (p *parser) lintBaseURL(ch *Channel, rc *rawChannel, ctx string) {
	u, err := url.Parse(ch.BaseURL)
	if err != nil {
		return // refused by baseURL already
	}
	path := strings.TrimRight(u.Path, "/")
	fixed := func(cut string) string {
		v := *u
		v.Path = strings.TrimRight(path[:strings.Index(path, cut)], "/")
		v.RawPath = ""
		return v.String()
	}
	var repeat, fix, appended string
	switch ch.Provider {
	case ProviderAnthropic:
		if strings.Contains(path+"/", "/v1/") {
			repeat, fix, appended = "/v1", fixed("/v1"), "/v1/messages"
		}
	case ProviderAzure:
		if strings.Contains(path+"/", "/openai/") {
			repeat, fix, appended = "/openai", fixed("/openai"), "/openai/deployments/{deployment}/… or /openai/v1/…"
		}
	case ProviderBedrock:
		if strings.Contains(path+"/", "/model/") {
			repeat, fix, appended = "a model path", fixed("/model/"), "/model/{upstream_model}/invoke"
		}
	case ProviderVertex:
		if strings.Contains(path+"/", "/v1/projects/") {
			repeat, fix, appended = "a model path", fixed("/v1/projects/"), "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{upstream_model}:rawPredict"
		}
	}
	if repeat != "" {
		p.errorf(rc.baseURL.node, "base_url of %s (provider %s) repeats %s, which hopgate appends (%s): use base_url: %s",
			ctx, ch.Provider, repeat, appended, fix)
	}
}

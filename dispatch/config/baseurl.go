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
		v.Path = strings.TrimRight(path[:strings.Index(path+"/", cut)], "/")
		v.RawPath = ""
		return v.String()
	}
	r, ok := apiPaths[ch.Provider]
	if !ok || !strings.Contains(path+"/", r.marker) {
		return
	}
	repeat, fix, appended := r.repeat, fixed(r.marker), r.appended
	p.errorf(rc.baseURL.node, "base_url of %s (provider %s) repeats %s, which hopgate appends (%s): use base_url: %s",
		ctx, ch.Provider, repeat, appended, fix)
}

// apiPaths: per family, the path segment a base_url must not hold, how the
// error names it, and what hopgate appends.
var apiPaths = map[string]struct{ marker, repeat, appended string }{
	ProviderAnthropic:  {"/v1/", "/v1", "/v1/messages"},
	ProviderElevenLabs: {"/v1/", "/v1", "/v1/text-to-speech/{voice_id}/stream"},
	ProviderAzure:      {"/openai/", "/openai", "/openai/deployments/{deployment}/… or /openai/v1/…"},
	ProviderBedrock:    {"/model/", "a model path", "/model/{upstream_model}/invoke"},
	ProviderVertex:     {"/v1/projects/", "a model path", "/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{upstream_model}:rawPredict"},
}

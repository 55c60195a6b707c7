package provider

import (
	"context"
	"net/http"
	"net/url"

	"github.com/hopgate/hopgate/dispatch/config"
)

// RealtimeURL is the WebSocket URL of a realtime session on the channel
// (DESIGN.md §15), model being the chain entry's upstream model (Azure's
// deployment): openai `{base_url}/realtime?model=`, azure with an
// api_version `/openai/realtime?api-version=&deployment=`, azure's v1 API
// `/openai/v1/realtime?model=`. The scheme stays http(s): the WebSocket
// library dials those.
func (u *Upstream) RealtimeURL(model string) string {
	base := u.ch.BaseURL
	if u.ch.Provider == config.ProviderAzure {
		if u.ch.APIVersion == "" {
			return base + "/openai/v1/realtime?model=" + url.QueryEscape(model)
		}
		return base + "/openai/realtime?api-version=" + url.QueryEscape(u.ch.APIVersion) + "&deployment=" + url.QueryEscape(model)
	}
	return base + "/realtime?model=" + url.QueryEscape(model)
}

// SetRealtimeHeaders sets the credential of a realtime upgrade (openai:
// Bearer; azure: api-key or an Entra ID token) and the User-Agent. A
// credential that cannot be obtained is ErrCredential.
func (u *Upstream) SetRealtimeHeaders(ctx context.Context, h http.Header, userAgent string) error {
	h.Set("User-Agent", userAgent)
	if u.ch.Provider == config.ProviderAzure {
		return u.setAzureCredential(ctx, h)
	}
	if key := u.ch.APIKey; key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return nil
}

package provider

import (
	"context"
	"net/http"
	"testing"

	"github.com/hopgate/hopgate/dispatch/config"
)

// Each family's realtime URL and credential are DESIGN.md §15's: a wrong
// path or header is a refused upgrade on every session of the channel.
func TestRealtimeURLAndHeaders(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ch         config.Channel
		url        string
		header, hv string
	}{
		// why: OpenAI's GA endpoint is /v1/realtime?model=, base_url ending in /v1.
		{"openai", config.Channel{Provider: config.ProviderOpenAI, BaseURL: "http://h/v1", APIKey: "k"},
			"http://h/v1/realtime?model=gpt-realtime", "Authorization", "Bearer k"},
		// why: Azure's dated API names the deployment in the query.
		{"azure dated", config.Channel{Provider: config.ProviderAzure, BaseURL: "https://r.openai.azure.com", APIVersion: "2025-04-01-preview", APIKey: "k"},
			"https://r.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-realtime", "Api-Key", "k"},
		// why: Azure's v1 API takes the model like OpenAI's.
		{"azure v1", config.Channel{Provider: config.ProviderAzure, BaseURL: "https://r.openai.azure.com", APIKey: "k"},
			"https://r.openai.azure.com/openai/v1/realtime?model=gpt-realtime", "Api-Key", "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := New(context.Background(), &tc.ch, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := u.RealtimeURL("gpt-realtime"); got != tc.url {
				t.Errorf("RealtimeURL = %s, want %s", got, tc.url)
			}
			h := http.Header{}
			if err := u.SetRealtimeHeaders(context.Background(), h, "hopgate/x"); err != nil {
				t.Fatal(err)
			}
			if h.Get(tc.header) != tc.hv || h.Get("User-Agent") != "hopgate/x" {
				t.Errorf("headers = %v", h)
			}
		})
	}
}

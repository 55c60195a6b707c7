package gwtest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
)

// Epoch is the time both fake clocks start at.
var Epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// ChannelKey is the credential every fake provider requires unless
// Options.APIKey says otherwise; a config names it with
// `api_key_env: CHANNEL_KEY`, which the harness always sets.
const ChannelKey = "sk-channel-secret-0123456789"

// Fakes are the upstreams of a test: fake providers by id, hand-written
// handlers, and the base URL (…/v1) of each, which Expand writes into a
// config.
type Fakes struct {
	// Ups are the fake providers by id (wrapped ones included).
	Ups map[string]*upstream.Server
	// URLs is every id's base URL: fakes, custom handlers, Options.URLs.
	URLs map[string]string
	// Roots are the fakes' server URLs without /v1: the base URL of a
	// channel of another provider family ({{base:ID}}).
	Roots map[string]string
	// UpClock drives the fake providers' time-dependent faults (slow first
	// token, stall, flap, frame delay); nil when Options.UpstreamClock
	// replaced it.
	UpClock *clockwork.FakeClock
	// APIKey is the credential the fake providers require.
	APIKey string
}

// StartFakes starts one fake provider per id of fakes, and a server per
// Options.Custom handler, all closed when the test ends. It uses APIKey,
// Custom, Wrap, URLs and UpstreamClock of o.
func StartFakes(tb testing.TB, o Options, fakes ...string) *Fakes {
	tb.Helper()
	f := &Fakes{Ups: map[string]*upstream.Server{}, URLs: map[string]string{}, Roots: map[string]string{}, APIKey: o.APIKey}
	if f.APIKey == "" {
		f.APIKey = ChannelKey
	}
	for id, h := range o.Custom {
		srv := httptest.NewServer(h)
		tb.Cleanup(srv.Close)
		f.URLs[id] = srv.URL + "/v1"
		f.Roots[id] = srv.URL
	}
	upClock := o.UpstreamClock
	if upClock == nil {
		f.UpClock = clockwork.NewFakeClockAt(Epoch)
		upClock = f.UpClock
	}
	for _, id := range fakes {
		// One key for every dialect: Bearer (openai), api-key (azure),
		// x-api-key (anthropic).
		u := upstream.New(upstream.Options{Clock: upClock, Name: id, APIKey: f.APIKey, AzureAPIKey: f.APIKey, AnthropicAPIKey: f.APIKey})
		var h http.Handler = u
		if wrap := o.Wrap[id]; wrap != nil {
			h = wrap(u)
		}
		srv := httptest.NewServer(h)
		tb.Cleanup(func() { u.Close(); srv.Close() })
		f.Ups[id] = u
		f.URLs[id] = srv.URL + "/v1"
		f.Roots[id] = srv.URL
	}
	for id, u := range o.URLs {
		f.URLs[id] = u
	}
	return f
}

// Expand replaces every {{url:ID}} of yml with that id's base URL (…/v1,
// an OpenAI-compatible channel's) and every {{base:ID}} with its server's
// URL (the base URL of an azure, anthropic, bedrock or vertex channel).
func (f *Fakes) Expand(yml string) string {
	for id, u := range f.URLs {
		yml = strings.ReplaceAll(yml, "{{url:"+id+"}}", u)
	}
	for id, u := range f.Roots {
		yml = strings.ReplaceAll(yml, "{{base:"+id+"}}", u)
	}
	return yml
}

// Attempts is how many requests naming model the fake provider id received.
func (f *Fakes) Attempts(id, model string) int { return f.Ups[id].Attempts(model) }

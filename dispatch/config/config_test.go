package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/money"
)

const repoTestdata = "../../testdata/config"

// env is a getenv backed by a map, so tests never depend on the process
// environment.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func mustParse(t *testing.T, data string, getenv func(string) (string, bool)) *Config {
	t.Helper()
	c, err := Parse([]byte(data), getenv)
	if err != nil {
		t.Fatalf("Parse: %v\n--- config:\n%s", err, data)
	}
	return c
}

func errorList(t *testing.T, err error) ErrorList {
	t.Helper()
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("error %v (%T) is not an ErrorList", err, err)
	}
	return l
}

// wantOneError parses yml with getenv and wants exactly one error, at line,
// whose message contains sub.
func wantOneError(t *testing.T, yml string, getenv func(string) (string, bool), line int, sub string) {
	t.Helper()
	_, err := Parse([]byte(yml), getenv)
	if err == nil {
		t.Fatalf("no error for\n%s", yml)
	}
	if l := errorList(t, err); len(l) != 1 || l[0].Line != line || !strings.Contains(l[0].Msg, sub) {
		t.Fatalf("got %v\nwant one error at line %d containing %q", l, line, sub)
	}
}

// The canonical file of DESIGN.md §4 is what the docs show first; it must
// load and resolve to exactly the values the design promises.
func TestCanonicalFile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoTestdata, "canonical.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data), env("OPENAI_API_KEY", "sk-test", "ANTHROPIC_API_KEY", "sk-ant-test"))

	if c.Listen != "127.0.0.1:8080" || c.AdminListen != "127.0.0.1:9090" || c.Region != "eu-west-1" {
		t.Errorf("listeners/region = %q %q %q", c.Listen, c.AdminListen, c.Region)
	}
	if c.MaxBodyBytes != 10485760 {
		t.Errorf("MaxBodyBytes = %d, want 10485760", c.MaxBodyBytes)
	}
	if want := (Telemetry{HealthySampleRatio: 1, FailoverLogSize: 200, Path: true, TrustInboundTrace: true,
		TraceURL:        "http://127.0.0.1:16686/trace/{trace_id}",
		TraceRingTraces: 2000, TraceRingBytes: 16 << 20}); c.Telemetry != want || !c.Status.Enabled {
		t.Errorf("Telemetry = %+v, want %+v", c.Telemetry, want)
	}
	if c.Auth.Mode != AuthKeys || len(c.Auth.Keys) != 1 || c.Auth.Keys[0].ID != "team-a" || c.Auth.Keys[0].Tenant != "acme" ||
		fmt.Sprintf("%x", c.Auth.Keys[0].SHA256) != "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" {
		t.Errorf("Auth = %+v", c.Auth)
	}
	if c.Admin.BearerToken != "" {
		t.Errorf("Admin.BearerToken = %q, want empty", c.Admin.BearerToken)
	}

	if st := c.Store; !st.Enabled || st.Driver != StoreSQLite || st.Path != "hopgate.db" || st.DSNEnv != "" {
		t.Errorf("Store = %+v, want SQLite at hopgate.db", st)
	}

	eu, us, cl := c.Channel("openai-eu"), c.Channel("backup-us"), c.Channel("claude-direct")
	if eu == nil || us == nil || cl == nil || len(c.Channels) != 3 || c.Channels[0] != eu || c.Channels[1] != us || c.Channels[2] != cl {
		t.Fatalf("channels not indexed in file order: %+v", c.Channels)
	}
	if eu.APIKey != "sk-test" || eu.APIKeyEnv != "OPENAI_API_KEY" || eu.BaseURL != "https://api.openai.com/v1" ||
		eu.Provider != ProviderOpenAI || eu.Region != "eu-west-1" || eu.Prefill || eu.Line != 25 {
		t.Errorf("openai-eu = %+v", eu)
	}
	if us.APIKey != "" || us.APIKeyEnv != "" || !us.Prefill || us.BaseURL != "http://127.0.0.1:8401/v1" || us.Line != 30 {
		t.Errorf("backup-us = %+v", us)
	}
	if cl.Provider != ProviderAnthropic || cl.APIKey != "sk-ant-test" || cl.BaseURL != "https://api.anthropic.com" ||
		cl.Region != "us-east-1" || cl.Line != 35 {
		t.Errorf("claude-direct = %+v", cl)
	}
	for _, ch := range c.Channels {
		if ch.Breaker != DefaultBreaker(BreakerCount) || ch.Retries != 0 {
			t.Errorf("%s breaker %+v retries %d", ch.ID, ch.Breaker, ch.Retries)
		}
	}

	m := c.Model("gpt-4o-mini")
	if m == nil || len(c.Models) != 1 || m.Line != 41 {
		t.Fatalf("model = %+v", m)
	}
	if len(m.Chain) != 2 || m.Chain[0].Channel != us || m.Chain[1].Channel != eu {
		t.Fatalf("chain order: equal prices must keep file order, got %+v", m.Chain)
	}
	if e := m.Chain[0]; e.UpstreamModel != "gpt-4o-mini" || e.Price != (Price{0.15, 0.60}) || !e.Prefill {
		t.Errorf("entry 0 = %+v", e)
	}
	if m.ListPrice != (money.Price{Input: 300_000, Output: 1_200_000}) {
		t.Errorf("list price = %+v, want 0.30/1.20 in micro-units", m.ListPrice)
	}
	if m.Chain[1].Prefill {
		t.Errorf("entry 1 inherits prefill=false from openai-eu")
	}
	want := DefaultPolicy(ProfileDefault)
	want.HeaderTimeout = 20 * time.Second
	if m.Policy != want {
		t.Errorf("policy = %+v\nwant     %+v", m.Policy, want)
	}
	if len(m.FallbackModels) != 0 || m.ContextFallback != "" || strings.Join(m.Operations, ",") != "chat" {
		t.Errorf("fallbacks/operations = %v %q %v", m.FallbackModels, m.ContextFallback, m.Operations)
	}
	if c.Model("nope") != nil || c.Channel("nope") != nil {
		t.Error("lookups of unknown names must return nil")
	}
}

// The acceptance test of the loader: three unrelated mistakes in one file
// come back together, each with its own line, and nothing else.
func TestThreeMistakes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoTestdata, "three-mistakes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data, env())
	l := errorList(t, err)
	want := []struct {
		line int
		sub  string
	}{
		{8, `unknown key "regoin" in channel "openai-eu"`},
		{21, `chain of model "gpt-4o-mini" has 4 entries; at most 3`},
		{25, `unknown channel "openia-eu" in chain of model "gpt-4o"`},
	}
	if len(l) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(l), len(want), err)
	}
	for i, w := range want {
		if l[i].Line != w.line || !strings.Contains(l[i].Msg, w.sub) {
			t.Errorf("error %d = %v, want line %d containing %q", i, l[i], w.line, w.sub)
		}
	}
}

// skeleton is a minimal valid config with known line numbers; cases splice
// a mistake into it:
//
//	1 auth: {mode: none}
//	2 channels:
//	3   - {id: a, base_url: "http://127.0.0.1:1/v1"<ch>}
//	4 models:
//	5   - name: m
//	6     chain: [{channel: a<entry>}]
//	7 <tail>
func skeleton(ch, entry, tail string) cfgString {
	return cfgString("auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://127.0.0.1:1/v1\"" + ch +
		"}\nmodels:\n  - name: m\n    chain: [{channel: a" + entry + "}]\n" + tail)
}

// Every kind of mistake is reported once, at the line of the node that
// caused it, with a message naming the culprit.
func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name string
		why  string
		yaml cfgString
		line int
		sub  string
	}{
		{"unknown top-level key", "typos must not be ignored silently",
			skeleton("", "", "listn: 127.0.0.1:1\n"), 7, `unknown key "listn" in the config file`},
		{"unknown nested key", "strictness holds at every depth",
			skeleton("", ", price: {input: 1, currency: usd}", ""), 6, `unknown key "currency" in price in chain entry 1 of model "m"`},
		{"unknown key in breaker", "breaker blocks are strict too",
			skeleton(", breaker: {mode: count, treshold: 0.5}", "", ""), 3, `unknown key "treshold" in breaker of channel "a"`},
		{"duplicate yaml key", "the second value would silently win",
			skeleton("", "", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n"), 8, `duplicate key "listen"`},
		{"string for int", "wrong types are errors, not zero values",
			skeleton(", retries: two", "", ""), 3, `retries in channel "a" must be an integer, not the string "two"`},
		{"float for int", "1.5 failures is not a count",
			skeleton(", breaker: {failures: 1.5}", "", ""), 3, `failures in breaker of channel "a" must be an integer`},
		{"mapping for string", "a structured value where a scalar is expected",
			skeleton("", "", "region: {name: eu}\n"), 7, `region must be a string, not a mapping`},
		{"number for string", "unquoted numbers are not strings",
			skeleton("", "", "region: 1\n"), 7, `region must be a string, not the number 1`},
		{"string for bool", "yes/no are strings in YAML 1.2",
			skeleton(", prefill: yes", "", ""), 3, `prefill in channel "a" must be true or false`},
		{"list for mapping", "policy must be a mapping",
			skeleton("", "", "policy: [chat]\n"), 7, `policy must be a mapping, not a list`},
		{"null scalar", "a key without a value is a mistake, not a default",
			skeleton("", "", "region:\n"), 7, `region must be a string, not empty`},
		{"chain of 4", "ROUTING_CHAIN_MAX is 3; the error points at the first extra entry",
			"auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://h/\"}\n  - {id: b, base_url: \"http://h/\"}\n  - {id: c, base_url: \"http://h/\"}\n  - {id: d, base_url: \"http://h/\"}\nmodels:\n  - name: m\n    chain:\n      - {channel: a}\n      - {channel: b}\n      - {channel: c}\n      - {channel: d}\n",
			13, `chain of model "m" has 4 entries; at most 3 are allowed (ROUTING_CHAIN_MAX)`},
		{"empty chain", "a model without a chain cannot be served",
			"auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - name: m\n    chain: []\n", 6, `chain of model "m" is empty`},
		{"missing chain", "same mistake, key absent: points at the model",
			"auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - name: m\n", 5, `model "m" has no chain`},
		{"unknown channel", "the example of the brief",
			skeleton("", "", "  - name: gpt-4o\n    chain: [{channel: foo}]\n"), 8, `unknown channel "foo" in chain of model "gpt-4o"`},
		{"channel twice in a chain", "a second hop on one breaker adds no resilience",
			skeleton("", "", "  - name: n\n    chain:\n      - {channel: a}\n      - {channel: a}\n"), 10, `channel "a" appears twice in chain of model "n" (first at line 9)`},
		{"missing channel in entry", "an entry must say where to go",
			skeleton("", "", "  - name: n\n    chain: [{upstream_model: x}]\n"), 8, `chain entry 1 of model "n" has no channel`},
		{"duplicate channel id", "ids key breakers and metrics",
			skeleton("", "", "").replace3("  - {id: a, base_url: \"http://h\"}\n"), 4, `duplicate channel id "a" (first at line 3)`},
		{"bad channel id", "ids appear in the failover path a:open -> b:503",
			"auth: {mode: none}\nchannels:\n  - {id: \"a:b\", base_url: \"http://h\"}\nmodels:\n  - name: m\n    chain: [{channel: \"a:b\"}]\n", 3, `id of channel "a:b" may only contain`},
		{"non-ASCII model name", "model names are sent in the X-Hopgate-Model header, which must be ASCII",
			"auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - name: \"gpt→mini\"\n    chain: [{channel: a}]\n", 5, `name of model "gpt→mini" may only contain printable ASCII`},
		{"missing channel id", "a channel must be addressable",
			skeleton("", "", "").replace3("  - {base_url: \"http://h\"}\n"), 4, `channel 2 has no id`},
		{"missing base_url", "a channel must have somewhere to send",
			skeleton("", "", "").replaceChannel(`{id: a}`), 3, `channel "a" has no base_url`},
		{"duplicate model name", "a public name resolves to one chain",
			skeleton("", "", "  - name: m\n    chain: [{channel: a}]\n"), 7, `duplicate model name "m" (first at line 5)`},
		{"duplicate key id", "key ids name tenants in traces",
			"auth:\n  keys:\n    - {id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n    - {id: k, sha256: 0f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n" + skeleton("", "", "")[len("auth: {mode: none}\n"):],
			4, `duplicate key id "k" (first at line 3)`},
		{"duplicate sha256", "one bearer token cannot belong to two tenants",
			"auth:\n  keys:\n    - {id: k, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n    - {id: l, sha256: 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08}\n" + skeleton("", "", "")[len("auth: {mode: none}\n"):],
			4, `auth key "l" has the same sha256 as key "k"`},
		{"short sha256", "a truncated hash would never match",
			"auth:\n  keys:\n    - {id: k, sha256: 9f86d08188}\n" + skeleton("", "", "")[len("auth: {mode: none}\n"):],
			3, `sha256 of auth key "k" must be 64 hex characters`},
		{"keys mode without keys", "a gateway that accepts nobody is a mistake",
			skeleton("", "", "")[len("auth: {mode: none}\n"):], 1, `auth.mode is keys but auth.keys is empty`},
		{"bad duration", "durations are Go durations",
			skeleton("", "", "policy: {header_timeout: 1 minute}\n"), 7, `header_timeout in policy must be a duration like 60s or 5m, not the string "1 minute"`},
		{"bare number duration", "60 is ambiguous (seconds? ms?)",
			skeleton("", "", "policy: {chain_deadline: 60}\n"), 7, `chain_deadline in policy must be a duration`},
		{"negative duration", "a negative timeout means nothing",
			skeleton("", "", "policy: {retry_after_max: -5s}\n"), 7, `retry_after_max in policy must not be negative`},
		{"zero header timeout", "0 would fail every hop at once",
			skeleton("", "", "policy: {header_timeout: 0s}\n"), 7, `header_timeout in policy must be greater than 0`},
		{"bad profile", "only default and chat exist",
			skeleton("", "", "policy: {profile: fast}\n"), 7, `profile in policy must be one of default, chat, not "fast"`},
		{"bad breaker mode", "only count and rate exist",
			skeleton(", breaker: {mode: ratio}", "", ""), 3, `mode in breaker of channel "a" must be one of count, rate`},
		{"bad on_timeout", "only commit and failover exist",
			skeleton("", "", "policy: {stream_gate: {on_timeout: retry}}\n"), 7, `on_timeout in stream_gate in policy must be one of commit, failover`},
		{"bad mid_stream", "only error and resume exist",
			skeleton("", "", "    policy: {mid_stream: retry}\n"), 7, `mid_stream in policy of model "m" must be one of error, resume`},
		{"bad degraded mode", "only error and message exist",
			skeleton("", "", "policy: {degraded_reply: {mode: silent}}\n"), 7, `mode in degraded_reply in policy must be one of error, message`},
		{"empty degraded message", "a 200 with no content looks like a real answer",
			skeleton("", "", "policy: {degraded_reply: {mode: message, message: \"\"}}\n"), 7, `message in degraded_reply in policy must not be empty`},
		{"bad auth mode", "only keys and none exist",
			cfgString(strings.Replace(string(skeleton("", "", "")), "mode: none", "mode: open", 1)), 1, `mode in auth must be one of keys, none`},
		{"bad provider", "a channel speaks one of the five provider families",
			skeleton(", provider: cohere", "", ""), 3, `provider in channel "a" must be one of openai, azure, anthropic, bedrock, vertex`},
		{"anthropic without a key", "Anthropic's API needs x-api-key",
			"auth: {mode: none}\nchannels:\n  - {id: a, provider: anthropic}\nmodels:\n  - name: m\n    max_tokens_default: 64\n    chain: [{channel: a}]\n", 3, `channel "a" (provider anthropic) needs api_key_env`},
		{"azure without a credential", "Azure needs an api-key or Entra ID",
			skeleton(", provider: azure", "", ""), 3, `channel "a" (provider azure) needs api_key_env or entra_id: true`},
		{"bedrock without a region", "the AWS region picks the Bedrock endpoint",
			"auth: {mode: none}\nchannels:\n  - {id: a, provider: bedrock}\nmodels:\n  - name: m\n    max_tokens_default: 64\n    chain: [{channel: a}]\n", 3, `channel "a" (provider bedrock) needs region`},
		{"vertex without a project", "the project is in every Vertex URL",
			"auth: {mode: none}\nchannels:\n  - {id: a, provider: vertex, region: us-east5}\nmodels:\n  - name: m\n    max_tokens_default: 64\n    chain: [{channel: a}]\n", 3, `channel "a" (provider vertex) needs project`},
		{"anthropic chain without max_tokens_default", "Anthropic requires max_tokens, which OpenAI clients may omit",
			"auth: {mode: none}\nchannels:\n  - {id: a, provider: vertex, project: p, region: us-east5}\nmodels:\n  - name: m\n    chain: [{channel: a}]\n", 5, `model "m" needs max_tokens_default`},
		{"anthropic chain serving embeddings", "an Anthropic-family channel serves chat and responses only",
			"auth: {mode: none}\nchannels:\n  - {id: a, provider: bedrock, region: us-east-1}\nmodels:\n  - name: m\n    max_tokens_default: 1024\n    operations: [chat, embeddings]\n    chain: [{channel: a}]\n", 7, `model "m" serves "embeddings", but channel "a" of its chain (provider bedrock) serves chat and responses only`},
		{"api_version on openai", "api_version means Azure's deployment URLs",
			skeleton(", api_version: \"2024-10-21\"", "", ""), 3, `api_version in channel "a" applies to provider azure only`},
		{"relative base_url", "requests need an absolute URL",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "/v1"}`), 3, `must be absolute`},
		{"base_url with query", "paths are appended to base_url",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "http://h/v1?x=1"}`), 3, `must not have a query`},
		{"base_url with fragment", "paths are appended to base_url",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "http://h/v1#x"}`), 3, `must not have a fragment`},
		{"base_url with userinfo", "that would be an inline credential",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "https://u:p@h/v1"}`), 3, `credentials in the URL are not allowed`},
		{"base_url ftp", "only http(s) upstreams",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "ftp://h/v1"}`), 3, `scheme must be http or https`},
		{"env interpolation", "${ENV} is not supported anywhere; point to api_key_env",
			skeleton("", "", "").replaceChannel(`{id: a, base_url: "http://${HOST}/v1"}`), 3, `${...} interpolation is not supported; put secrets in an environment variable and write its bare name in api_key_env`},
		{"env interpolation in api_key_env", "the variable is named, not expanded",
			skeleton(", api_key_env: \"${KEY}\"", "", ""), 3, `api_key_env in channel "a": ${...} interpolation is not supported`},
		{"bad env name", "api_key_env names a variable",
			skeleton(", api_key_env: sk-abc123", "", ""), 3, `api_key_env in channel "a" must name an environment variable`},
		{"fallback unknown", "fallbacks must exist",
			skeleton("", "", "    fallback_models: [nope]\n"), 7, `fallback_models of model "m" names unknown model "nope"`},
		{"fallback itself", "a model cannot fall back to itself",
			skeleton("", "", "    fallback_models: [m]\n"), 7, `fallback_models of model "m" names the model itself`},
		{"fallback serving none of the operations", "the walk would never ask it",
			skeleton("", "", "    fallback_models: [e]\n  - {name: e, operations: [embeddings], chain: [{channel: a, upstream_model: x}]}\n"), 7,
			`fallback_models of model "m" names "e", which serves none of its operations (chat; it serves embeddings)`},
		{"context_fallback unknown", "fallbacks must exist",
			skeleton("", "", "    context_fallback: big\n"), 7, `context_fallback of model "m" names unknown model "big"`},
		{"context_fallback itself", "would loop on context_length_exceeded",
			skeleton("", "", "    context_fallback: m\n"), 7, `context_fallback of model "m" names the model itself`},
		{"threshold zero", "threshold is in (0, 1]",
			skeleton("", "", "policy: {breaker: {threshold: 0}}\n"), 7, `threshold in breaker in policy must be in (0, 1]`},
		{"threshold above one", "an error rate cannot exceed 100%",
			skeleton(", breaker: {threshold: 1.5}", "", ""), 3, `threshold in breaker of channel "a" must be in (0, 1]`},
		{"failures absurd", "the count breaker allocates one slot per failure up front",
			skeleton("", "", "policy: {breaker: {failures: 1000000000}}\n"), 7, `failures in breaker in policy must be at most 1000, not 1000000000`},
		{"min_requests absurd", "a rate breaker that never judges is not a breaker",
			skeleton(", breaker: {mode: rate, min_requests: 2000000}", "", ""), 3, `min_requests in breaker of channel "a" must be at most 1000000`},
		{"window absurd", "the rate breaker allocates one bucket per second of its window up front",
			skeleton(", breaker: {mode: rate, window: 1000h}", "", ""), 3, `window in breaker of channel "a" must be at most 60m, not 1000h`},
		{"failures zero", "a breaker opening on 0 failures is always open",
			skeleton("", "", "policy: {breaker: {failures: 0}}\n"), 7, `failures in breaker in policy must be at least 1`},
		{"negative retries", "retries are a count",
			skeleton("", "", "policy: {retries: -1}\n"), 7, `retries in policy must be at least 0`},
		{"listen not host:port", "the listener would fail at start",
			skeleton("", "", "listen: localhost\n"), 7, `listen must be host:port`},
		{"listen equals admin_listen", "two listeners cannot share an address",
			skeleton("", "", "listen: 127.0.0.1:7000\nadmin_listen: 127.0.0.1:7000\n"), 8, `admin_listen must differ from listen`},
		{"negative price", "prices are costs",
			skeleton("", ", price: {input: -1}", ""), 6, `input in price in chain entry 1 of model "m" must not be negative`},
		{"model breaker", "breakers are per channel",
			skeleton("", "", "    policy: {breaker: {mode: rate}}\n"), 7, `breaker is per channel; set it in policy or channels[].breaker`},
		{"model retries", "retries are per channel",
			skeleton("", "", "    policy: {retries: 2}\n"), 7, `retries is per channel; set it in policy or channels[].retries`},
		{"unknown operation", "operations are a closed set",
			skeleton("", "", "    operations: [chat, video]\n"), 7, `unknown operation "video"`},
		{"empty operations", "a model must serve something",
			skeleton("", "", "    operations: []\n"), 7, `operations of model "m" must not be empty`},
		{"sample ratio", "a ratio is in [0, 1]",
			skeleton("", "", "telemetry: {healthy_sample_ratio: 2}\n"), 7, `healthy_sample_ratio in telemetry must be between 0 and 1`},
		{"trace_url without placeholder", "a link that cannot name the trace",
			skeleton("", "", "telemetry: {trace_url: \"http://jaeger:16686/trace/\"}\n"), 7, `must contain {trace_id}`},
		{"trace_url relative", "the pages link out to another host",
			skeleton("", "", "telemetry: {trace_url: \"/trace/{trace_id}\"}\n"), 7, `must be an absolute http or https URL`},
		{"trace_url javascript", "a link on the admin pages must not run code",
			skeleton("", "", "telemetry: {trace_url: \"javascript:alert('{trace_id}')\"}\n"), 7, `must be an absolute http or https URL`},
		{"trace ring too small", "a ring under 64 KiB holds nearly nothing",
			skeleton("", "", "telemetry: {trace_ring: {max_bytes: 10}}\n"), 7, `max_bytes in trace_ring in telemetry must be at least 65536`},
		{"status not a bool", "status.enabled is a switch",
			skeleton("", "", "status: {enabled: maybe}\n"), 7, `enabled in status must be`},
		{"max_body_bytes zero", "a zero limit rejects every request",
			skeleton("", "", "max_body_bytes: 0\n"), 7, `max_body_bytes must be at least 1`},
		{"merge key", "<< would hide keys from strict checking",
			skeleton("", "", "policy:\n  <<: {retries: 1}\n"), 8, `merge keys (<<) are not supported`},
		{"no models", "a gateway with nothing to serve",
			"auth: {mode: none}\nchannels: []\nmodels: []\n", 3, `no models`},
		{"yaml syntax", "syntax errors keep the library's line",
			skeleton("", "", "listen: a: b\n"), 7, `invalid YAML: mapping values are not allowed`},
		{"tab indentation", "a common copy-paste mistake",
			skeleton("", "", "policy:\n\tretries: 1\n"), 8, `invalid YAML`},
		{"two documents", "a second document would be ignored",
			skeleton("", "", "---\nlisten: 127.0.0.1:1\n"), 7, `only one YAML document`},
		{"empty file", "nothing to serve; whole-file errors have line 0",
			"# only a comment\n", 0, `the config file is empty`},
		{"not a mapping", "the root must be a mapping",
			"- a\n- b\n", 1, `the config file must be a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env())
			if err == nil {
				t.Fatalf("no error (%s)\n--- config:\n%s", tt.why, tt.yaml)
			}
			l := errorList(t, err)
			if len(l) != 1 || l[0].Line != tt.line || !strings.Contains(l[0].Msg, tt.sub) {
				t.Errorf("%s\ngot:\n%v\nwant exactly one error at line %d containing %q\n--- config:\n%s", tt.why, err, tt.line, tt.sub, tt.yaml)
			}
		})
	}
}

type cfgString string

// replace3 inserts extra channel lines after line 3 of the skeleton.

func (s cfgString) replace3(extra string) cfgString {
	i := strings.Index(string(s), "models:")
	return s[:i] + cfgString(extra) + s[i:]
}

// replaceChannel swaps the flow mapping of the skeleton's channel (line 3).
func (s cfgString) replaceChannel(ch string) cfgString {
	return cfgString(strings.Replace(string(s), `{id: a, base_url: "http://127.0.0.1:1/v1"}`, ch, 1))
}

// policyOf parses a config with a global policy block and one model policy
// block (flow mappings, "" for none) and returns the model's policy.
func policyOf(t *testing.T, global, model string) Policy {
	t.Helper()
	y := "auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - name: m\n    chain: [{channel: a}]\n"
	if model != "" {
		y += "    policy: " + model + "\n"
	}
	if global != "" {
		y += "policy: " + global + "\n"
	}
	return mustParse(t, y, env()).Model("m").Policy
}

// Precedence of policy keys (doc.go, "Precedence"): defaults < global
// profile < global explicit < model profile < model explicit, where a
// profile only governs header_timeout, stream_gate, stream_idle_timeout and
// chain_deadline.
func TestPolicyPrecedence(t *testing.T) {
	def, chat := DefaultPolicy(ProfileDefault), DefaultPolicy(ProfileChat)
	with := func(p Policy, f func(*Policy)) Policy { f(&p); return p }
	tests := []struct {
		name          string
		why           string
		global, model string
		want          Policy
	}{
		{"nothing set", "the built-in defaults are the contract of DESIGN.md §2",
			"", "", def},
		{"global chat", "the chat preset is the interactive SLO",
			"{profile: chat}", "", chat},
		{"global explicit beats global profile", "any key set explicitly wins over its profile",
			"{profile: chat, header_timeout: 20s}", "",
			with(chat, func(p *Policy) { p.HeaderTimeout = 20 * time.Second })},
		{"model profile beats global explicit", "the model asked for the preset by name",
			"{header_timeout: 20s, chain_deadline: 3s}", "{profile: chat}", chat},
		{"model explicit beats model profile", "explicit wins at the same level",
			"", "{profile: chat, header_timeout: 30s}",
			with(chat, func(p *Policy) { p.HeaderTimeout = 30 * time.Second })},
		{"model default profile undoes global chat", "both presets govern the same keys",
			"{profile: chat}", "{profile: default}", def},
		{"model explicit under global chat", "a model key overrides only that key",
			"{profile: chat}", "{header_timeout: 60s}",
			with(chat, func(p *Policy) { p.HeaderTimeout = 60 * time.Second })},
		{"ungoverned global keys survive a model profile", "profiles do not touch mid_stream, retry_after_max, degraded_reply",
			"{mid_stream: resume, retry_after_max: 9s, degraded_reply: {mode: message}}", "{profile: chat}",
			with(chat, func(p *Policy) {
				p.MidStream, p.RetryAfterMax, p.DegradedMode = MidStreamResume, 9*time.Second, DegradedMessage
			})},
		{"model overrides nested keys one by one", "stream_gate.timeout alone keeps on_timeout from below",
			"{profile: chat}", "{stream_gate: {timeout: 15s}, degraded_reply: {mode: message, message: busy}}",
			with(chat, func(p *Policy) {
				p.GateTimeout, p.DegradedMode, p.DegradedMessage = 15*time.Second, DegradedMessage, "busy"
			})},
		{"explicit zero is a value", "chain_deadline: 0s turns the chat deadline off",
			"{profile: chat, chain_deadline: 0s, stream_idle_timeout: 0}", "",
			with(chat, func(p *Policy) { p.ChainDeadline, p.StreamIdleTimeout = 0, 0 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policyOf(t, tt.global, tt.model); got != tt.want {
				t.Errorf("%s\ngot  %+v\nwant %+v", tt.why, got, tt.want)
			}
		})
	}
}

// The chat preset values are spelled out once here, independently of
// DefaultPolicy, so a change to the preset is a visible contract change.
func TestProfilePresets(t *testing.T) {
	chat := DefaultPolicy(ProfileChat)
	want := Policy{
		Profile: ProfileChat, RetryAfterMax: 5 * time.Second,
		HeaderTimeout: 8 * time.Second, GateTimeout: 8 * time.Second, GateOnTimeout: OnTimeoutFailover,
		StreamIdleTimeout: 30 * time.Second, ChainDeadline: 12 * time.Second,
		MidStream: MidStreamError, DegradedMode: DegradedError, DegradedMessage: DefaultDegradedMessage,
	}
	if chat != want {
		t.Errorf("chat preset\ngot  %+v\nwant %+v", chat, want)
	}
	def := DefaultPolicy(ProfileDefault)
	if def.HeaderTimeout != 240*time.Second || def.GateTimeout != 30*time.Second || def.GateOnTimeout != OnTimeoutCommit ||
		def.StreamIdleTimeout != 0 || def.ChainDeadline != 0 || def.Profile != ProfileDefault {
		t.Errorf("default preset = %+v", def)
	}
	if DefaultDegradedMessage != "The service is temporarily overloaded. Please retry shortly." {
		t.Errorf("degraded message changed: %q", DefaultDegradedMessage)
	}
}

// Breakers layer per key: defaults < global profile < policy.breaker <
// channel.breaker; the window default follows the final mode.
func TestBreakerResolution(t *testing.T) {
	count, rate := DefaultBreaker(BreakerCount), DefaultBreaker(BreakerRate)
	with := func(b Breaker, f func(*Breaker)) Breaker { f(&b); return b }
	tests := []struct {
		name            string
		why             string
		policy, channel string // flow mappings; "" for none
		want            Breaker
		wantRetries     int
	}{
		{"defaults", "count, 5m, 3 failures, 60s cooldown is the contract",
			"", "", count, 0},
		{"chat profile implies rate", "the interactive preset uses the error-rate breaker",
			"{profile: chat}", "", rate, 0},
		{"rate defaults", "rate: 60s window, 25%, at least 10 requests",
			"", "{mode: rate}", with(count, func(b *Breaker) { b.Mode, b.Window = BreakerRate, time.Minute }), 0},
		{"explicit mode beats profile", "explicit wins over the profile",
			"{profile: chat, breaker: {mode: count}}", "", count, 0},
		{"policy breaker applies to every channel", "global explicit keys layer over defaults",
			"{breaker: {failures: 5, cooldown: 30s}, retries: 2}", "",
			with(count, func(b *Breaker) { b.Failures, b.Cooldown = 5, 30*time.Second }), 2},
		{"channel breaker beats policy breaker", "the most specific level wins, key by key",
			"{breaker: {failures: 5, cooldown: 30s}, retries: 2}", "{failures: 7}",
			with(count, func(b *Breaker) { b.Failures, b.Cooldown = 7, 30*time.Second }), 2},
		{"explicit window survives a mode switch", "per-key layering: a window set explicitly stays",
			"{breaker: {window: 2m}}", "{mode: rate, threshold: 0.5, min_requests: 4}",
			with(rate, func(b *Breaker) { b.Window, b.Threshold, b.MinRequests = 2*time.Minute, 0.5, 4 }), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := "auth: {mode: none}\nchannels:\n  - id: a\n    base_url: http://h\n"
			if tt.channel != "" {
				y += "    breaker: " + tt.channel + "\n"
			}
			y += "models:\n  - {name: m, chain: [{channel: a}]}\n"
			if tt.policy != "" {
				y += "policy: " + tt.policy + "\n"
			}
			ch := mustParse(t, y, env()).Channel("a")
			if ch.Breaker != tt.want || ch.Retries != tt.wantRetries {
				t.Errorf("%s\ngot  %+v retries %d\nwant %+v retries %d", tt.why, ch.Breaker, ch.Retries, tt.want, tt.wantRetries)
			}
		})
	}
}

// Credentials come only from the environment, and a missing or empty one is
// a load error naming the variable — never a silently empty key.
func TestCredentialsFromEnv(t *testing.T) {
	const y = "auth: {mode: none}\nadmin: {token_env: ADMIN_TOKEN}\nchannels:\n  - {id: a, base_url: \"http://h\", api_key_env: UP_KEY}\n  - {id: local, base_url: \"http://h\"}\nmodels:\n  - {name: m, chain: [{channel: a}, {channel: local}]}\n"
	tests := []struct {
		name  string
		why   string
		env   []string
		lines []int
		subs  []string
	}{
		{"both set", "the values land in the Config",
			[]string{"UP_KEY", "sk-1", "ADMIN_TOKEN", "t0k"}, nil, nil},
		{"channel key missing", "the error names the variable and the channel",
			[]string{"ADMIN_TOKEN", "t0k"}, []int{4}, []string{`environment variable UP_KEY (api_key_env of channel "a") is not set`}},
		{"channel key empty", "an empty key would be sent as \"Bearer \"",
			[]string{"UP_KEY", "", "ADMIN_TOKEN", "t0k"}, []int{4}, []string{`environment variable UP_KEY (api_key_env of channel "a") is empty`}},
		{"admin token missing", "the admin listener must not open unprotected by accident",
			[]string{"UP_KEY", "sk-1"}, []int{2}, []string{`environment variable ADMIN_TOKEN (token_env in admin) is not set`}},
		{"both missing", "all mistakes at once",
			nil, []int{2, 4}, []string{"ADMIN_TOKEN", "UP_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(y), env(tt.env...))
			if tt.lines == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c.Channel("a").APIKey != "sk-1" || c.Channel("local").APIKey != "" || c.Admin.BearerToken != "t0k" {
					t.Errorf("credentials not resolved: %q %q %q", c.Channel("a").APIKey, c.Channel("local").APIKey, c.Admin.BearerToken)
				}
				return
			}
			l := errorList(t, err)
			if len(l) != len(tt.lines) {
				t.Fatalf("%s: got %v", tt.why, err)
			}
			for i := range l {
				if l[i].Line != tt.lines[i] || !strings.Contains(l[i].Msg, tt.subs[i]) {
					t.Errorf("%s: error %d = %v, want line %d containing %q", tt.why, i, l[i], tt.lines[i], tt.subs[i])
				}
			}
		})
	}
}

// Keys the lead added on top of the canonical file resolve as documented.
func TestExtraKeys(t *testing.T) {
	const y = `auth: {mode: none}
max_body_bytes: 1024
telemetry: {healthy_sample_ratio: 0.1, record_content: false, failover_log_size: 5, path_header: false, trust_inbound_trace: false}
policy: {retries: 1}
channels:
  - {id: a, base_url: "http://h/v1/", prefill: true, retries: 3}
  - {id: b, base_url: "https://h"}
  - {id: c, base_url: "https://h"}
models:
  - name: m
    operations: [chat, embeddings]
    fallback_models: [n]
    context_fallback: n
    chain:
      - {channel: a, upstream_model: up-m, price: {input: 2, output: 2}, prefill: false}
      - {channel: b, price: {input: 1, output: 1}}
      - {channel: c, price: {input: 3}}
  - name: n
    chain: [{channel: b}]
`
	c := mustParse(t, y, env())
	if want := (Telemetry{HealthySampleRatio: 0.1, FailoverLogSize: 5, TraceRingTraces: DefaultTraceRingTraces,
		TraceRingBytes: DefaultTraceRingBytes}); c.MaxBodyBytes != 1024 || c.Telemetry != want {
		t.Errorf("top level = %d %+v", c.MaxBodyBytes, c.Telemetry)
	}
	a := c.Channel("a")
	if a.BaseURL != "http://h/v1" || a.Retries != 3 || c.Channel("b").Retries != 1 {
		t.Errorf("channel a = %+v (trailing slash trimmed, retries 3), b.Retries = %d (from policy)", a, c.Channel("b").Retries)
	}
	m := c.Model("m")
	var got []string
	for _, e := range m.Chain {
		got = append(got, fmt.Sprintf("%s/%s/%v/%v", e.Channel.ID, e.UpstreamModel, e.Price.Total(), e.Prefill))
	}
	// Sorted by total price: b (2), c (3), a (4). upstream_model defaults to
	// the public name; the entry's prefill:false overrides the channel's.
	if want := "b/m/2/false c/m/3/false a/up-m/4/false"; strings.Join(got, " ") != want {
		t.Errorf("chain = %v, want %v", got, want)
	}
	if strings.Join(m.Operations, ",") != "chat,embeddings" || strings.Join(m.FallbackModels, ",") != "n" || m.ContextFallback != "n" {
		t.Errorf("model m = %+v", m)
	}
	if ops := c.Model("n").Operations; len(ops) != 1 || ops[0] != OpChat {
		t.Errorf("default operations = %v", ops)
	}
}

// A minimal file gets every documented default.
func TestDefaults(t *testing.T) {
	c := mustParse(t, string(skeleton("", "", "")), env())
	if c.Listen != DefaultListen || c.AdminListen != DefaultAdminListen || c.MaxBodyBytes != 10<<20 || c.Auth.Mode != AuthNone {
		t.Errorf("defaults = %q %q %d %q", c.Listen, c.AdminListen, c.MaxBodyBytes, c.Auth.Mode)
	}
	if ch := c.Channel("a"); ch.Provider != ProviderOpenAI || ch.Breaker != DefaultBreaker(BreakerCount) {
		t.Errorf("channel defaults = %+v", ch)
	}
	if m := c.Model("m"); m.Policy != DefaultPolicy(ProfileDefault) || m.Chain[0].UpstreamModel != "m" {
		t.Errorf("model defaults = %+v", m)
	}
}

// Mistakes are collected, not just the first: independent mistakes in
// different sections all show up, sorted by line.
func TestErrorListSortedAndComplete(t *testing.T) {
	y := skeleton(", retries: x", ", price: {input: -2}", "region: 3\nlisten: nope\n")
	_, err := Parse([]byte(y), env())
	l := errorList(t, err)
	var lines []int
	for _, e := range l {
		lines = append(lines, e.Line)
	}
	if fmt.Sprint(lines) != "[3 6 7 8]" {
		t.Errorf("lines = %v, want [3 6 7 8]:\n%v", lines, err)
	}
	if n := strings.Count(err.Error(), "\n"); n != 3 || !strings.HasPrefix(err.Error(), "line 3: ") {
		t.Errorf("Error() must be one mistake per line, sorted:\n%s", err)
	}
	unsorted := ErrorList{{Line: 9, Msg: "b"}, {Line: 2, Msg: "a"}}
	if unsorted.Error() != "line 2: a\nline 9: b" {
		t.Errorf("ErrorList.Error() = %q", unsorted.Error())
	}
}

// Load reads a file with the process environment; an unreadable path is a
// plain error, not an ErrorList.
func TestLoad(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
	c, err := Load(filepath.Join(repoTestdata, "canonical.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Channel("openai-eu").APIKey != "sk-from-env" {
		t.Error("Load must read credentials with os.LookupEnv")
	}
	if want := filepath.Join(repoTestdata, "hopgate.db"); c.Store.Path != want {
		t.Errorf("store path %q: Load resolves it next to the config (%s)", c.Store.Path, want)
	}
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	var l ErrorList
	if err == nil || errors.As(err, &l) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// Other packages build Configs in code; lookups must work without Parse.
func TestLookupWithoutParse(t *testing.T) {
	ch := &Channel{ID: "a"}
	m := &Model{Name: "m"}
	c := &Config{Channels: []*Channel{ch}, Models: []*Model{m}}
	if c.Channel("a") != ch || c.Model("m") != m || c.Channel("b") != nil || c.Model("n") != nil {
		t.Error("fallback scan broken")
	}
}

// record_content: true is refused with its line until content recording
// exists: a key that silently does nothing would mislead operators.
func TestRecordContentRefused(t *testing.T) {
	_, err := Parse([]byte("auth: {mode: none}\ntelemetry: {record_content: true}\nchannels:\n  - {id: a, base_url: \"http://h\"}\nmodels:\n  - {name: m, chain: [{channel: a}]}\n"), func(string) (string, bool) { return "", false })
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 1 || list[0].Line != 2 || !strings.Contains(list[0].Msg, "record_content") {
		t.Fatalf("got %v", err)
	}
}

// The keys of the on-call pages (DESIGN.md §10): trace_url is a template
// kept as written (a Grafana Explore link has braces and quotes of its
// own), the ring bounds and the status switch resolve with their defaults.
func TestPagesKeys(t *testing.T) {
	c := mustParse(t, string(skeleton("", "", "")), env())
	if c.Telemetry.TraceURL != "" || !c.Status.Enabled || c.Telemetry.TraceRingTraces != DefaultTraceRingTraces ||
		c.Telemetry.TraceRingBytes != DefaultTraceRingBytes {
		t.Fatalf("defaults: %+v %+v", c.Telemetry, c.Status)
	}
	explore := `http://grafana:3000/explore?left={"datasource":"tempo","queries":[{"query":"{trace_id}"}]}`
	y := string(skeleton("", "", "status: {enabled: false}\ntelemetry:\n  trace_url: '"+explore+"'\n  trace_ring: {max_traces: 50, max_bytes: 1048576}\n"))
	c = mustParse(t, y, env())
	if c.Telemetry.TraceURL != explore || c.Status.Enabled || c.Telemetry.TraceRingTraces != 50 || c.Telemetry.TraceRingBytes != 1<<20 {
		t.Fatalf("set: %+v %+v", c.Telemetry, c.Status)
	}
}

// early_warning resolves like breaker: built-in defaults, then the global
// policy, then the channel, key by key; it is off unless enabled.
func TestEarlyWarningResolution(t *testing.T) {
	def := DefaultEarlyWarning()
	with := func(f func(*EarlyWarning)) EarlyWarning { e := def; f(&e); return e }
	tests := []struct {
		name, why       string
		policy, channel string // flow mappings; "" for none
		want            EarlyWarning
	}{
		{"off by default", "early warning is opt-in (DESIGN.md §12)", "", "", def},
		{"global enables every channel", "policy.early_warning is the default of channels[].early_warning",
			"{early_warning: {enabled: true, cooldown: 5m}}", "",
			with(func(e *EarlyWarning) { e.Enabled, e.Cooldown = true, 5*time.Minute })},
		{"channel beats policy key by key", "the most specific level wins; other keys stay",
			"{early_warning: {enabled: true, window: 1m, latency_multiple: 4}}", "{enabled: false, min_samples: 50}",
			with(func(e *EarlyWarning) { e.Window, e.LatencyMultiple, e.MinSamples = time.Minute, 4, 50 })},
		{"every key", "each key reaches the resolved policy",
			"", "{enabled: true, baseline: 20m, window: 45s, latency_multiple: 2.5, for: 0s, error_fraction: 0.3, min_samples: 7, cooldown: 90s, probation: 0s, ratelimit_utilization: 0.8}",
			EarlyWarning{Enabled: true, Baseline: 20 * time.Minute, Window: 45 * time.Second, LatencyMultiple: 2.5,
				ErrorFraction: 0.3, MinSamples: 7, Cooldown: 90 * time.Second, RateLimitUtilization: 0.8}},
		{"ratelimit off", "ratelimit_utilization 0 turns the window signal off (DESIGN §16)",
			"{early_warning: {enabled: true, ratelimit_utilization: 0}}", "",
			with(func(e *EarlyWarning) { e.Enabled, e.RateLimitUtilization = true, 0 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			y := "auth: {mode: none}\nchannels:\n  - id: a\n    base_url: http://h\n"
			if tt.channel != "" {
				y += "    early_warning: " + tt.channel + "\n"
			}
			y += "models:\n  - {name: m, chain: [{channel: a}]}\n"
			if tt.policy != "" {
				y += "policy: " + tt.policy + "\n"
			}
			if got := mustParse(t, y, env()).Channel("a").EarlyWarning; got != tt.want {
				t.Errorf("%s\ngot  %+v\nwant %+v", tt.why, got, tt.want)
			}
		})
	}
}

// Early-warning mistakes are reported at their line like any other.
func TestEarlyWarningErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml cfgString
		line int
		sub  string
	}{
		{"unknown key", skeleton(", early_warning: {enabeld: true}", "", ""), 3, `unknown key "enabeld" in early_warning of channel "a"`},
		{"multiple of 1 demotes everything", skeleton(", early_warning: {latency_multiple: 1}", "", ""), 3,
			`latency_multiple in early_warning of channel "a" must be in (1, 100], not 1`},
		{"error fraction above 1", skeleton("", "", "policy: {early_warning: {error_fraction: 1.5}}\n"), 7,
			`error_fraction in early_warning in policy must be in (0, 1], not 1.5`},
		{"ratelimit utilization above 1", skeleton("", "", "policy: {early_warning: {ratelimit_utilization: 90}}\n"), 7,
			`ratelimit_utilization in early_warning in policy must be in [0, 1] (0: off), not 90`},
		{"zero cooldown", skeleton(", early_warning: {cooldown: 0s}", "", ""), 3, `cooldown in early_warning of channel "a" must be greater than 0`},
		{"window too long", skeleton(", early_warning: {window: 2h}", "", ""), 3, `window in early_warning of channel "a" must be at most 60m`},
		{"baseline shorter than twice the window", skeleton(", early_warning: {window: 1m, baseline: 90s}", "", ""), 3,
			`early_warning of channel "a": baseline (90s) must be at least twice the window (60s)`},
		{"global baseline too short", skeleton("", "", "policy:\n  early_warning:\n    baseline: 30s\n"), 9,
			`early_warning in policy: baseline (30s) must be at least twice the window (30s)`},
		{"not in a model policy", skeleton("", "", "    policy: {early_warning: {enabled: true}}\n"), 7,
			`policy of model "m": early_warning is per channel; set it in policy or channels[].early_warning`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantOneError(t, string(tt.yaml), env(), tt.line, tt.sub) })
	}
}

// `hopgate check` lists the channels with early warning on, and only them.
func TestEarlyWarningInCheck(t *testing.T) {
	c := mustParse(t, string(skeleton(", early_warning: {enabled: true}", "", "")), env())
	var b strings.Builder
	if err := c.WriteChains(&b); err != nil {
		t.Fatal(err)
	}
	want := "early warning (demote, never skip):\n  a  baseline=10m window=30s latency_multiple=3 for=40s error_fraction=0.5 min_samples=5 cooldown=120s probation=120s ratelimit_utilization=0.95\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("check output lacks %q:\n%s", want, b.String())
	}
}

// A Vertex channel without base_url gets its location's endpoint, as the
// Anthropic SDK's vertex package maps it: "global-aiplatform…" and
// "us-aiplatform…" do not exist.
func TestVertexDefaultBaseURL(t *testing.T) {
	for loc, want := range map[string]string{
		"us-east5": "https://us-east5-aiplatform.googleapis.com",
		"global":   "https://aiplatform.googleapis.com",
		"us":       "https://aiplatform.us.rep.googleapis.com",
		"eu":       "https://aiplatform.eu.rep.googleapis.com",
	} {
		c := mustParse(t, "auth: {mode: none}\nchannels:\n  - {id: a, provider: vertex, project: p, region: "+loc+"}\nmodels:\n  - name: m\n    max_tokens_default: 64\n    chain: [{channel: a}]\n", env())
		if got := c.Channels[0].BaseURL; got != want {
			t.Errorf("location %s: base_url %q, want %q", loc, got, want)
		}
	}
}

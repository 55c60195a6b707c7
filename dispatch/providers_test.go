package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2/google"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// familiesConfig has one channel per provider family, each its own fake
// provider speaking that family's API, and models over them: m-ID serves
// from channel ID alone; claude walks anthropic → bedrock → vertex; gpt
// walks azure → openai; cross-a is anthropic then openai, cross-o openai
// then anthropic.
const familiesConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: oai, provider: openai, base_url: "{{url:oai}}", api_key_env: CHANNEL_KEY, region: r-1}
  - {id: az, provider: azure, base_url: "{{base:az}}", api_version: "2024-10-21", api_key_env: CHANNEL_KEY, region: r-2}
  - {id: an, provider: anthropic, base_url: "{{base:an}}", api_key_env: CHANNEL_KEY, region: r-3}
  - {id: br, provider: bedrock, base_url: "{{base:br}}", region: us-east-1}
  - {id: vx, provider: vertex, base_url: "{{base:vx}}", project: fake-project, region: us-east5}
models:
  - {name: m-oai, chain: [{channel: oai, upstream_model: MODEL}]}
  - {name: m-az, chain: [{channel: az, upstream_model: MODEL}]}
  - {name: m-an, max_tokens_default: 1024, chain: [{channel: an, upstream_model: MODEL}]}
  - {name: m-br, max_tokens_default: 1024, chain: [{channel: br, upstream_model: MODEL}]}
  - {name: m-vx, max_tokens_default: 1024, chain: [{channel: vx, upstream_model: MODEL}]}
  - name: claude
    max_tokens_default: 1024
    chain:
      - {channel: an, upstream_model: CLAUDE_AN, price: {input: 1, output: 1}}
      - {channel: br, upstream_model: CLAUDE_BR, price: {input: 2, output: 2}}
      - {channel: vx, upstream_model: CLAUDE_VX, price: {input: 3, output: 3}}
  - name: gpt
    chain:
      - {channel: az, upstream_model: GPT_AZ, price: {input: 1, output: 1}}
      - {channel: oai, upstream_model: GPT_OAI, price: {input: 2, output: 2}}
  - name: cross-a
    max_tokens_default: 1024
    chain:
      - {channel: an, upstream_model: CROSS_AN, price: {input: 1, output: 1}}
      - {channel: oai, upstream_model: CROSS_OAI, price: {input: 2, output: 2}}
  - name: cross-o
    max_tokens_default: 1024
    chain:
      - {channel: oai, upstream_model: CROSS_OAI, price: {input: 1, output: 1}}
      - {channel: an, upstream_model: CROSS_AN, price: {input: 2, output: 2}}
  - name: small
    max_tokens_default: 1024
    context_fallback: big
    chain: [{channel: an, upstream_model: "s|context-length"}]
  - {name: big, chain: [{channel: oai, upstream_model: b}]}
`

var familyChannels = []string{"oai", "az", "an", "br", "vx"}

// genAIName is each test channel's gen_ai.provider.name.
var genAIName = map[string]string{
	"oai": provider.GenAIOpenAI, "az": provider.GenAIAzure, "an": provider.GenAIAnthropic,
	"br": provider.GenAIBedrock, "vx": provider.GenAIVertex,
}

// familiesOptions gives the gateway the fakes' cloud credentials: static
// AWS keys (as the default chain would find in the environment) and a
// Google service-account key whose token_uri is the vertex fake's token
// endpoint (as GOOGLE_APPLICATION_CREDENTIALS would name).
func familiesOptions(secret string) gwtest.Options {
	return gwtest.Options{Providers: func(f *gwtest.Fakes) provider.Options {
		return provider.Options{
			AWSConfig: func(context.Context, string) (aws.Config, error) {
				return aws.Config{Region: upstream.DefaultAWSRegion,
					Credentials: credentials.NewStaticCredentialsProvider(upstream.DefaultAWSAccessKeyID, secret, "")}, nil
			},
			GoogleCredentials: func(ctx context.Context, scopes ...string) (*google.Credentials, error) {
				sa, err := f.Ups["vx"].ServiceAccountJSON(f.Roots["vx"])
				if err != nil {
					return nil, err
				}
				return google.CredentialsFromJSON(ctx, sa, scopes...)
			},
		}
	}}
}

// newFamilies starts the five fakes and a gateway in front of them; each
// placeholder model name (MODEL, CLAUDE_AN, …) is replaced from models.
func newFamilies(t *testing.T, models map[string]string) *gwtest.Gateway {
	t.Helper()
	return newFamiliesWith(t, familiesOptions(upstream.DefaultAWSSecretAccessKey), models)
}

func newFamiliesWith(t *testing.T, o gwtest.Options, models map[string]string) *gwtest.Gateway {
	t.Helper()
	cfg := familiesConfig
	for k, v := range map[string]string{"MODEL": "m", "CLAUDE_AN": "claude", "CLAUDE_BR": "claude", "CLAUDE_VX": "claude",
		"GPT_AZ": "gpt", "GPT_OAI": "gpt", "CROSS_AN": "x", "CROSS_OAI": "x"} {
		if m, ok := models[k]; ok {
			v = m
		}
		cfg = strings.ReplaceAll(cfg, k, `"`+v+`"`)
	}
	return gwtest.NewWith(t, o, cfg, familyChannels...)
}

// send posts body to path (a chat completion or an Anthropic message).
func send(t *testing.T, h *gwtest.Gateway, path, body string, hdr map[string]string) gwtest.Reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return h.Do(req)
}

// hopProviders are the gen_ai.provider.name of the trace's hops, in order.
func hopProviders(t *testing.T, h *gwtest.Gateway, r gwtest.Reply) []string {
	t.Helper()
	return spanValues(h.Trace(r.Header.Get("X-Request-Id")), telemetry.AttrGenAIProvider,
		func(s *tracetest.SpanStub) bool { return s.SpanKind == trace.SpanKindClient })
}

func chatBody(model string, stream bool, extra string) string {
	b := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]`
	if stream {
		b += `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return b + extra + "}"
}

func messagesBody(model string, stream bool, extra string) string {
	b := `{"model":"` + model + `","max_tokens":256,"messages":[{"role":"user","content":"hi"}]`
	if stream {
		b += `,"stream":true`
	}
	return b + extra + "}"
}

// completionText is the assistant text of a chat.completion.
func completionText(t *testing.T, body string) (string, int) {
	t.Helper()
	var c struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("not a chat.completion: %v %s", err, body)
	}
	return c.Choices[0].Message.Content, c.Usage.CompletionTokens
}

// messageText is the text of an Anthropic message.
func messageText(t *testing.T, body string) (string, int) {
	t.Helper()
	var m struct {
		Type    string
		Content []struct{ Type, Text string }
		Usage   struct {
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil || m.Type != "message" {
		t.Fatalf("not an Anthropic message: %v %s", err, body)
	}
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	return b.String(), m.Usage.OutputTokens
}

// messagesStreamText concatenates the text deltas of an Anthropic stream
// and reports whether it ended with message_stop.
func messagesStreamText(body string) (string, bool) {
	var b strings.Builder
	stopped := false
	for _, d := range gwtest.SSEData(body) {
		var ev struct {
			Type  string
			Delta struct{ Type, Text string }
		}
		if json.Unmarshal([]byte(d), &ev) != nil {
			continue
		}
		if ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta" {
			b.WriteString(ev.Delta.Text)
		}
		stopped = stopped || ev.Type == "message_stop"
	}
	return b.String(), stopped
}

// TestEveryFamilyServesBothClients: each family's channel answers an
// OpenAI chat client and an Anthropic Messages client, streamed and not,
// with the answer the provider gave, usage, the provider's name on the
// hop span, and a complete stream ([DONE] / message_stop).
func TestEveryFamilyServesBothClients(t *testing.T) {
	want := upstream.Answer(upstream.DefaultTokens)
	h := newFamilies(t, nil)
	for _, ch := range familyChannels {
		model := "m-" + ch
		t.Run(ch+"/openai client", func(t *testing.T) {
			r := send(t, h, "/v1/chat/completions", chatBody(model, false, ""), nil)
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if text, usage := completionText(t, r.Body); text != want || usage != upstream.DefaultTokens {
				t.Fatalf("text %q usage %v", text, usage)
			}
			if p := hopProviders(t, h, r); len(p) != 1 || p[0] != genAIName[ch] {
				t.Fatalf("hop providers %v, want %s", p, genAIName[ch])
			}
			r = send(t, h, "/v1/chat/completions", chatBody(model, true, ""), nil)
			if r.Status != 200 || gwtest.StreamText(r.Body) != want || !strings.HasSuffix(r.Body, "data: [DONE]\n\n") {
				t.Fatalf("stream: status %d text %q\n%s", r.Status, gwtest.StreamText(r.Body), r.Body)
			}
			if !strings.Contains(r.Body, `"completion_tokens":8`) {
				t.Fatalf("stream without the usage the client asked for:\n%s", r.Body)
			}
		})
		t.Run(ch+"/anthropic client", func(t *testing.T) {
			r := send(t, h, "/v1/messages", messagesBody(model, false, ""), map[string]string{"Anthropic-Version": "2023-06-01"})
			if r.Status != 200 {
				t.Fatalf("status %d: %s", r.Status, r.Body)
			}
			if text, usage := messageText(t, r.Body); text != want || usage != upstream.DefaultTokens {
				t.Fatalf("text %q usage %v", text, usage)
			}
			r = send(t, h, "/v1/messages", messagesBody(model, true, ""), nil)
			if text, stopped := messagesStreamText(r.Body); r.Status != 200 || text != want || !stopped {
				t.Fatalf("stream: status %d text %q stopped %v\n%s", r.Status, text, stopped, r.Body)
			}
			if !strings.Contains(r.Body, "event: message_start") || !strings.Contains(r.Body, `"usage":{`) {
				t.Fatalf("an Anthropic stream starts with message_start and its usage:\n%s", r.Body)
			}
		})
	}
}

// TestClaudeOnThreeClouds: the natural Claude chain fails over from
// Anthropic's API (529 overloaded) to Bedrock (429 ThrottlingException) to
// Vertex, streamed and not; the trace shows three hops with each cloud's
// provider name, the path each family's failure.
func TestClaudeOnThreeClouds(t *testing.T) {
	for _, stream := range []bool{false, true} {
		h := newFamilies(t, map[string]string{"CLAUDE_AN": "claude|529", "CLAUDE_BR": "claude|429"})
		r := send(t, h, "/v1/chat/completions", chatBody("claude", stream, ""), nil)
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "an:529 -> br:429 -> vx:ok" {
			t.Fatalf("stream=%v: status %d path %q: %s", stream, r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		got := hopProviders(t, h, r)
		if strings.Join(got, ",") != "anthropic,aws.bedrock,gcp.vertex_ai" {
			t.Fatalf("stream=%v: hop providers %v", stream, got)
		}
		want := upstream.Answer(upstream.DefaultTokens)
		if stream && gwtest.StreamText(r.Body) != want {
			t.Fatalf("stream text %q", gwtest.StreamText(r.Body))
		}
	}
}

// TestFailuresCrossFamilies: each family's own failures fail over to a
// channel of the other family, and the trace shows both providers: an
// Anthropic 529, an event: error after message_start (discarded before
// commit), an OpenAI 503 and an in-stream error, a Bedrock exception event.
func TestFailuresCrossFamilies(t *testing.T) {
	cases := []struct {
		name, model, path string
		models            map[string]string
		stream            bool
		providers         string
	}{
		{"anthropic 529", "cross-a", "an:529 -> oai:ok", map[string]string{"CROSS_AN": "x|529"}, false, "anthropic,openai"},
		{"anthropic event error", "cross-a", "an:stream_error -> oai:ok", map[string]string{"CROSS_AN": "x|stream-error-event"}, true, "anthropic,openai"},
		{"openai 503", "cross-o", "oai:503 -> an:ok", map[string]string{"CROSS_OAI": "x|503"}, false, "openai,anthropic"},
		{"openai stream error", "cross-o", "oai:stream_error -> an:ok", map[string]string{"CROSS_OAI": "x|stream-error"}, true, "openai,anthropic"},
		{"bedrock exception event", "claude", "an:503 -> br:stream_error -> vx:ok",
			map[string]string{"CLAUDE_AN": "claude|503", "CLAUDE_BR": "claude|stream-error|error=throttlingException"}, true, "anthropic,aws.bedrock,gcp.vertex_ai"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFamilies(t, tc.models)
			for _, client := range []string{"openai", "anthropic"} {
				var r gwtest.Reply
				if client == "openai" {
					r = send(t, h, "/v1/chat/completions", chatBody(tc.model, tc.stream, ""), nil)
				} else {
					r = send(t, h, "/v1/messages", messagesBody(tc.model, tc.stream, ""), nil)
				}
				if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != tc.path {
					t.Fatalf("%s client: status %d path %q, want %q: %s", client, r.Status, r.Header.Get("X-Hopgate-Path"), tc.path, r.Body)
				}
				if got := strings.Join(hopProviders(t, h, r), ","); got != tc.providers {
					t.Fatalf("%s client: hop providers %s, want %s", client, got, tc.providers)
				}
			}
		})
	}
}

// hopErrors are the exception messages recorded on the trace's hop spans.
func hopErrors(t *testing.T, h *gwtest.Gateway, r gwtest.Reply) []string {
	t.Helper()
	var out []string
	for _, s := range h.Trace(r.Header.Get("X-Request-Id")) {
		if s.SpanKind != trace.SpanKindClient {
			continue
		}
		for _, e := range s.Events {
			for _, kv := range e.Attributes {
				if string(kv.Key) == "exception.message" {
					out = append(out, kv.Value.AsString())
				}
			}
		}
	}
	return out
}

// TestCloudCredentialFailuresSaySo: a SigV4 signature Bedrock refuses and a
// Google token Vertex finds expired are retryable hop failures whose span
// names the provider's reason, and the chain moves on.
func TestCloudCredentialFailuresSaySo(t *testing.T) {
	t.Run("wrong SigV4 signature", func(t *testing.T) {
		h := newFamiliesWith(t, familiesOptions("not-the-secret"), map[string]string{"CLAUDE_AN": "claude|503"})
		r := send(t, h, "/v1/chat/completions", chatBody("claude", false, ""), nil)
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "an:503 -> br:403 -> vx:ok" {
			t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		if errs := strings.Join(hopErrors(t, h, r), "\n"); !strings.Contains(errs, "InvalidSignatureException") {
			t.Fatalf("the hop's error does not say the signature was refused: %q", errs)
		}
	})
	t.Run("expired token", func(t *testing.T) {
		h := newFamilies(t, map[string]string{"CLAUDE_AN": "claude|503", "CLAUDE_BR": "claude|503"})
		if r := send(t, h, "/v1/chat/completions", chatBody("m-vx", false, ""), nil); r.Status != 200 {
			t.Fatalf("first request: %d %s", r.Status, r.Body)
		}
		// The token the gateway holds expires on the provider's clock
		// (a token revoked or a clock skew looks the same to the gateway).
		h.UpClock.Advance(2 * upstream.DefaultGoogleTokenLifetime)
		r := send(t, h, "/v1/chat/completions", chatBody("m-vx", false, ""), nil)
		if r.Status == 200 || r.Header.Get("X-Hopgate-Path") != "vx:401" {
			t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		if errs := strings.Join(hopErrors(t, h, r), "\n"); !strings.Contains(errs, "UNAUTHENTICATED") {
			t.Fatalf("the hop's error does not say the token was refused: %q", errs)
		}
	})
	t.Run("token refresh fails", func(t *testing.T) {
		h := newFamilies(t, map[string]string{"CLAUDE_AN": "claude|503"})
		h.Ups["vx"].SetFault(upstream.TokenModel, "503")
		r := send(t, h, "/v1/chat/completions", chatBody("claude", false, ""), nil)
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "an:503 -> br:ok" {
			t.Fatalf("status %d path %q", r.Status, r.Header.Get("X-Hopgate-Path"))
		}
		r = send(t, h, "/v1/chat/completions", chatBody("m-vx", false, ""), nil)
		if r.Status == 200 || r.Header.Get("X-Hopgate-Path") != "vx:credential_error" {
			t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
		if errs := strings.Join(hopErrors(t, h, r), "\n"); !strings.Contains(errs, "Google OAuth token refresh") {
			t.Fatalf("the hop's error does not say the token refresh failed: %q", errs)
		}
	})
}

// TestAzureAnswers: Azure's content filter is final (the client gets
// Azure's 400, no other channel is asked, the breaker counts nothing);
// its 429 with retry-after-ms keeps the channel out; the content_filter
// finish reason and filter annotations pass through untouched.
func TestAzureAnswers(t *testing.T) {
	h := newFamilies(t, map[string]string{"GPT_AZ": "gpt|content-filter"})
	for i := 0; i < 4; i++ {
		r := send(t, h, "/v1/chat/completions", chatBody("gpt", false, ""), nil)
		if r.Status != 400 || !strings.Contains(r.Body, "ResponsibleAIPolicyViolation") || r.Header.Get("X-Hopgate-Path") != "az:400" {
			t.Fatalf("request %d: status %d path %q: %s", i, r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
	}
	if n := len(h.Ups["oai"].Log()); n != 0 {
		t.Fatalf("a content-filter refusal reached another channel %d times", n)
	}
	h = newFamilies(t, map[string]string{"GPT_AZ": "gpt|429:ra=7-once"})
	if r := send(t, h, "/v1/chat/completions", chatBody("gpt", false, ""), nil); r.Header.Get("X-Hopgate-Path") != "az:429 -> oai:ok" {
		t.Fatalf("429: path %q", r.Header.Get("X-Hopgate-Path"))
	}
	if r := send(t, h, "/v1/chat/completions", chatBody("gpt", false, ""), nil); r.Header.Get("X-Hopgate-Path") != "az:open -> oai:ok" {
		t.Fatalf("within Azure's retry-after: path %q", r.Header.Get("X-Hopgate-Path"))
	}
	h = newFamilies(t, map[string]string{"GPT_AZ": "gpt|stop=content_filter"})
	r := send(t, h, "/v1/chat/completions", chatBody("gpt", false, ""), nil)
	if r.Status != 200 || !strings.Contains(r.Body, `"finish_reason":"content_filter"`) || !strings.Contains(r.Body, "prompt_filter_results") {
		t.Fatalf("content_filter finish: %d %s", r.Status, r.Body)
	}
}

// TestContextFallbackAcrossFamilies: Anthropic's "prompt is too long" is
// context_length_exceeded, so the model's context_fallback applies even
// when it lives on another family; the answer says which model served.
func TestContextFallbackAcrossFamilies(t *testing.T) {
	h := newFamilies(t, nil)
	r := send(t, h, "/v1/chat/completions", chatBody("small", false, ""), nil)
	if r.Status != 200 || r.Header.Get("X-Hopgate-Model") != "big" || r.Header.Get("X-Hopgate-Path") != "an:400 -> oai:ok" {
		t.Fatalf("status %d model %q path %q: %s", r.Status, r.Header.Get("X-Hopgate-Model"), r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	// Without a fallback the client gets the provider's refusal in its own
	// dialect: OpenAI's shape for an OpenAI client.
	r = send(t, h, "/v1/chat/completions", chatBody("m-an", false, ""), nil)
	if r.Status != 200 {
		t.Fatalf("healthy: %d", r.Status)
	}
	h.Ups["an"].SetFault("m", "context-length")
	r = send(t, h, "/v1/chat/completions", chatBody("m-an", false, ""), nil)
	var e struct {
		Error struct{ Code, Message string }
	}
	if r.Status != 400 || json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Code != "context_length_exceeded" || !strings.Contains(e.Error.Message, "prompt is too long") {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
}

// TestResumeAcrossFamilies: a stream cut on an OpenAI channel is continued
// on an Anthropic channel, by prefill (Anthropic's native assistant
// prefix) or by a verified replay; the client gets the whole answer once.
func TestResumeAcrossFamilies(t *testing.T) {
	want := upstream.Answer(60)
	for _, mode := range []string{"prefill", "replay"} {
		t.Run(mode, func(t *testing.T) {
			cfg := strings.ReplaceAll(familiesConfig, "CROSS_OAI", `"x|tokens=60|cut=40"`)
			cfg = strings.ReplaceAll(cfg, "CROSS_AN", `"x|tokens=60"`)
			cfg = strings.Replace(cfg, "  - name: cross-o\n    max_tokens_default: 1024\n", "  - name: cross-o\n    max_tokens_default: 1024\n    policy: {mid_stream: resume}\n", 1)
			if mode == "prefill" {
				cfg = strings.Replace(cfg, "region: r-3}", "region: r-3, prefill: true}", 1)
			}
			for k, v := range map[string]string{"MODEL": "m", "CLAUDE_AN": "c", "CLAUDE_BR": "c", "CLAUDE_VX": "c", "GPT_AZ": "g", "GPT_OAI": "g"} {
				cfg = strings.ReplaceAll(cfg, k, v)
			}
			h := gwtest.NewWith(t, familiesOptions(upstream.DefaultAWSSecretAccessKey), cfg, familyChannels...)
			r := send(t, h, "/v1/chat/completions", chatBody("cross-o", true, ""), nil)
			if got := gwtest.StreamText(r.Body); r.Status != 200 || got != want || !strings.HasSuffix(r.Body, "data: [DONE]\n\n") {
				t.Fatalf("status %d text %q\n%s", r.Status, got, r.Body)
			}
			if path, outcome := failoverPath(t, h); path != "oai:cut -> an:"+mode+"_ok" || outcome != "failover_ok" {
				t.Fatalf("path %q outcome %q", path, outcome)
			}
		})
	}
}

// bedrockQuota answers every request as Bedrock does when the account's
// quota is exhausted: 400 ServiceQuotaExceededException, named in
// X-Amzn-ErrorType, or (inBody) only as __type in the body.
func bedrockQuota(inBody bool) http.Handler {
	const msg = "Your request exceeds the service quota for your account. You can view your quotas at https://docs.aws.amazon.com/servicequotas/latest/userguide/gs-request-quota.html. You can resubmit your request later."
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := `{"message":"` + msg + `"}`
		if inBody {
			body = `{"__type":"com.amazon.bedrock#ServiceQuotaExceededException","message":"` + msg + `"}`
		} else {
			w.Header().Set("X-Amzn-Errortype", "ServiceQuotaExceededException:http://internal.amazon.com/coral/com.amazon.bedrock/")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, body)
	})
}

// bedrockErrorsConfig puts Bedrock channels answering each exception in
// front of a healthy OpenAI channel: bq and bt answer the quota exception
// (in the header, in the body), br is the Bedrock fake (its 400 is a
// ValidationException, its 424 a ModelErrorException).
const bedrockErrorsConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: br, provider: bedrock, base_url: "{{base:br}}", region: us-east-1}
  - {id: bq, provider: bedrock, base_url: "{{url:bq}}", region: us-east-1}
  - {id: bt, provider: bedrock, base_url: "{{url:bt}}", region: us-east-1}
  - {id: oai, provider: openai, base_url: "{{url:oai}}", api_key_env: CHANNEL_KEY}
models:
  - name: quota
    max_tokens_default: 1024
    chain: [{channel: bq, upstream_model: m, price: {input: 1, output: 1}}, {channel: oai, upstream_model: m, price: {input: 2, output: 2}}]
  - name: quota-type
    max_tokens_default: 1024
    chain: [{channel: bt, upstream_model: m, price: {input: 1, output: 1}}, {channel: oai, upstream_model: m, price: {input: 2, output: 2}}]
  - name: model-error
    max_tokens_default: 1024
    chain: [{channel: br, upstream_model: "m|424", price: {input: 1, output: 1}}, {channel: oai, upstream_model: m, price: {input: 2, output: 2}}]
  - name: invalid
    max_tokens_default: 1024
    chain: [{channel: br, upstream_model: "m|400", price: {input: 1, output: 1}}, {channel: oai, upstream_model: m, price: {input: 2, output: 2}}]
  - name: quota-only
    max_tokens_default: 1024
    chain: [{channel: bq, upstream_model: m}]
`

// TestBedrockExceptionsDecide: Bedrock's exception, not only its status,
// decides (DESIGN.md §3, §8). Its 400 ServiceQuotaExceededException (our
// account's quota) and 424 ModelErrorException ("try again") fail over to
// the next channel, and the hop span names the exception; a 400
// ValidationException is the client's: it comes back at once, no other
// channel is asked, the breaker counts nothing.
func TestBedrockExceptionsDecide(t *testing.T) {
	o := familiesOptions(upstream.DefaultAWSSecretAccessKey)
	o.Custom = map[string]http.Handler{"bq": bedrockQuota(false), "bt": bedrockQuota(true)}
	for _, client := range []string{"openai", "anthropic"} {
		post := func(h *gwtest.Gateway, model string) gwtest.Reply {
			if client == "openai" {
				return send(t, h, "/v1/chat/completions", chatBody(model, false, ""), nil)
			}
			return send(t, h, "/v1/messages", messagesBody(model, false, ""), nil)
		}
		for _, tc := range []struct{ model, path, exception string }{
			{"quota", "bq:400 -> oai:ok", "ServiceQuotaExceededException"},
			{"quota-type", "bt:400 -> oai:ok", "ServiceQuotaExceededException"},
			{"model-error", "br:424 -> oai:ok", "ModelErrorException"},
		} {
			t.Run(client+"/"+tc.model, func(t *testing.T) {
				h := gwtest.NewWith(t, o, bedrockErrorsConfig, "br", "oai")
				r := post(h, tc.model)
				if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != tc.path {
					t.Fatalf("status %d path %q, want 200 after %s: %s", r.Status, r.Header.Get("X-Hopgate-Path"), tc.path, r.Body)
				}
				if errs := strings.Join(hopErrors(t, h, r), "\n"); !strings.Contains(errs, tc.exception) {
					t.Fatalf("the hop's error does not name %s: %q", tc.exception, errs)
				}
			})
		}
		t.Run(client+"/validation", func(t *testing.T) {
			h := gwtest.NewWith(t, o, bedrockErrorsConfig, "br", "oai")
			for range 4 { // more than the breaker's 3 failures
				r := post(h, "invalid")
				if r.Status != 400 || r.Header.Get("X-Hopgate-Path") != "br:400" || !strings.Contains(r.Body, "Malformed input request") {
					t.Fatalf("status %d path %q, want Bedrock's 400 at once: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
				}
				// In the client's dialect: a Messages client reads an
				// Anthropic error, not Bedrock's {"message"}.
				if client == "anthropic" && !strings.HasPrefix(r.Body, `{"type":"error","error":{"type":"invalid_request_error","message":"Malformed input request`) {
					t.Fatalf("Bedrock's 400 reached a Messages client as %s", r.Body)
				}
			}
			if n := len(h.Ups["oai"].Log()); n != 0 {
				t.Fatalf("a ValidationException reached another channel %d times", n)
			}
			noBreakerFailures(t, h, "a ValidationException")
		})
	}
	// A quota on every channel is no reason to tell the client its request
	// is bad: all_channels_failed is a 502, not the upstream's 400.
	h := gwtest.NewWith(t, o, bedrockErrorsConfig, "br", "oai")
	r := send(t, h, "/v1/chat/completions", chatBody("quota-only", false, ""), nil)
	if r.Status != 502 || r.Header.Get("X-Hopgate-Path") != "bq:400" || !strings.Contains(r.Body, `"code":"all_channels_failed"`) {
		t.Fatalf("quota everywhere: status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
}

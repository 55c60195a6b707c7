package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
	"github.com/hopgate/hopgate/telemetry"
)

// stalledCredentialConfig: a Vertex and a Bedrock channel whose credential
// fetch never finishes, each first in a chain that would fail over to a
// healthy OpenAI channel; header_timeout (60s) is above chain_deadline
// (10s), and neither runs before the credential is there anyway.
const stalledCredentialConfig = `
region: test-1
auth: {mode: none}
channels:
  - {id: vx, provider: vertex, base_url: "{{base:vx}}", project: fake-project, region: us-east5}
  - {id: br, provider: bedrock, base_url: "{{base:br}}", region: us-east-1}
  - {id: oai, provider: openai, base_url: "{{url:oai}}", api_key_env: CHANNEL_KEY}
models:
  - name: on-vx
    max_tokens_default: 1024
    policy: {header_timeout: 60s, chain_deadline: 10s}
    chain:
      - {channel: vx, upstream_model: m, price: {input: 1, output: 1}}
      - {channel: oai, upstream_model: m, price: {input: 2, output: 2}}
  - name: on-br
    max_tokens_default: 1024
    policy: {header_timeout: 60s, chain_deadline: 10s}
    chain:
      - {channel: br, upstream_model: m, price: {input: 1, output: 1}}
      - {channel: oai, upstream_model: m, price: {input: 2, output: 2}}
`

// stalledCredentials starts stalledCredentialConfig's gateway. Vertex's
// token endpoint (the vx fake's /token) accepts the refresh and never
// answers; Bedrock's credential chain hangs the same way (an instance
// metadata endpoint that does not answer). fetching(ch) returns once ch's
// credential fetch is under way.
func stalledCredentials(t *testing.T) (h *gwtest.Gateway, fetching func(ch string)) {
	t.Helper()
	awsFetching := make(chan struct{}, 8)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	o := familiesOptions(upstream.DefaultAWSSecretAccessKey)
	google := o.Providers
	o.Providers = func(f *gwtest.Fakes) provider.Options {
		po := google(f)
		po.AWSConfig = func(context.Context, string) (aws.Config, error) {
			// The SDK's credential cache retrieves with a context that is
			// never cancelled (it shares the retrieval), so only the
			// test's end releases it.
			return aws.Config{Region: upstream.DefaultAWSRegion, Credentials: aws.CredentialsProviderFunc(
				func(context.Context) (aws.Credentials, error) {
					awsFetching <- struct{}{}
					<-release
					return aws.Credentials{}, errors.New("instance metadata endpoint unreachable")
				})}, nil
		}
		return po
	}
	h = gwtest.NewWith(t, o, stalledCredentialConfig, "vx", "br", "oai")
	if err := h.Ups["vx"].SetFault(upstream.TokenModel, "no-headers"); err != nil {
		t.Fatal(err)
	}
	return h, func(ch string) {
		t.Helper()
		if ch == "vx" {
			h.WaitAttempts("vx", upstream.TokenModel, 1)
			return
		}
		testkit.Recv(t, awsFetching, "the AWS credential fetch")
	}
}

// noBreakerFailures fails the test when any channel's breaker counted a
// failure.
func noBreakerFailures(t *testing.T, h *gwtest.Gateway, why string) {
	t.Helper()
	for _, br := range h.Engine.Breakers().All() {
		if s := br.Snapshot(); s.Failures != 0 {
			t.Fatalf("breaker %s counted %d failures for %s", s.Name, s.Failures, why)
		}
	}
}

// TestCredentialFetchEndedByTheRequest: a credential fetch (a Google token
// refresh, the AWS credential chain) that fails because the request ended
// says nothing about the channel. Cut by the chain deadline, the hop is
// "deadline", the client gets the degraded reply and no other channel is
// asked; cut by a client that left, the hop is canceled. Either way the
// breaker counts nothing (DESIGN.md §2 L1, §3): a slow token endpoint
// during an incident must not open channels whose credential is fine.
func TestCredentialFetchEndedByTheRequest(t *testing.T) {
	for _, ch := range []string{"vx", "br"} {
		t.Run(ch+"/chain deadline", func(t *testing.T) {
			h, fetching := stalledCredentials(t)
			done := h.Async(chatBody("on-"+ch, false, ""))
			fetching(ch)
			h.WaitTimers(1) // the chain deadline; L4 starts after the credential
			h.Clock.Advance(10 * time.Second)
			r := testkit.Recv(t, done, "the reply")
			if p, a := r.Header.Get("X-Hopgate-Path"), r.Header.Get("X-Hopgate-Attempts"); p != ch+":deadline" || a != "1" {
				t.Fatalf("path %q attempts %s, want %s:deadline after 1 attempt", p, a, ch)
			}
			if r.Status != 503 || !strings.Contains(r.Body, `"code":"engine_overloaded"`) || r.Header.Get("Retry-After") != "10" {
				t.Fatalf("%d Retry-After %q: %s, want the degraded reply", r.Status, r.Header.Get("Retry-After"), r.Body)
			}
			if n := h.Attempts("oai", "m"); n != 0 {
				t.Fatalf("oai asked %d times after the deadline", n)
			}
			noBreakerFailures(t, h, "a credential fetch the chain deadline ended")
		})
		t.Run(ch+"/client left", func(t *testing.T) {
			h, fetching := stalledCredentials(t)
			const tid = "4bf92f3577b34da6a3ce929d0e0e4736"
			ctx, cancel := context.WithCancel(t.Context())
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL+"/v1/chat/completions", strings.NewReader(chatBody("on-"+ch, false, "")))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Traceparent", "00-"+tid+"-00f067aa0ba902b7-01")
			done := make(chan error, 1)
			go func() {
				resp, err := h.Client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			fetching(ch)
			cancel()
			if err := testkit.Recv(t, done, "the request's end"); !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v, want its own cancellation", err)
			}
			var hops []string
			for _, s := range h.Trace(tid) {
				if s.SpanKind == trace.SpanKindClient {
					hops = append(hops, spanAttr(s.Attributes, telemetry.AttrChannel)+":"+
						spanAttr(s.Attributes, telemetry.AttrHopOutcome)+":"+spanAttr(s.Attributes, telemetry.AttrErrorType))
				}
			}
			if want := ch + ":" + telemetry.HopCanceled + ":"; strings.Join(hops, ",") != want {
				t.Fatalf("hops %q, want %q (a canceled hop, no error type)", hops, want)
			}
			if n := h.Attempts("oai", "m"); n != 0 {
				t.Fatalf("oai asked %d times for a client that left", n)
			}
			noBreakerFailures(t, h, "a credential fetch the client's departure ended")
		})
	}
}

// TestCredentialChainMissingAtHopTime: a channel whose credential chain
// could not be resolved (an engine that skipped CheckChannels: a reload
// past the adapter cache) fails each hop as a retryable credential_error
// that names the chain's failure, and the walk moves on.
func TestCredentialChainMissingAtHopTime(t *testing.T) {
	up := upstream.New(upstream.Options{Name: "b"})
	srv := httptest.NewServer(up)
	t.Cleanup(func() { up.Close(); srv.Close() })
	cfg, err := config.Parse([]byte(`auth: {mode: none}
channels:
  - {id: br, provider: bedrock, region: us-east-1, base_url: "http://127.0.0.1:1"}
  - {id: b, base_url: "`+srv.URL+`/v1"}
models:
  - name: m
    max_tokens_default: 1024
    chain: [{channel: br, upstream_model: m}, {channel: b, upstream_model: m}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := dispatch.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	spans := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{SpanExporter: spans, PlainSpans: true, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	e := dispatch.New(dispatch.Options{Telemetry: tel, Transport: tr, Providers: provider.Options{
		AWSConfig: func(context.Context, string) (aws.Config, error) {
			return aws.Config{}, errors.New("no profile named prod")
		},
	}})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f, err := reqbody.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	req := &dispatch.Request{Config: cfg, Model: cfg.Model("m"), Operation: config.OpChat, Path: "/chat/completions",
		Body: body, Fields: f, Events: dispatch.ChatEvents}
	res := e.Serve(httptest.NewRecorder(), httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/chat/completions", nil), req)
	if res.Path != "br:credential_error -> b:ok" || !res.Answered {
		t.Fatalf("result %+v, want br:credential_error -> b:ok", res)
	}
	if err := tel.TracerProvider.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var said bool
	for _, s := range spans.GetSpans() {
		for _, ev := range s.Events {
			said = said || strings.Contains(spanAttr(ev.Attributes, "exception.message"), "no profile named prod")
		}
	}
	if !said {
		t.Fatal("no hop span says why the credential chain failed")
	}
}

package upstream

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/vertex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

const (
	claudeVertex = "claude-sonnet-4@20250514"
	vertexRegion = "us-east5"
	cloudScope   = "https://www.googleapis.com/auth/cloud-platform"
)

// vertexSDK is the Anthropic SDK on Vertex with a service-account key file
// minted by the fake: x/oauth2/google signs a JWT assertion, the fake's
// token endpoint verifies it and issues the bearer token.
func (fx *fixture) vertexSDK(t *testing.T, saJSON []byte, project string) *anthropic.Client {
	t.Helper()
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, fx.client)
	creds, err := google.CredentialsFromJSONWithType(ctx, saJSON, google.ServiceAccount, cloudScope)
	if err != nil {
		t.Fatal(err)
	}
	c := anthropic.NewClient(
		option.WithHTTPClient(fx.client), // before vertex: it wraps this client's transport with OAuth
		vertex.WithCredentials(ctx, vertexRegion, project, creds),
		option.WithBaseURL(fx.ts.URL),
		option.WithMaxRetries(0),
		// The SDK copies its anthropic-version header into the body; Vertex
		// requires its own version there.
		option.WithHeader("anthropic-version", VertexAnthropicVersion),
	)
	return &c
}

func (fx *fixture) serviceAccount(t *testing.T) []byte {
	t.Helper()
	b, err := fx.fake.ServiceAccountJSON(fx.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Message and stream through the SDK's Vertex mode; the token is fetched
// once from the fake's endpoint and reused.
func TestVertexAnthropicSDK(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.vertexSDK(t, fx.serviceAccount(t), DefaultGoogleProject)
	model := claudeVertex + "|tokens=3"
	msg, err := c.Messages.New(t.Context(), userText(model, "say something"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != Answer(3) || msg.Model != model {
		t.Fatalf("message %+v", msg)
	}
	streamed, types, err := accumulate(c.Messages.NewStreaming(t.Context(), userText(model, "say something")))
	if err != nil || streamed.Content[0].Text != Answer(3) || types[len(types)-1] != "message_stop" {
		t.Fatalf("stream %v %v", err, types)
	}
	if n := fx.fake.Attempts(TokenModel); n != 1 {
		t.Fatalf("%d token requests, want 1 (cached)", n)
	}
	var paths []string
	for _, r := range fx.fake.Log() {
		paths = append(paths, string(r.Dialect)+" "+r.Path)
	}
	want := []string{
		"oauth /token",
		"vertex /v1/projects/fake-project/locations/us-east5/publishers/anthropic/models/" + model + ":rawPredict",
		"vertex /v1/projects/fake-project/locations/us-east5/publishers/anthropic/models/" + model + ":streamRawPredict",
	}
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log\n%s", strings.Join(paths, "\n"))
	}
}

// The key file on disk, found through Application Default Credentials as a
// gateway's vertex channel finds it.
func TestVertexServiceAccountFile(t *testing.T) {
	fx := newFixture(t, Options{})
	path, err := fx.fake.WriteServiceAccountFile(t.TempDir(), fx.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, fx.client)
	c := anthropic.NewClient(option.WithHTTPClient(fx.client), vertex.WithGoogleAuth(ctx, vertexRegion, DefaultGoogleProject),
		option.WithBaseURL(fx.ts.URL), option.WithMaxRetries(0), option.WithHeader("anthropic-version", VertexAnthropicVersion))
	if _, err := c.Messages.New(t.Context(), userText(claudeVertex, "x")); err != nil {
		t.Fatal(err)
	}
}

// A token past its lifetime on the fake's clock is a 401 that says
// ACCESS_TOKEN_EXPIRED; another project is a 403.
func TestVertexAuth(t *testing.T) {
	fx := newFixture(t, Options{GoogleTokenLifetime: 30 * time.Minute})
	sa := fx.serviceAccount(t)
	c := fx.vertexSDK(t, sa, DefaultGoogleProject)
	if _, err := c.Messages.New(t.Context(), userText(claudeVertex, "x")); err != nil {
		t.Fatal(err)
	}
	fx.clock.Advance(30 * time.Minute) // the client still trusts its token: it counts on the wall clock
	_, err := c.Messages.New(t.Context(), userText(claudeVertex, "x"))
	e := asAnthropic(t, err)
	if e.StatusCode != 401 || !strings.Contains(e.RawJSON(), `"status":"UNAUTHENTICATED"`) || !strings.Contains(e.RawJSON(), `"reason":"ACCESS_TOKEN_EXPIRED"`) ||
		!strings.Contains(e.Message, "Request had invalid authentication credentials") {
		t.Fatalf("expired: %v", err)
	}
	_, err = fx.vertexSDK(t, sa, "someone-elses-project").Messages.New(t.Context(), userText(claudeVertex, "x"))
	if e := asAnthropic(t, err); e.StatusCode != 403 || !strings.Contains(e.RawJSON(), "PERMISSION_DENIED") {
		t.Fatalf("other project: %v", err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
		fx.ts.URL+"/v1/projects/fake-project/locations/us-east5/publishers/anthropic/models/c:rawPredict", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer ya29.made-up")
	resp, err := fx.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g struct {
		Error struct {
			Code    int
			Status  string
			Details []struct{ Reason string }
		}
	}
	decode(t, resp.Body, &g)
	if resp.StatusCode != 401 || g.Error.Code != 401 || g.Error.Details[0].Reason != "ACCESS_TOKEN_TYPE_UNSUPPORTED" {
		t.Fatalf("unknown token: %d %+v", resp.StatusCode, g)
	}
}

// The token endpoint fails when told to: the refresh error reaches the
// caller as an oauth2.RetrieveError with the endpoint's status.
func TestVertexTokenEndpointFault(t *testing.T) {
	fx := newFixture(t, Options{})
	if err := fx.fake.SetFault(TokenModel, "503-once"); err != nil {
		t.Fatal(err)
	}
	c := fx.vertexSDK(t, fx.serviceAccount(t), DefaultGoogleProject)
	// The SDK's transport does not keep *oauth2.RetrieveError in the chain;
	// the message says what failed.
	_, err := c.Messages.New(t.Context(), userText(claudeVertex, "x"))
	if err == nil || !strings.Contains(err.Error(), "cannot fetch token: 503") || !strings.Contains(err.Error(), `"error":"internal_failure"`) {
		t.Fatalf("refresh failure: %v (%T)", err, err)
	}
	if _, err := c.Messages.New(t.Context(), userText(claudeVertex, "x")); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
}

// The token endpoint verifies the assertion: a key it did not issue (same
// account, other private key) is an invalid_grant.
func TestVertexForgedAssertion(t *testing.T) {
	fx := newFixture(t, Options{})
	var sa map[string]string
	if err := json.Unmarshal(fx.serviceAccount(t), &sa); err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	sa["private_key"] = string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	forged, _ := json.Marshal(sa)
	_, err := fx.vertexSDK(t, forged, DefaultGoogleProject).Messages.New(t.Context(), userText(claudeVertex, "x"))
	if err == nil || !strings.Contains(err.Error(), `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`) {
		t.Fatalf("forged: %v", err)
	}
	resp, err := fx.client.PostForm(fx.ts.URL+"/token", url.Values{"grant_type": {"client_credentials"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("other grant: %d", resp.StatusCode)
	}
}

// Vertex fails in two shapes: Google's for its front end (429
// RESOURCE_EXHAUSTED), Anthropic's for the model (529, prompt too long,
// event: error in the stream).
func TestVertexFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.vertexSDK(t, fx.serviceAccount(t), DefaultGoogleProject)
	_, err := c.Messages.New(t.Context(), userText(claudeVertex+"|429", "x"))
	if e := asAnthropic(t, err); e.StatusCode != 429 || !strings.Contains(e.RawJSON(), `"status":"RESOURCE_EXHAUSTED"`) || !strings.Contains(e.Message, "Quota exceeded") {
		t.Fatalf("429: %v", err)
	}
	_, err = c.Messages.New(t.Context(), userText(claudeVertex+"|529", "x"))
	if e := asAnthropic(t, err); e.StatusCode != 529 || e.Type() != "overloaded_error" {
		t.Fatalf("529: %v", err)
	}
	_, err = c.Messages.New(t.Context(), userText(claudeVertex+"|context-length", "x"))
	if e := asAnthropic(t, err); e.StatusCode != 400 || e.Message != "prompt is too long: 210000 tokens > 200000 maximum" {
		t.Fatalf("context-length: %v", err)
	}
	_, types, err := accumulate(c.Messages.NewStreaming(t.Context(), userText(claudeVertex+"|stream-error-event", "x")))
	if e := asAnthropic(t, err); e.Type() != "overloaded_error" || types[0] != "message_start" {
		t.Fatalf("stream error: %v %v", err, types)
	}
	p := userText(claudeVertex+"|tool-calls", "x")
	p.Tools = []anthropic.ToolUnionParam{lookupTool}
	msg, _, err := accumulate(c.Messages.NewStreaming(t.Context(), p))
	if err != nil || msg.StopReason != "tool_use" {
		t.Fatalf("tool use: %v %+v", err, msg)
	}
	// The SDK's default anthropic-version in the body is refused.
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, fx.client)
	creds, _ := google.CredentialsFromJSONWithType(ctx, fx.serviceAccount(t), google.ServiceAccount, cloudScope)
	plain := anthropic.NewClient(option.WithHTTPClient(fx.client), vertex.WithCredentials(ctx, vertexRegion, DefaultGoogleProject, creds),
		option.WithBaseURL(fx.ts.URL), option.WithMaxRetries(0))
	_, err = plain.Messages.New(t.Context(), userText(claudeVertex, "x"))
	if e := asAnthropic(t, err); e.StatusCode != 400 || !strings.HasPrefix(e.Message, "anthropic_version: Input should be") {
		t.Fatalf("sdk default version: %v", err)
	}
}

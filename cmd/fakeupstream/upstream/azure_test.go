package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
)

const azureVersion = "2024-10-21"

// azureSDK is openai-go configured for Azure as a gateway's azure channel
// would be: deployment URLs, api-version, and the given credential.
func (fx *fixture) azureSDK(auth option.RequestOption, opts ...option.RequestOption) *openai.Client {
	c := openai.NewClient(append([]option.RequestOption{
		azure.WithEndpoint(fx.ts.URL, azureVersion), auth, azure.WithUnsafeAllowHTTP(), option.WithMaxRetries(0),
	}, opts...)...)
	return &c
}

// entraToken is a static Microsoft Entra ID credential.
type entraToken string

func (e entraToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: string(e), ExpiresOn: epoch.AddDate(100, 0, 0)}, nil
}

func chatParams(model string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    openai.ChatModel(model),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("say something")},
	}
}

func asOpenAI(t *testing.T, err error) *openai.Error {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T), want *openai.Error", err, err)
	}
	return apiErr
}

// A deployment URL answers as Azure does: the deployment is the model for
// faults, the answer carries the prompt and completion filter annotations.
func TestAzureChat(t *testing.T) {
	fx := newFixture(t, Options{})
	c, err := fx.azureSDK(azure.WithAPIKey(DefaultAzureAPIKey)).Chat.Completions.New(t.Context(), chatParams("gpt-4o|tokens=3"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Message.Content != Answer(3) || c.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %+v", c.Choices[0])
	}
	if !strings.Contains(c.RawJSON(), `"prompt_filter_results":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":false,"detected":false}`) ||
		!strings.Contains(c.Choices[0].RawJSON(), `"protected_material_code":{"filtered":false,"detected":false}`) {
		t.Fatalf("filter annotations missing: %s", c.RawJSON())
	}
	r := fx.fake.Log()[0]
	if r.Dialect != DialectAzure || r.Path != "/openai/deployments/gpt-4o|tokens=3/chat/completions" || r.Model != "gpt-4o|tokens=3" ||
		r.Header.Get("Api-Key") != DefaultAzureAPIKey {
		t.Fatalf("log %+v", r)
	}
}

// Azure streams start with a choice-less chunk holding the prompt filter
// results; content chunks carry their own annotations.
func TestAzureStream(t *testing.T) {
	fx := newFixture(t, Options{})
	s := fx.azureSDK(azure.WithAPIKey(DefaultAzureAPIKey)).Chat.Completions.NewStreaming(t.Context(), chatParams("gpt-4o|tokens=2"))
	defer s.Close()
	var chunks []openai.ChatCompletionChunk
	var text strings.Builder
	for s.Next() {
		ch := s.Current()
		chunks = append(chunks, ch)
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 5 || len(chunks[0].Choices) != 0 || !strings.Contains(chunks[0].RawJSON(), `"prompt_filter_results"`) ||
		!strings.Contains(chunks[2].Choices[0].RawJSON(), `"content_filter_results":{"hate"`) || text.String() != Answer(2) {
		t.Fatalf("chunks %d, first %s, text %q", len(chunks), chunks[0].RawJSON(), text.String())
	}
}

// Azure's own failures through the SDK: the content filter's 400 in its
// exact shape, 429 with both retry headers, a content_filter finish, a
// wrong key or token.
func TestAzureFaults(t *testing.T) {
	fx := newFixture(t, Options{AzureADToken: "entra-ok"})
	key := azure.WithAPIKey(DefaultAzureAPIKey)

	_, err := fx.azureSDK(key).Chat.Completions.New(t.Context(), chatParams("gpt-4o|content-filter"))
	e := asOpenAI(t, err)
	var body struct {
		Error struct {
			Code       string `json:"code"`
			Param      string `json:"param"`
			Status     int    `json:"status"`
			InnerError struct {
				Code                string                             `json:"code"`
				ContentFilterResult map[string]struct{ Filtered bool } `json:"content_filter_result"`
			} `json:"innererror"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(`{"error":`+e.RawJSON()+`}`), &body); err != nil {
		t.Fatal(err)
	}
	if e.StatusCode != 400 || e.Code != "content_filter" || body.Error.InnerError.Code != "ResponsibleAIPolicyViolation" ||
		!body.Error.InnerError.ContentFilterResult["violence"].Filtered || body.Error.Status != 400 {
		t.Fatalf("content filter %d %s", e.StatusCode, e.RawJSON())
	}

	_, err = fx.azureSDK(key).Chat.Completions.New(t.Context(), chatParams("gpt-4o|429:ra=7"))
	e = asOpenAI(t, err)
	if e.StatusCode != 429 || e.Code != "429" || e.Response.Header.Get("Retry-After") != "7" || e.Response.Header.Get("Retry-After-Ms") != "7000" ||
		!strings.Contains(e.Message, "Please retry after 7 seconds") {
		t.Fatalf("429: %d %q %v", e.StatusCode, e.Message, e.Response.Header)
	}

	c, err := fx.azureSDK(key).Chat.Completions.New(t.Context(), chatParams("gpt-4o|stop=content_filter"))
	if err != nil || c.Choices[0].FinishReason != "content_filter" || !strings.Contains(c.Choices[0].RawJSON(), `"violence":{"filtered":true,"severity":"medium"}`) {
		t.Fatalf("content_filter finish: %v %+v", err, c)
	}

	for _, tt := range []struct {
		name string
		auth option.RequestOption
		want int
	}{
		{"wrong key", azure.WithAPIKey("nope"), 401},
		{"entra token", azure.WithTokenCredential(entraToken("entra-ok")), 200},
		{"wrong entra token", azure.WithTokenCredential(entraToken("expired")), 401},
	} {
		_, err := fx.azureSDK(tt.auth).Chat.Completions.New(t.Context(), chatParams("gpt-4o"))
		if tt.want == 200 && err != nil || tt.want != 200 && asOpenAI(t, err).StatusCode != tt.want {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}

	s := fx.azureSDK(key).Chat.Completions.NewStreaming(t.Context(), chatParams("gpt-4o|stream-error"))
	for s.Next() {
	}
	var se *ssestream.StreamError
	if !errors.As(s.Err(), &se) {
		t.Fatalf("stream-error: %v", s.Err())
	}
	s.Close()
}

// api-version is required on deployment URLs (404 without it, 400 for an
// unknown one) and optional on the v1 API.
func TestAzureAPIVersion(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, tt := range []struct {
		path   string
		status int
		code   string
	}{
		{"/openai/deployments/gpt-4o/chat/completions", 404, "404"},
		{"/openai/deployments/gpt-4o/chat/completions?api-version=latest-please", 400, "BadRequest"},
		{"/openai/deployments/gpt-4o/chat/completions?api-version=2025-04-01-preview", 200, ""},
		{"/openai/v1/chat/completions", 200, ""},
		{"/openai/v1/chat/completions?api-version=preview", 200, ""},
		{"/openai/v1/chat/completions?api-version=2024-10-21", 400, "BadRequest"},
		{"/openai/deployments/gpt-4o/nope?api-version=2024-10-21", 404, "unknown_url"},
		{"/openai/responses", 404, "404"},
		{"/openai/responses?api-version=2025-04-01-preview", 200, ""},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, fx.ts.URL+tt.path,
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Api-Key", DefaultAzureAPIKey)
		resp, err := fx.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		code := ""
		if resp.StatusCode != 200 {
			code = errorCode(t, resp.Body)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || code != tt.code {
			t.Fatalf("%s: %d %q", tt.path, resp.StatusCode, code)
		}
	}
}

// The v1 API takes the model in the body and the key as a bearer token
// (the plain OpenAI SDK with a base URL), or in api-key.
func TestAzureV1(t *testing.T) {
	fx := newFixture(t, Options{})
	c := openai.NewClient(option.WithBaseURL(fx.ts.URL+"/openai/v1/"), option.WithAPIKey(DefaultAzureAPIKey),
		option.WithHTTPClient(fx.client), option.WithMaxRetries(0))
	got, err := c.Chat.Completions.New(t.Context(), chatParams("gpt-4o|tokens=2"))
	if err != nil || got.Choices[0].Message.Content != Answer(2) || !strings.Contains(got.RawJSON(), "prompt_filter_results") {
		t.Fatalf("v1: %v %+v", err, got)
	}
	if fx.fake.Attempts("gpt-4o|tokens=2") != 1 {
		t.Fatal("v1 model not counted")
	}
	r, err := c.Responses.New(t.Context(), responsesParams("gpt-4o"))
	if err != nil || r.OutputText() != Answer(DefaultTokens) {
		t.Fatalf("v1 responses: %v", err)
	}
}

// Every OpenAI endpoint Azure serves answers on deployment URLs.
func TestAzureEndpoints(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.azureSDK(azure.WithAPIKey(DefaultAzureAPIKey))
	emb, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "text-embedding-3-small", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("a")},
	})
	if err != nil || len(emb.Data) != 1 || emb.Data[0].Embedding[0] != Embedding("a", DefaultDimensions)[0] {
		t.Fatalf("embeddings: %v", err)
	}
	tr, err := c.Audio.Transcriptions.New(t.Context(), openai.AudioTranscriptionNewParams{
		Model: "whisper", File: openai.File(strings.NewReader("RIFF fake audio"), "a.wav", "audio/wav"),
	})
	if err != nil || tr.Text != FileDigest([]byte("RIFF fake audio")) {
		t.Fatalf("transcription: %v %+v", err, tr)
	}
	if p := fx.fake.Log()[1].Path; p != "/openai/deployments/whisper/audio/transcriptions" {
		t.Fatalf("transcription path %q", p)
	}
	// The Responses API is outside the deployment URLs: the deployment is
	// the body's model.
	r, err := c.Responses.New(t.Context(), responsesParams("gpt-4o|tokens=2"))
	if err != nil || r.OutputText() != Answer(2) {
		t.Fatalf("responses: %v", err)
	}
	if p := fx.fake.Log()[2].Path; p != "/openai/responses" {
		t.Fatalf("responses path %q", p)
	}
	_, err = c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "e|503", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("a")},
	})
	if e := asOpenAI(t, err); e.StatusCode != 503 || e.Code != "ServiceUnavailable" {
		t.Fatalf("embeddings 503: %v", err)
	}
}

func responsesParams(model string) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
	}
}

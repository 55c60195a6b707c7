package provider

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream/eventstreamapi"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/sse"
)

func upstreamOf(t *testing.T, ch *config.Channel) *Upstream {
	t.Helper()
	u, err := New(context.Background(), ch, Options{AWSConfig: func(context.Context, string) (aws.Config, error) {
		return aws.Config{Region: ch.Region, Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Why: each family's URL is the one its API documents (DESIGN.md §8), the
// model escaped into the path where the URL names it.
func TestURLs(t *testing.T) {
	cases := []struct {
		ch   config.Channel
		r    Request
		want string
	}{
		{config.Channel{Provider: config.ProviderOpenAI, BaseURL: "https://api.openai.com/v1"}, Request{Path: "/chat/completions", Model: "gpt"},
			"https://api.openai.com/v1/chat/completions"},
		{config.Channel{Provider: config.ProviderAzure, BaseURL: "https://r.openai.azure.com", APIVersion: "2024-10-21"}, Request{Path: "/embeddings", Model: "my dep"},
			"https://r.openai.azure.com/openai/deployments/my%20dep/embeddings?api-version=2024-10-21"},
		{config.Channel{Provider: config.ProviderAzure, BaseURL: "https://r.openai.azure.com", APIVersion: "2025-04-01-preview"}, Request{Path: "/responses", Model: "my dep"},
			"https://r.openai.azure.com/openai/responses?api-version=2025-04-01-preview"},
		{config.Channel{Provider: config.ProviderAzure, BaseURL: "https://r.openai.azure.com"}, Request{Path: "/chat/completions", Model: "gpt"},
			"https://r.openai.azure.com/openai/v1/chat/completions"},
		{config.Channel{Provider: config.ProviderAnthropic, BaseURL: "https://api.anthropic.com"}, Request{Path: "/chat/completions", Model: "claude"},
			"https://api.anthropic.com/v1/messages"},
		{config.Channel{Provider: config.ProviderBedrock, BaseURL: "https://bedrock-runtime.us-east-1.amazonaws.com", Region: "us-east-1"},
			Request{Model: "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude", Stream: true},
			"https://bedrock-runtime.us-east-1.amazonaws.com/model/arn:aws:bedrock:us-east-1:1:inference-profile%2Fus.anthropic.claude/invoke-with-response-stream"},
		{config.Channel{Provider: config.ProviderVertex, BaseURL: "https://us-east5-aiplatform.googleapis.com", Region: "us-east5", Project: "p"},
			Request{Model: "claude-sonnet@2025", Stream: false},
			"https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet@2025:rawPredict"},
		{config.Channel{Provider: config.ProviderVertex, BaseURL: "https://us-east5-aiplatform.googleapis.com", Region: "us-east5", Project: "p"},
			Request{Model: "claude-sonnet@2025", Stream: true},
			"https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet@2025:streamRawPredict"},
		{config.Channel{Provider: config.ProviderBedrock, BaseURL: "https://bedrock-runtime.us-east-1.amazonaws.com", Region: "us-east-1"},
			Request{Model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0"},
			"https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke"},
	}
	for _, tc := range cases {
		u := &Upstream{ch: &tc.ch}
		if got := u.URL(&tc.r); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.ch.Provider, got, tc.want)
		}
	}
}

// Why: Bedrock and Vertex take the model in the URL and the API version
// in the body (Bedrock also the stream flag in the URL and the betas in
// the body); unknown betas are dropped for them, never sent.
func TestPrepare(t *testing.T) {
	body := []byte(`{"model":"claude","stream":true,"max_tokens":10,"messages":[]}`)
	r := &Request{Beta: []string{"interleaved-thinking-2025-05-14", "made-up-beta"}}
	br := &Upstream{ch: &config.Channel{Provider: config.ProviderBedrock}}
	out, dropped, err := br.Prepare(body, r)
	var m map[string]any
	if err != nil || json.Unmarshal(out, &m) != nil {
		t.Fatal(err)
	}
	if _, ok := m["model"]; ok || m["stream"] != nil || m["anthropic_version"] != BedrockVersion || len(dropped) != 1 || dropped[0] != "made-up-beta" {
		t.Fatalf("bedrock body %s, dropped %v", out, dropped)
	}
	if betas, _ := m["anthropic_beta"].([]any); len(betas) != 1 || betas[0] != "interleaved-thinking-2025-05-14" {
		t.Fatalf("bedrock betas %v", m["anthropic_beta"])
	}
	vx := &Upstream{ch: &config.Channel{Provider: config.ProviderVertex}}
	out, _, _ = vx.Prepare(body, r)
	m = nil
	_ = json.Unmarshal(out, &m)
	if _, ok := m["model"]; ok || m["stream"] != true || m["anthropic_version"] != VertexVersion {
		t.Fatalf("vertex body %s", out)
	}
	an := &Upstream{ch: &config.Channel{Provider: config.ProviderAnthropic}}
	if out, _, _ := an.Prepare(body, r); !bytes.Equal(out, body) {
		t.Fatalf("the direct API's body changed: %s", out)
	}
	if keep, dropped := AllowedBetas(config.ProviderAnthropic, r.Beta); len(keep) != 2 || dropped != nil {
		t.Fatalf("the direct API takes every beta: %v %v", keep, dropped)
	}
}

// Why: each family's credential goes in its own header, and SigV4 signs
// Bedrock's request over its final body.
func TestSetHeaders(t *testing.T) {
	cases := []struct {
		ch     config.Channel
		header string
		want   string
	}{
		{config.Channel{Provider: config.ProviderOpenAI, APIKey: "k"}, "Authorization", "Bearer k"},
		{config.Channel{Provider: config.ProviderAzure, APIKey: "k"}, "Api-Key", "k"},
		{config.Channel{Provider: config.ProviderAnthropic, APIKey: "k"}, "X-Api-Key", "k"},
		{config.Channel{Provider: config.ProviderAnthropic, APIKey: "k"}, "Anthropic-Version", AnthropicVersion},
		{config.Channel{Provider: config.ProviderBedrock, Region: "us-east-1"}, "Authorization", "AWS4-HMAC-SHA256 Credential=AKID/"},
	}
	for _, tc := range cases {
		u := upstreamOf(t, &tc.ch)
		req, _ := http.NewRequest(http.MethodPost, "https://example.com/x", nil)
		body := []byte(`{}`)
		if err := u.SetHeaders(context.Background(), req, &Request{ContentType: "application/json", Accept: "application/json"}, body, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		if got := req.Header.Get(tc.header); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %s = %q, want %q", tc.ch.Provider, tc.header, got, tc.want)
		}
	}
}

// Why: betas reach each family as it takes them (the direct API every
// one, Vertex only the allow-list in the header, Bedrock none in a header:
// Prepare puts its allow-list in the body); Vertex carries the Google
// token; a Bedrock stream asks for the event-stream framing.
func TestFamilyHeaders(t *testing.T) {
	betas := []string{"interleaved-thinking-2025-05-14", "made-up-beta"}
	google := func(context.Context, ...string) (*google.Credentials, error) {
		return &google.Credentials{TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "ya29.tok"})}, nil
	}
	cases := []struct {
		provider string
		want     map[string]string
	}{
		{config.ProviderAnthropic, map[string]string{"Anthropic-Beta": "interleaved-thinking-2025-05-14,made-up-beta", "Anthropic-Version": "2023-01-01"}},
		{config.ProviderVertex, map[string]string{"Anthropic-Beta": "interleaved-thinking-2025-05-14", "Authorization": "Bearer ya29.tok", "Anthropic-Version": ""}},
		{config.ProviderBedrock, map[string]string{"Anthropic-Beta": "", "Accept": "application/vnd.amazon.eventstream", "X-Amzn-Bedrock-Accept": "application/json", "Anthropic-Version": ""}},
	}
	for _, tc := range cases {
		ch := &config.Channel{Provider: tc.provider, Region: "us-east5", Project: "p", APIKey: "k"}
		u, err := New(context.Background(), ch, Options{GoogleCredentials: google, AWSConfig: func(context.Context, string) (aws.Config, error) {
			return aws.Config{Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")}, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, "https://example.com/x", nil)
		r := &Request{Stream: true, Accept: "text/event-stream", Beta: betas, AnthropicVersion: "2023-01-01"}
		if err := u.SetHeaders(context.Background(), req, r, []byte(`{}`), time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		for h, want := range tc.want {
			if got := req.Header.Get(h); got != want {
				t.Errorf("%s %s = %q, want %q", tc.provider, h, got, want)
			}
		}
	}
}

// blockingToken is a token source whose refresh hangs until released, as
// a token endpoint that accepts the connection and never answers.
type blockingToken struct{ release chan struct{} }

func (b blockingToken) Token() (*oauth2.Token, error) {
	<-b.release
	return nil, errors.New("token endpoint: no answer")
}

// Why: a hung Google token refresh must not hold a Vertex hop past its
// context (the client leaving, the chain deadline), and the refresh runs
// on an HTTP client with a timeout, so it ends too.
func TestVertexTokenBoundedByTheHop(t *testing.T) {
	defer goleak.VerifyNone(t)
	tokens := blockingToken{release: make(chan struct{})}
	var tokenClient *http.Client
	u, err := New(context.Background(), &config.Channel{Provider: config.ProviderVertex, Region: "us-east5", Project: "p"}, Options{
		GoogleCredentials: func(ctx context.Context, _ ...string) (*google.Credentials, error) {
			tokenClient, _ = ctx.Value(oauth2.HTTPClient).(*http.Client)
			return &google.Credentials{TokenSource: tokens}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tokenClient == nil || tokenClient.Timeout <= 0 {
		t.Fatalf("token refreshes use %+v, want a client with a timeout", tokenClient)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	gone := errors.New("client gone")
	cancel(gone)
	req, _ := http.NewRequest(http.MethodPost, "https://example.com/x", nil)
	err = u.SetHeaders(ctx, req, &Request{}, nil, time.Unix(0, 0))
	if !errors.Is(err, ErrCredential) || !errors.Is(err, gone) {
		t.Fatalf("SetHeaders = %v, want the hop's end as a credential error", err)
	}
	close(tokens.release) // the refresh ends; so does its goroutine (goleak)
}

// Why: a refused credential must be visible as such on the hop's span, in
// the provider's own words, whatever its error shape.
func TestErrorDetail(t *testing.T) {
	cases := []struct {
		h    http.Header
		body string
		want string
	}{
		{http.Header{"X-Amzn-Errortype": {"InvalidSignatureException:http://internal"}}, `{"message":"The request signature we calculated does not match"}`,
			"InvalidSignatureException: The request signature we calculated does not match"},
		{nil, `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`,
			"UNAUTHENTICATED: Request had invalid authentication credentials."},
		{nil, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, "authentication_error: invalid x-api-key"},
		{nil, `{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}`, "invalid_request_error: Incorrect API key"},
		{nil, `{"detail":{"status":"system_busy","message":"We are experiencing heavy traffic"}}`, "system_busy: We are experiencing heavy traffic"},
		{nil, `not json`, ""},
	}
	for _, tc := range cases {
		if got := ErrorDetail(tc.h, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}

// Why: Bedrock answers some exceptions that mean "try another channel"
// with a status that reads final (400 ServiceQuotaExceededException): the
// exception must be read where the AWS SDK reads it, in its order.
func TestAWSErrorType(t *testing.T) {
	const coral = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
	cases := []struct {
		name string
		h    http.Header
		body string
		want string
	}{
		{"header with its URI suffix", http.Header{"X-Amzn-Errortype": {"ServiceQuotaExceededException" + coral}}, `{"message":"quota"}`, "ServiceQuotaExceededException"},
		{"header alone", http.Header{"X-Amzn-Errortype": {"ValidationException"}}, ``, "ValidationException"},
		{"header before the body", http.Header{"X-Amzn-Errortype": {"ThrottlingException"}}, `{"__type":"ValidationException"}`, "ThrottlingException"},
		{"__type with its namespace", nil, `{"__type":"com.amazon.bedrock#ModelErrorException","message":"m"}`, "ModelErrorException"},
		{"__type before code", nil, `{"__type":"ModelTimeoutException","code":"ValidationException"}`, "ModelTimeoutException"},
		{"code", nil, `{"code":"ServiceUnavailableException","message":"m"}`, "ServiceUnavailableException"},
		{"a numeric code names nothing", nil, `{"code":429,"message":"m"}`, ""},
		{"Bedrock's body names nothing", nil, `{"message":"Malformed input request"}`, ""},
		{"not json", nil, `<html>502</html>`, ""},
	}
	for _, tc := range cases {
		if got := AWSErrorType(tc.h, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// encode writes event-stream messages with the SDK's encoder.
func encode(t testing.TB, msgs ...eventstream.Message) []byte {
	var b bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, m := range msgs {
		if err := enc.Encode(&b, m); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func chunk(event string) eventstream.Message {
	var h eventstream.Headers
	h.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.EventMessageType))
	h.Set(eventstreamapi.EventTypeHeader, eventstream.StringValue("chunk"))
	payload, _ := json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString([]byte(event))})
	return eventstream.Message{Headers: h, Payload: payload}
}

func exception(typ, message string) eventstream.Message {
	var h eventstream.Headers
	h.Set(eventstreamapi.MessageTypeHeader, eventstream.StringValue(eventstreamapi.ExceptionMessageType))
	h.Set(eventstreamapi.ExceptionTypeHeader, eventstream.StringValue(typ))
	payload, _ := json.Marshal(map[string]string{"message": message})
	return eventstream.Message{Headers: h, Payload: payload}
}

// Why: Bedrock's stream is read with the SDK's decoder as the Anthropic
// events it carries; an exception is an Anthropic-shaped error event; a
// stream cut inside a message is an error, never a clean end.
func TestEventFrames(t *testing.T) {
	raw := encode(t, chunk(`{"type":"message_start","message":{"id":"m"}}`),
		chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`),
		exception("throttlingException", "slow down"))
	f := NewEventFrames(bytes.NewReader(raw), 1<<20)
	var got []string
	for {
		fr, err := f.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(fr.Raw), "event: "+fr.Event+"\ndata: ") {
			t.Fatalf("raw %q", fr.Raw)
		}
		got = append(got, fr.Event+" "+string(fr.Data))
	}
	want := []string{
		`message_start {"type":"message_start","message":{"id":"m"}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
		`error {"error":{"message":"slow down","type":"throttlingException"},"type":"error"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("frames\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	cut := NewEventFrames(bytes.NewReader(raw[:len(raw)-5]), 1<<20)
	var err error
	for err == nil {
		_, err = cut.Next()
	}
	if errors.Is(err, io.EOF) {
		t.Fatal("a stream cut inside a message read as a clean end")
	}
	big := NewEventFrames(bytes.NewReader(encode(t, chunk(strings.Repeat("x", 300)))), 100)
	if _, err := big.Next(); !errors.Is(err, sse.ErrFrameTooLarge) {
		t.Fatalf("an oversized message: %v", err)
	}
}

// Why: the SDK's decoder buffers whatever length a message declares, so
// the frame bound holds on the declared lengths, before the message is
// read: a prelude announcing 1 MiB (or headers longer than the message,
// which wraps the payload length around) is refused with nothing buffered.
func TestEventFramesBoundDeclaredLengths(t *testing.T) {
	prelude := func(total, headers uint32) []byte {
		p := binary.BigEndian.AppendUint32(nil, total)
		p = binary.BigEndian.AppendUint32(p, headers)
		return append(p, 0, 0, 0, 0) // prelude CRC, never reached
	}
	// The rest of the stream is there (1 MiB of it): a decoder that
	// trusted the prelude would buffer it all before any check.
	rest := bytes.Repeat([]byte("x"), 1<<20)
	for name, tc := range map[string]struct {
		prelude []byte
		want    error
	}{
		"payload over the bound":   {prelude(1<<20+messageOverhead, 0), sse.ErrFrameTooLarge},
		"headers over the bound":   {prelude(1<<20+messageOverhead, 1<<20), sse.ErrFrameTooLarge},
		"headers beyond the total": {prelude(messageOverhead+10, 1000), nil},
	} {
		body := &countingReader{r: io.MultiReader(bytes.NewReader(tc.prelude), bytes.NewReader(rest))}
		_, err := NewEventFrames(body, 64<<10).Next()
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%s: %v, want %v", name, err, tc.want)
		}
		if body.n > 16<<10 { // one fill of the reader's buffer
			t.Fatalf("%s: %d bytes read from the upstream", name, body.n)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzEventFrames: any bytes from an upstream: no panic, frames are SSE
// with JSON data for known message kinds, an error ends the stream.
func FuzzEventFrames(f *testing.F) {
	f.Add(encode(f, chunk(`{"type":"ping"}`), exception("x", "y")))
	f.Add([]byte{0, 0, 0, 16, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := NewEventFrames(bytes.NewReader(b), 1<<16)
		for i := 0; i < 1000; i++ {
			frame, err := fr.Next()
			if err != nil {
				return
			}
			if !bytes.HasPrefix(frame.Raw, []byte("event: ")) || !bytes.HasSuffix(frame.Raw, []byte("\n\n")) {
				t.Fatalf("frame %q", frame.Raw)
			}
		}
	})
}

// FuzzErrorDetail: any error body: no panic, a bounded string; the AWS
// exception it names, if any, has no URI suffix left.
func FuzzErrorDetail(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m","type":"t"}}`))
	f.Add([]byte(`{"message":"` + strings.Repeat("a", 1000) + `"}`))
	f.Add([]byte(`{"message":"a` + strings.Repeat("é", 500) + `"}`)) // the cut falls inside a rune
	f.Add([]byte(`{"__type":"com.amazon#ServiceQuotaExceededException:http://x","message":"m"}`))
	f.Add([]byte(`{"code":"ModelErrorException"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := ErrorDetail(http.Header{}, b); len(d) > 400 || !utf8.ValidString(d) {
			t.Fatalf("detail %q: %d bytes, valid UTF-8 %v", d, len(d), utf8.ValidString(d))
		}
		if typ := AWSErrorType(http.Header{}, b); strings.Contains(typ, ":") {
			t.Fatalf("exception %q kept its URI suffix", typ)
		}
	})
}

// Why: the openai Authorization value is built once per channel, so each
// channel must still send its own key, and a channel whose key changed
// after its Upstream was made must send the new one.
func TestSetHeadersBearerPerChannel(t *testing.T) {
	a := upstreamOf(t, &config.Channel{Provider: config.ProviderOpenAI, APIKey: "key-a"})
	bch := &config.Channel{Provider: config.ProviderOpenAI, APIKey: "key-b"}
	b := upstreamOf(t, bch)
	auth := func(u *Upstream) string {
		req, _ := http.NewRequest(http.MethodPost, "https://example.com/x", nil)
		if err := u.SetHeaders(context.Background(), req, &Request{ContentType: "application/json"}, nil, time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
		return req.Header.Get("Authorization")
	}
	for _, tc := range []struct {
		u    *Upstream
		want string
	}{{a, "Bearer key-a"}, {b, "Bearer key-b"}, {a, "Bearer key-a"}} {
		if got := auth(tc.u); got != tc.want {
			t.Fatalf("Authorization %q, want %q", got, tc.want)
		}
	}
	bch.APIKey = "key-b2"
	if got := auth(b); got != "Bearer key-b2" {
		t.Fatalf("after the key changed: %q", got)
	}
	bch.APIKey = "key-bX" // same length as the built value's key
	if got := auth(b); got != "Bearer key-bX" {
		t.Fatalf("after the key changed: %q", got)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://example.com/x", nil)
	r := &Request{ContentType: "application/json"}
	allocs := testing.AllocsPerRun(100, func() {
		clear(req.Header)
		_ = a.SetHeaders(context.Background(), req, r, nil, time.Unix(0, 0))
	})
	t.Logf("SetHeaders: %.0f allocations", allocs)
}

func TestBedrockCountModel(t *testing.T) {
	for in, want := range map[string]string{
		"us.anthropic.claude-sonnet-4-5-20250929-v1:0":     "anthropic.claude-sonnet-4-5-20250929-v1:0",
		"global.anthropic.claude-opus-4-5-20251101-v1:0":   "anthropic.claude-opus-4-5-20251101-v1:0",
		"us-gov.anthropic.claude-3-haiku-20240307-v1:0":    "anthropic.claude-3-haiku-20240307-v1:0",
		"anthropic.claude-3-5-haiku-20241022-v1:0":         "anthropic.claude-3-5-haiku-20241022-v1:0",
		"us.meta.llama3-3-70b-instruct-v1:0":               "us.meta.llama3-3-70b-instruct-v1:0",
		"xx.anthropic.claude-3-5-haiku-20241022-v1:0":      "xx.anthropic.claude-3-5-haiku-20241022-v1:0",
		"arn:aws:bedrock:us-east-1:1:inference-profile/us": "arn:aws:bedrock:us-east-1:1:inference-profile/us",
	} {
		if got := BedrockCountModel(in); got != want {
			t.Errorf("BedrockCountModel(%q) = %q, want %q", in, got, want)
		}
	}
}

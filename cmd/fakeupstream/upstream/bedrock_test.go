package upstream

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/bedrock"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
)

const (
	claudeBedrock = "anthropic.claude-3-5-sonnet-20240620-v1:0"
	claudeProfile = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-20250514-v1:0"
)

// awsConfig is a region and static credentials, as a gateway's bedrock
// channel would hold after resolving its credential chain.
func (fx *fixture) awsConfig(secret string) aws.Config {
	return aws.Config{
		Region:      DefaultAWSRegion,
		Credentials: credentials.NewStaticCredentialsProvider(DefaultAWSAccessKeyID, secret, ""),
		HTTPClient:  fx.client,
	}
}

// bedrockSDK is the Anthropic SDK on Bedrock: it signs with SigV4, rewrites
// /v1/messages to /model/{id}/invoke and decodes the event stream.
func (fx *fixture) bedrockSDK(secret string) *anthropic.Client {
	c := anthropic.NewClient(
		bedrock.WithConfig(fx.awsConfig(secret)),
		option.WithBaseURL(fx.ts.URL),
		option.WithHTTPClient(fx.client),
		option.WithMaxRetries(0),
		// The SDK copies its anthropic-version header into the body;
		// Bedrock requires its own version there.
		option.WithHeader("anthropic-version", BedrockAnthropicVersion),
	)
	return &c
}

// runtimeSDK is AWS's own bedrockruntime client, pointed at the fake.
func (fx *fixture) runtimeSDK(secret string) *bedrockruntime.Client {
	return bedrockruntime.NewFromConfig(fx.awsConfig(secret), func(o *bedrockruntime.Options) {
		o.BaseEndpoint = aws.String(fx.ts.URL)
		o.Retryer = aws.NopRetryer{}
	})
}

func bedrockBody(t *testing.T, extra map[string]any) []byte {
	t.Helper()
	body := map[string]any{
		"anthropic_version": BedrockAnthropicVersion, "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": "say something"}},
	}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The Anthropic SDK's Bedrock mode: a message and a stream, for a model id
// and for an inference-profile ARN (escaped "/" in one path segment), both
// signed and verified.
func TestBedrockAnthropicSDK(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, model := range []string{claudeBedrock + "|tokens=3", claudeProfile + "|tokens=3"} {
		msg, err := fx.bedrockSDK(DefaultAWSSecretAccessKey).Messages.New(t.Context(), userText(model, "say something"))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Content[0].Text != Answer(3) || msg.StopReason != "end_turn" || msg.Model != model {
			t.Fatalf("message %+v", msg)
		}
		streamed, types, err := accumulate(fx.bedrockSDK(DefaultAWSSecretAccessKey).Messages.NewStreaming(t.Context(), userText(model, "say something")))
		if err != nil || streamed.Content[0].Text != Answer(3) || types[0] != "message_start" || types[len(types)-1] != "message_stop" {
			t.Fatalf("stream %v %v %+v", err, types, streamed)
		}
	}
	log := fx.fake.Log()
	if r := log[3]; r.Dialect != DialectBedrock || r.Model != claudeProfile+"|tokens=3" || !r.Stream ||
		r.Path != "/model/"+claudeProfile+"|tokens=3/invoke-with-response-stream" || r.Anthropic.AnthropicVersion != BedrockAnthropicVersion {
		t.Fatalf("log %+v", r)
	}
}

// AWS's runtime client: InvokeModel, and InvokeModelWithResponseStream read
// through the SDK's event-stream reader, chunk by chunk.
func TestBedrockRuntimeSDK(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.runtimeSDK(DefaultAWSSecretAccessKey)
	out, err := c.InvokeModel(t.Context(), &bedrockruntime.InvokeModelInput{
		ModelId: aws.String(claudeBedrock + "|tokens=2"), Body: bedrockBody(t, nil), ContentType: aws.String("application/json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var msg anthropic.Message
	if err := json.Unmarshal(out.Body, &msg); err != nil || msg.Content[0].Text != Answer(2) {
		t.Fatalf("invoke %s, %v", out.Body, err)
	}
	events, err := fx.runtimeStream(t, claudeBedrock+"|tokens=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type)
		if ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(types, " ") != want || text.String() != Answer(2) {
		t.Fatalf("events %v, text %q", types, text.String())
	}
	if last := events[len(events)-1].RawJSON(); !strings.Contains(last, `"amazon-bedrock-invocationMetrics":{"firstByteLatency":120,"inputTokenCount":2`) {
		t.Fatalf("message_stop %s", last)
	}
}

// runtimeStream reads an InvokeModelWithResponseStream through the SDK and
// decodes each chunk as an Anthropic event; err is the stream's error.
func (fx *fixture) runtimeStream(t *testing.T, model string, extra map[string]any) ([]anthropic.MessageStreamEventUnion, error) {
	t.Helper()
	out, err := fx.runtimeSDK(DefaultAWSSecretAccessKey).InvokeModelWithResponseStream(t.Context(), &bedrockruntime.InvokeModelWithResponseStreamInput{
		ModelId: aws.String(model), Body: bedrockBody(t, extra), ContentType: aws.String("application/json"),
	})
	if err != nil {
		return nil, err
	}
	s := out.GetStream()
	defer s.Close()
	var events []anthropic.MessageStreamEventUnion
	for ev := range s.Events() {
		chunk, ok := ev.(*types.ResponseStreamMemberChunk)
		if !ok {
			t.Fatalf("event %T", ev)
		}
		var e anthropic.MessageStreamEventUnion
		if err := json.Unmarshal(chunk.Value.Bytes, &e); err != nil {
			t.Fatalf("chunk %q: %v", chunk.Value.Bytes, err)
		}
		events = append(events, e)
	}
	return events, s.Err()
}

// A wrong secret is InvalidSignatureException, an unknown key
// UnrecognizedClientException, a wrong region InvalidSignatureException:
// 403s with Bedrock's error type header, as the SDKs see them.
func TestBedrockSigV4(t *testing.T) {
	fx := newFixture(t, Options{})
	in := func() *bedrockruntime.InvokeModelInput {
		return &bedrockruntime.InvokeModelInput{ModelId: aws.String(claudeBedrock), Body: bedrockBody(t, nil), ContentType: aws.String("application/json")}
	}
	_, err := fx.runtimeSDK("not-the-secret").InvokeModel(t.Context(), in())
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" || !strings.Contains(apiErr.ErrorMessage(), "signature we calculated does not match") {
		t.Fatalf("wrong secret: %v", err)
	}
	cfg := fx.awsConfig(DefaultAWSSecretAccessKey)
	cfg.Credentials = credentials.NewStaticCredentialsProvider("AKIAUNKNOWN000000000", DefaultAWSSecretAccessKey, "")
	_, err = bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) { o.BaseEndpoint, o.Retryer = aws.String(fx.ts.URL), aws.NopRetryer{} }).InvokeModel(t.Context(), in())
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "UnrecognizedClientException" {
		t.Fatalf("unknown key: %v", err)
	}
	cfg.Credentials, cfg.Region = credentials.NewStaticCredentialsProvider(DefaultAWSAccessKeyID, DefaultAWSSecretAccessKey, ""), "eu-west-1"
	_, err = bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) { o.BaseEndpoint, o.Retryer = aws.String(fx.ts.URL), aws.NopRetryer{} }).InvokeModel(t.Context(), in())
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidSignatureException" || !strings.Contains(apiErr.ErrorMessage(), "region") {
		t.Fatalf("wrong region: %v", err)
	}
	// The Anthropic SDK sees the same 403 as an API error.
	_, err = fx.bedrockSDK("not-the-secret").Messages.New(t.Context(), userText(claudeBedrock, "x"))
	if e := asAnthropic(t, err); e.StatusCode != 403 || !strings.HasPrefix(e.Response.Header.Get("X-Amzn-Errortype"), "InvalidSignatureException:") {
		t.Fatalf("anthropic sdk: %v", err)
	}
	// Unsigned: no Authorization at all.
	resp, err := fx.client.Post(fx.ts.URL+"/model/"+claudeBedrock+"/invoke", "application/json", strings.NewReader(string(bedrockBody(t, nil))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.HasPrefix(resp.Header.Get("X-Amzn-Errortype"), "MissingAuthenticationTokenException") {
		t.Fatalf("unsigned: %d %v", resp.StatusCode, resp.Header)
	}
}

// Status faults arrive as Bedrock's modeled exceptions in the runtime SDK.
func TestBedrockStatusFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.runtimeSDK(DefaultAWSSecretAccessKey)
	tests := []struct {
		fault string
		check func(error) bool
		msg   string
	}{
		{"429", func(err error) bool { return errors.As(err, new(*types.ThrottlingException)) }, "Too many requests"},
		{"503", func(err error) bool { return errors.As(err, new(*types.ServiceUnavailableException)) }, ""},
		{"model-not-ready", func(err error) bool { return errors.As(err, new(*types.ModelNotReadyException)) }, ""},
		{"400", func(err error) bool { return errors.As(err, new(*types.ValidationException)) }, ""},
		{"context-length", func(err error) bool { return errors.As(err, new(*types.ValidationException)) }, "prompt is too long: 210000 tokens > 200000 maximum"},
		{"500", func(err error) bool { return errors.As(err, new(*types.InternalServerException)) }, ""},
		{"424", func(err error) bool { return errors.As(err, new(*types.ModelErrorException)) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.fault, func(t *testing.T) {
			_, err := c.InvokeModel(t.Context(), &bedrockruntime.InvokeModelInput{
				ModelId: aws.String(claudeBedrock + "|" + tt.fault), Body: bedrockBody(t, nil), ContentType: aws.String("application/json"),
			})
			if !tt.check(err) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("%v (%T)", err, errors.Unwrap(err))
			}
			_, err = fx.runtimeStream(t, claudeBedrock+"|"+tt.fault, nil)
			if !tt.check(err) {
				t.Fatalf("stream: %v", err)
			}
		})
	}
}

// Exception events mid-stream, before any content and after some, read
// through the runtime SDK's event-stream reader as modeled exceptions, and
// through the Anthropic SDK as API errors.
func TestBedrockStreamExceptions(t *testing.T) {
	fx := newFixture(t, Options{})
	events, err := fx.runtimeStream(t, claudeBedrock+"|stream-error-event|error=throttlingException", nil)
	if !errors.As(err, new(*types.ThrottlingException)) || len(events) != 3 || events[0].Type != "message_start" {
		t.Fatalf("before content: %v, %d events", err, len(events))
	}
	events, err = fx.runtimeStream(t, claudeBedrock+"|stream-error-after=2|error=modelStreamErrorException", nil)
	if !errors.As(err, new(*types.ModelStreamErrorException)) || events[len(events)-1].Delta.Text != "tok2 " {
		t.Fatalf("after content: %v", err)
	}
	_, err = fx.runtimeStream(t, claudeBedrock+"|stream-error", nil)
	if !errors.As(err, new(*types.InternalServerException)) {
		t.Fatalf("default exception: %v", err)
	}
	_, err = fx.runtimeStream(t, claudeBedrock+"|malformed", nil)
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("malformed: %v", err)
	}
	msg, _, err := accumulate(fx.bedrockSDK(DefaultAWSSecretAccessKey).Messages.NewStreaming(t.Context(), userText(claudeBedrock+"|stream-error-after=1|error=internalServerException", "x")))
	if e := asAnthropic(t, err); e.Type() != "internalServerException" || msg.Content[0].Text != Answer(1) {
		t.Fatalf("anthropic sdk: %v", err)
	}
	_, err = fx.runtimeStream(t, claudeBedrock+"|stream-error|error=overloaded_error", nil)
	if !errors.As(err, new(*types.ValidationException)) && !strings.Contains(err.Error(), "not a Bedrock stream exception") {
		t.Fatalf("anthropic error type on bedrock: %v", err)
	}
}

// Bodies Bedrock refuses: a model in the body, a missing or wrong
// anthropic_version, a URL image (Bedrock takes base64 only).
func TestBedrockValidation(t *testing.T) {
	fx := newFixture(t, Options{})
	c := fx.runtimeSDK(DefaultAWSSecretAccessKey)
	img := map[string]any{"role": "user", "content": []any{map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": "https://example.com/a.png"}}}}
	for _, tt := range []struct {
		name  string
		extra map[string]any
		msg   string
	}{
		{"model in body", map[string]any{"model": "claude"}, "extraneous key [model] is not permitted"},
		{"stream in body", map[string]any{"stream": true}, "extraneous key [stream] is not permitted"},
		{"wrong version", map[string]any{"anthropic_version": "2023-06-01"}, "2023-06-01 is not a valid enum value"},
		{"url image", map[string]any{"messages": []any{img}}, "URL image sources are not supported on bedrock"},
	} {
		_, err := c.InvokeModel(t.Context(), &bedrockruntime.InvokeModelInput{
			ModelId: aws.String(claudeBedrock), Body: bedrockBody(t, tt.extra), ContentType: aws.String("application/json"),
		})
		var ve *types.ValidationException
		if !errors.As(err, &ve) || !strings.Contains(aws.ToString(ve.Message), tt.msg) {
			t.Fatalf("%s: %v", tt.name, err)
		}
	}
	// The Anthropic SDK's default anthropic-version is not Bedrock's.
	c2 := anthropic.NewClient(bedrock.WithConfig(fx.awsConfig(DefaultAWSSecretAccessKey)), option.WithBaseURL(fx.ts.URL),
		option.WithHTTPClient(fx.client), option.WithMaxRetries(0))
	_, err := c2.Messages.New(t.Context(), userText(claudeBedrock, "x"))
	if e := asAnthropic(t, err); e.StatusCode != http.StatusBadRequest {
		t.Fatalf("sdk default version: %v", err)
	}
}

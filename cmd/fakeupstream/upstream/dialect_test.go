package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// rawRequest builds a valid streaming or non-streaming request for model
// in dialect d, credentials included, as a gateway would send it.
func (fx *fixture) rawRequest(t *testing.T, ctx context.Context, d Dialect, model string, stream bool) *http.Request {
	t.Helper()
	user := []any{map[string]any{"role": "user", "content": "say something"}}
	var path string
	body := map[string]any{"max_tokens": 100, "messages": user}
	switch d {
	case DialectOpenAI:
		path, body = "/v1/chat/completions", map[string]any{"model": model, "stream": stream, "messages": user}
	case DialectAzure:
		path, body = "/openai/deployments/"+model+"/chat/completions?api-version="+azureVersion, map[string]any{"stream": stream, "messages": user}
	case DialectAnthropic:
		path, body["model"], body["stream"] = "/v1/messages", model, stream
	case DialectBedrock:
		op := "invoke"
		if stream {
			op = "invoke-with-response-stream"
		}
		path, body["anthropic_version"] = "/model/"+model+"/"+op, BedrockAnthropicVersion
	case DialectVertex:
		op := "rawPredict"
		if stream {
			op = "streamRawPredict"
		}
		path, body["anthropic_version"], body["stream"] = "/v1/projects/fake-project/locations/us-east5/publishers/anthropic/models/"+model+":"+op, VertexAnthropicVersion, stream
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fx.ts.URL+strings.ReplaceAll(path, "|", "%7C"), bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch d {
	case DialectAzure:
		req.Header.Set("Api-Key", DefaultAzureAPIKey)
	case DialectAnthropic:
		req.Header.Set("X-Api-Key", DefaultAnthropicAPIKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	case DialectBedrock:
		sum := sha256.Sum256(b)
		creds := aws.Credentials{AccessKeyID: DefaultAWSAccessKeyID, SecretAccessKey: DefaultAWSSecretAccessKey}
		if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "bedrock", DefaultAWSRegion, time.Now()); err != nil {
			t.Fatal(err)
		}
	case DialectVertex:
		req.Header.Set("Authorization", "Bearer "+fx.googleToken(t))
	}
	return req
}

// googleToken mints a token through the fake's endpoint with x/oauth2.
func (fx *fixture) googleToken(t *testing.T) string {
	t.Helper()
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, fx.client)
	creds, err := google.CredentialsFromJSONWithType(ctx, fx.serviceAccount(t), google.ServiceAccount, cloudScope)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := creds.TokenSource.Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// events reads a stream as a list of "event" names (SSE "event:" lines,
// OpenAI chunks as "chunk", Bedrock chunks by their Anthropic type and
// exceptions as "exception:TYPE") until it ends; err is the read error.
func events(d Dialect, r io.Reader) (out []string, err error) {
	if d == DialectBedrock {
		dec := eventstream.NewDecoder()
		for {
			msg, err := dec.Decode(r, nil)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				return out, err
			}
			if msg.Headers.Get(":message-type").String() == "exception" {
				out = append(out, "exception:"+msg.Headers.Get(":exception-type").String())
				continue
			}
			var chunk struct{ Bytes []byte }
			var ev struct{ Type string }
			if json.Unmarshal(msg.Payload, &chunk) != nil || json.Unmarshal(chunk.Bytes, &ev) != nil {
				return out, errors.New("bad chunk " + string(msg.Payload))
			}
			out = append(out, ev.Type)
		}
	}
	fs, err := frames(r)
	for _, f := range fs {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "event: "), "\n")
		switch {
		case strings.HasPrefix(f, "event: "):
			out = append(out, name)
		case strings.HasPrefix(f, ": "):
			out = append(out, "comment")
		case f == "data: [DONE]":
			out = append(out, "[DONE]")
		case strings.HasPrefix(f, `data: {"error"`):
			out = append(out, "error")
		default:
			out = append(out, "chunk")
		}
	}
	return out, err
}

var allDialects = []Dialect{DialectOpenAI, DialectAzure, DialectAnthropic, DialectBedrock, DialectVertex}

// The generic faults behave alike in every dialect, each in its framing:
// the wire a gateway's gate and classifier read.
func TestDialectStreamFaults(t *testing.T) {
	fx := newFixture(t, Options{})
	anth := func(deltas int, end ...string) string {
		ev := []string{"message_start", "content_block_start", "ping"}
		for range deltas {
			ev = append(ev, "content_block_delta")
		}
		return strings.Join(append(ev, end...), " ")
	}
	openai := func(head string, chunks int, end ...string) string {
		var ev []string
		if head != "" {
			ev = append(ev, head)
		}
		ev = append(ev, "chunk") // role chunk
		for range chunks {
			ev = append(ev, "chunk")
		}
		return strings.Join(append(ev, end...), " ")
	}
	tests := []struct {
		fault string
		want  map[Dialect]string
		eof   bool // ends with a read error
	}{
		{"tokens=2", map[Dialect]string{
			DialectOpenAI:    openai("", 2, "chunk", "[DONE]"),
			DialectAzure:     openai("chunk", 2, "chunk", "[DONE]"),
			DialectAnthropic: anth(2, "content_block_stop", "message_delta", "message_stop"),
		}, false},
		{"tokens=4|cut=2", map[Dialect]string{
			DialectOpenAI:    openai("", 2),
			DialectAzure:     openai("chunk", 2),
			DialectAnthropic: anth(2),
		}, true},
		{"tokens=2|cut-before-finish", map[Dialect]string{
			DialectOpenAI:    openai("", 2),
			DialectAzure:     openai("chunk", 2),
			DialectAnthropic: anth(2, "content_block_stop"),
		}, true},
		{"stream-error", map[Dialect]string{
			DialectOpenAI:    openai("", 0, "error"),
			DialectAzure:     openai("chunk", 0, "error"),
			DialectAnthropic: anth(0, "error"),
			DialectBedrock:   anth(0, "exception:internalServerException"),
		}, false},
		{"tokens=3|stream-error-after=1", map[Dialect]string{
			DialectOpenAI:    openai("", 1, "error"),
			DialectAzure:     openai("chunk", 1, "error"),
			DialectAnthropic: anth(1, "error"),
			DialectBedrock:   anth(1, "exception:internalServerException"),
		}, false},
		{"tokens=1|no-done", map[Dialect]string{
			DialectOpenAI:    openai("", 1, "chunk"),
			DialectAzure:     openai("chunk", 1, "chunk"),
			DialectAnthropic: anth(1, "content_block_stop", "message_delta"),
		}, false},
	}
	for _, tt := range tests {
		for _, d := range allDialects {
			want, ok := tt.want[d]
			if !ok {
				if d != DialectBedrock && d != DialectVertex {
					continue
				}
				want = tt.want[DialectAnthropic] // the same events, other framing
			}
			t.Run(tt.fault+"/"+string(d), func(t *testing.T) {
				resp, err := fx.client.Do(fx.rawRequest(t, t.Context(), d, "m|"+tt.fault, true))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := events(d, resp.Body)
				if tt.eof != (err != nil) || strings.Join(got, " ") != want {
					t.Fatalf("status %d\n got %v (err %v)\nwant %s", resp.StatusCode, got, err, want)
				}
			})
		}
	}
}

// Transport faults and the injected clock work the same on every path.
func TestDialectTransportAndTime(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, d := range allDialects {
		t.Run(string(d), func(t *testing.T) {
			if resp, err := fx.client.Do(fx.rawRequest(t, t.Context(), d, "m|reset", true)); err == nil {
				resp.Body.Close()
				t.Fatalf("reset answered %d", resp.StatusCode)
			}
			resp, err := fx.client.Do(fx.rawRequest(t, t.Context(), d, "m|short-body", false))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadAll(resp.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short-body: %v", err)
			}
			resp.Body.Close()

			// slow-first-token: the head at once, the first delta after the clock moves.
			resp, err = fx.client.Do(fx.rawRequest(t, t.Context(), d, "m|tokens=1|slow-first-token=5s", true))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("slow: %d", resp.StatusCode)
			}
			if err := fx.clock.BlockUntilContext(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			fx.clock.Advance(5 * time.Second)
			got, err := events(d, resp.Body)
			if err != nil || len(got) < 3 {
				t.Fatalf("slow: %v %v", got, err)
			}
		})
	}
}

// A Bedrock endless frame declares its length and never delivers it: the
// SDK's decoder waits inside one message until the client gives up.
func TestBedrockEndlessFrame(t *testing.T) {
	fx := newFixture(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, err := fx.client.Do(fx.rawRequest(t, ctx, DialectBedrock, "m|endless-frame", true))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	dec := eventstream.NewDecoder()
	for range 3 { // message_start, content_block_start, ping
		if _, err := dec.Decode(br, nil); err != nil {
			t.Fatal(err)
		}
	}
	prelude := make([]byte, 4)
	if _, err := io.ReadFull(br, prelude); err != nil {
		t.Fatal(err)
	}
	declared := int(prelude[0])<<24 | int(prelude[1])<<16 | int(prelude[2])<<8 | int(prelude[3])
	if _, err := io.ReadFull(br, make([]byte, declared-4-4)); err != nil { // all but the CRC arrives
		t.Fatal(err)
	}
	cancel()
	if n, err := io.ReadFull(br, make([]byte, 4)); err == nil {
		t.Fatalf("the frame completed (%d more bytes)", n)
	}
}

// once/times and Attempts count the model from the URL (deployment,
// model id) exactly as sent, so a chain's hops are countable per dialect.
func TestDialectAttempts(t *testing.T) {
	fx := newFixture(t, Options{})
	for _, d := range allDialects {
		model := "m-" + string(d) + "|429-once"
		for i, want := range []int{429, 200} {
			resp, err := fx.client.Do(fx.rawRequest(t, t.Context(), d, model, false))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Fatalf("%s attempt %d: %d", d, i+1, resp.StatusCode)
			}
		}
		if fx.fake.Attempts(model) != 2 {
			t.Fatalf("%s: attempts %d", d, fx.fake.Attempts(model))
		}
	}
	// A Bedrock chunk is base64 JSON of one Anthropic event.
	resp, err := fx.client.Do(fx.rawRequest(t, t.Context(), DialectBedrock, "m|tokens=1", true))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, err := eventstream.NewDecoder().Decode(resp.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	var chunk struct{ Bytes, P string }
	_ = json.Unmarshal(msg.Payload, &chunk)
	ev, _ := base64.StdEncoding.DecodeString(chunk.Bytes)
	if msg.Headers.Get(":event-type").String() != "chunk" || msg.Headers.Get(":content-type").String() != "application/json" ||
		!bytes.HasPrefix(ev, []byte(`{"message":{"id":"msg_fake_`)) || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("first message %v %s", msg.Headers, ev)
	}
}

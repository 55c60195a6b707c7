package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/hopgate/hopgate/dispatch/config"
)

// gen_ai.provider.name of each family (OpenTelemetry GenAI conventions).
const (
	GenAIOpenAI    = "openai"
	GenAIAzure     = "azure.ai.openai"
	GenAIAnthropic = "anthropic"
	GenAIBedrock   = "aws.bedrock"
	GenAIVertex    = "gcp.vertex_ai"
	// GenAIElevenLabs is not (yet) in the conventions' list; the
	// convention is the provider's own lowercase name.
	GenAIElevenLabs = "elevenlabs"
)

// Versions of the Anthropic API hopgate speaks.
const (
	// AnthropicVersion is the anthropic-version header of the direct API
	// when the client sent none.
	AnthropicVersion = "2023-06-01"
	// BedrockVersion and VertexVersion go in the body on those clouds.
	BedrockVersion = "bedrock-2023-05-31"
	VertexVersion  = "vertex-2023-10-16"
)

// Scopes of the cloud credentials.
const (
	vertexScope = "https://www.googleapis.com/auth/cloud-platform"
	azureScope  = "https://cognitiveservices.azure.com/.default"
)

// ErrCredential wraps a failure to obtain a channel's credential (a token
// refresh, the AWS credential chain): the hop fails as retryable and says so.
var ErrCredential = errors.New("channel credential unavailable")

// Upstream is one channel as hopgate speaks to it: the family's URLs,
// credential and body conventions. It is safe for concurrent use; the
// credentials it holds (AWS credential cache, Google and Entra ID token
// sources) cache and refresh tokens ahead of expiry.
type Upstream struct {
	ch *config.Channel

	aws    aws.CredentialsProvider // bedrock
	signer *v4.Signer
	google oauth2.TokenSource // vertex
	entra  azcore.TokenCredential
	// bearer is "Bearer " and bearerKey (the openai channel's key at
	// New), built once rather than per hop; SetHeaders uses it only while
	// the key it sends is still that one.
	bearer, bearerKey string
}

// Options are the injectable parts of credential resolution (tests).
type Options struct {
	// AWSConfig loads the AWS configuration (default: the SDK's default
	// chain: environment, shared config/profile, web identity, container
	// and instance roles).
	AWSConfig func(ctx context.Context, region string) (aws.Config, error)
	// GoogleCredentials finds Application Default Credentials (default:
	// google.FindDefaultCredentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's
	// file, workload identity, the metadata server).
	GoogleCredentials func(ctx context.Context, scopes ...string) (*google.Credentials, error)
	// HTTPClient is what Google token refreshes use (default: a client
	// whose requests end after tokenRefreshTimeout).
	HTTPClient *http.Client
}

// tokenRefreshTimeout bounds one Google token refresh by default: the
// token source refreshes under a lock, so a token endpoint that accepts a
// connection and never answers would otherwise hold every hop of the
// channel, with no header timeout yet running.
const tokenRefreshTimeout = 10 * time.Second

// New resolves ch's credential chain (not its tokens: those are fetched on
// first use and refreshed ahead of expiry). An error names the channel and
// what is missing.
func New(ctx context.Context, ch *config.Channel, o Options) (*Upstream, error) {
	u := &Upstream{ch: ch}
	if ch.Provider == config.ProviderOpenAI && ch.APIKey != "" {
		u.bearer, u.bearerKey = "Bearer "+ch.APIKey, ch.APIKey
	}
	switch ch.Provider {
	case config.ProviderBedrock:
		load := o.AWSConfig
		if load == nil {
			load = func(ctx context.Context, region string) (aws.Config, error) {
				return awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
			}
		}
		cfg, err := load(ctx, ch.Region)
		if err != nil {
			return nil, fmt.Errorf("channel %q: AWS configuration: %w", ch.ID, err)
		}
		if cfg.Credentials == nil {
			return nil, fmt.Errorf("channel %q: no AWS credentials in the default chain", ch.ID)
		}
		u.aws = aws.NewCredentialsCache(cfg.Credentials)
		u.signer = v4.NewSigner()
	case config.ProviderVertex:
		find := o.GoogleCredentials
		if find == nil {
			find = google.FindDefaultCredentials
		}
		hc := o.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: tokenRefreshTimeout}
		}
		ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
		creds, err := find(ctx, vertexScope)
		if err != nil {
			return nil, fmt.Errorf("channel %q: Google Application Default Credentials: %w", ch.ID, err)
		}
		// ReuseTokenSource caches the token and refreshes it before it
		// expires (oauth2's expiry delta), one refresh at a time.
		u.google = oauth2.ReuseTokenSource(nil, creds.TokenSource)
	case config.ProviderAzure:
		if ch.EntraID {
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("channel %q: Microsoft Entra ID credential: %w", ch.ID, err)
			}
			u.entra = cred
		}
	}
	return u, nil
}

// GenAIName is the family's gen_ai.provider.name.
func (u *Upstream) GenAIName() string { return GenAIName(u.ch.Provider) }

// GenAIName is gen_ai.provider.name of a config provider.
func GenAIName(provider string) string {
	switch provider {
	case config.ProviderAzure:
		return GenAIAzure
	case config.ProviderAnthropic:
		return GenAIAnthropic
	case config.ProviderBedrock:
		return GenAIBedrock
	case config.ProviderVertex:
		return GenAIVertex
	case config.ProviderElevenLabs:
		return GenAIElevenLabs
	}
	return GenAIOpenAI
}

// Anthropic reports whether the channel speaks Anthropic's Messages API.
func (u *Upstream) Anthropic() bool { return config.AnthropicFamily(u.ch.Provider) }

// EventStream reports whether a streamed answer arrives in the AWS
// event-stream framing (Bedrock) rather than SSE.
func (u *Upstream) EventStream() bool { return u.ch.Provider == config.ProviderBedrock }

// Request is what a hop sends.
type Request struct {
	// Path is the OpenAI API path after /v1 ("/chat/completions"); the
	// Anthropic family always serves Messages.
	Path string
	// Model is the chain entry's upstream model (the Azure deployment).
	Model  string
	Stream bool
	// Body is in the channel's dialect, the model field already set for
	// openai, azure and anthropic; Prepare adapts it for bedrock and
	// vertex.
	Body        []byte
	ContentType string
	Accept      string
	UserAgent   string
	// AnthropicVersion and Beta come from an Anthropic client's headers.
	AnthropicVersion string
	Beta             []string
	// CountTokens: the family's token-counting endpoint instead of
	// Messages (count.go).
	CountTokens bool
	// VoiceID and OutputFormat (elevenlabs): the entry's voice id for the
	// client's voice, the output_format for its response_format.
	VoiceID, OutputFormat string
}

// URL is the upstream URL of a request.
func (u *Upstream) URL(r *Request) string {
	base := u.ch.BaseURL
	if r.CountTokens && u.Anthropic() {
		return u.countURL(r)
	}
	switch u.ch.Provider {
	case config.ProviderAzure:
		if u.ch.APIVersion == "" {
			return base + "/openai/v1" + r.Path
		}
		version := "?api-version=" + url.QueryEscape(u.ch.APIVersion)
		if !azureDeploymentPaths[r.Path] {
			return base + "/openai" + r.Path + version // the deployment is the body's model
		}
		return base + "/openai/deployments/" + url.PathEscape(r.Model) + r.Path + version
	case config.ProviderAnthropic:
		return base + "/v1/messages"
	case config.ProviderBedrock:
		method := "/invoke"
		if r.Stream {
			method = "/invoke-with-response-stream"
		}
		return base + "/model/" + url.PathEscape(r.Model) + method
	case config.ProviderElevenLabs:
		return elevenLabsURL(base, r)
	case config.ProviderVertex:
		spec := ":rawPredict"
		if r.Stream {
			spec = ":streamRawPredict"
		}
		return base + "/v1/projects/" + url.PathEscape(u.ch.Project) + "/locations/" + url.PathEscape(u.ch.Region) +
			"/publishers/anthropic/models/" + url.PathEscape(r.Model) + spec
	}
	return base + r.Path
}

// azureDeploymentPaths are the operations the dated Azure OpenAI API
// serves under /openai/deployments/{deployment}; the others (the Responses
// API) are at /openai/{operation} with the deployment as the body's model,
// as openai-go's azure package routes them.
var azureDeploymentPaths = map[string]bool{
	"/chat/completions": true, "/completions": true, "/embeddings": true,
	"/images/generations": true, "/audio/speech": true, "/audio/transcriptions": true,
}

// Prepare adapts an Anthropic-dialect body to the cloud that serves it:
// Bedrock and Vertex take the model in the URL and the API version in the
// body (Bedrock also the stream flag in the URL, and the betas in the body).
// Other families' bodies are returned unchanged.
func (u *Upstream) Prepare(body []byte, r *Request) ([]byte, []string, error) {
	var version string
	switch u.ch.Provider {
	case config.ProviderBedrock:
		version = BedrockVersion
	case config.ProviderVertex:
		version = VertexVersion
	default:
		return body, nil, nil
	}
	if r.CountTokens {
		return u.prepareCount(body, r)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, nil, fmt.Errorf("request body is not a JSON object")
	}
	delete(top, "model")
	if u.ch.Provider == config.ProviderBedrock {
		delete(top, "stream")
	}
	if _, ok := top["anthropic_version"]; !ok {
		top["anthropic_version"] = json.RawMessage(`"` + version + `"`)
	}
	betas, dropped := AllowedBetas(u.ch.Provider, r.Beta)
	if len(betas) > 0 && u.ch.Provider == config.ProviderBedrock {
		b, _ := json.Marshal(betas)
		top["anthropic_beta"] = b
	}
	out, err := json.Marshal(top)
	return out, dropped, err
}

// CloudBetas are the anthropic-beta values passed to Bedrock and Vertex,
// which refuse betas they do not know (a 400 for the whole request): any
// other beta a client sends is dropped for them and recorded on the hop's
// span. The direct API gets every beta.
var CloudBetas = map[string]bool{
	"computer-use-2024-10-22": true, "computer-use-2025-01-24": true, "context-1m-2025-08-07": true,
	"context-management-2025-06-27": true, "fine-grained-tool-streaming-2025-05-14": true,
	"interleaved-thinking-2025-05-14": true, "output-128k-2025-02-19": true, "token-efficient-tools-2025-02-19": true,
}

// AllowedBetas splits a client's anthropic-beta values into those the
// provider accepts and those dropped: the direct API takes every beta;
// Bedrock and Vertex only their allow-list; other families none.
func AllowedBetas(provider string, betas []string) (keep, dropped []string) {
	var allow map[string]bool
	switch provider {
	case config.ProviderAnthropic:
		return betas, nil
	case config.ProviderBedrock, config.ProviderVertex:
		allow = CloudBetas
	}
	for _, b := range betas {
		if allow[b] {
			keep = append(keep, b)
		} else {
			dropped = append(dropped, b)
		}
	}
	return keep, dropped
}

// SetHeaders sets the request's headers and credential: Bearer (openai),
// api-key or an Entra ID token (azure), x-api-key and anthropic-version
// (anthropic), SigV4 (bedrock, over the final body), a Google OAuth token
// (vertex). A credential that cannot be obtained is ErrCredential.
func (u *Upstream) SetHeaders(ctx context.Context, req *http.Request, r *Request, body []byte, now time.Time) error {
	h := req.Header
	// One backing array for the values instead of one per Set; each value
	// is capped at length 1, so an append elsewhere copies it.
	vals := [...]string{r.ContentType, r.Accept, r.UserAgent, ""}
	hv := vals[:]
	h["Content-Type"] = hv[0:1:1]
	h["Accept"] = hv[1:2:2]
	h["User-Agent"] = hv[2:3:3]
	key := u.ch.APIKey
	switch u.ch.Provider {
	case config.ProviderOpenAI:
		if key != "" {
			if key == u.bearerKey {
				hv[3] = u.bearer
			} else {
				hv[3] = "Bearer " + key
			}
			h["Authorization"] = hv[3:4:4]
		}
	case config.ProviderAzure:
		if err := u.setAzureCredential(ctx, h); err != nil {
			return err
		}
	case config.ProviderAnthropic:
		h.Set("x-api-key", key)
		v := r.AnthropicVersion
		if v == "" {
			v = AnthropicVersion
		}
		h.Set("anthropic-version", v)
		if len(r.Beta) > 0 {
			h.Set("anthropic-beta", strings.Join(r.Beta, ","))
		}
	case config.ProviderElevenLabs:
		h.Set("xi-api-key", key)
	case config.ProviderVertex:
		tok, err := u.googleToken(ctx)
		if err != nil {
			return fmt.Errorf("%w: Google OAuth token refresh: %w", ErrCredential, err)
		}
		h.Set("Authorization", "Bearer "+tok.AccessToken)
		if betas, _ := AllowedBetas(config.ProviderVertex, r.Beta); len(betas) > 0 {
			h.Set("anthropic-beta", strings.Join(betas, ","))
		}
	case config.ProviderBedrock:
		if r.Stream {
			h.Set("X-Amzn-Bedrock-Accept", "application/json")
			h.Set("Accept", "application/vnd.amazon.eventstream")
		}
		creds, err := u.aws.Retrieve(ctx)
		if err != nil {
			return fmt.Errorf("%w: AWS credentials: %w", ErrCredential, err)
		}
		sum := sha256.Sum256(body)
		if err := u.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "bedrock", u.ch.Region, now); err != nil {
			return fmt.Errorf("%w: SigV4 signing: %w", ErrCredential, err)
		}
	}
	return nil
}

// setAzureCredential sets an Azure channel's credential: an Entra ID
// token when the channel uses one, else its api-key.
func (u *Upstream) setAzureCredential(ctx context.Context, h http.Header) error {
	if u.entra == nil {
		h.Set("api-key", u.ch.APIKey)
		return nil
	}
	tok, err := u.entra.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{azureScope}})
	if err != nil {
		return fmt.Errorf("%w: Entra ID token: %w", ErrCredential, err)
	}
	h.Set("Authorization", "Bearer "+tok.Token)
	return nil
}

// googleToken is the channel's Google token, or ctx's error when the hop
// ends first: oauth2's TokenSource takes no context, so a refresh runs on
// its own goroutine, which ends with the refresh (bounded by the token
// client's timeout). A cached token costs that goroutine too: a Vertex
// hop is a cloud call of seconds, the goroutine a microsecond.
func (u *Upstream) googleToken(ctx context.Context) (*oauth2.Token, error) {
	type result struct {
		tok *oauth2.Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		tok, err := u.google.Token()
		done <- result{tok, err}
	}()
	select {
	case r := <-done:
		return r.tok, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// maxDetail bounds the message of an ErrorDetail.
const maxDetail = 300

// ErrorDetail names an upstream error answer in the provider's own terms
// (its error type and message), for the hop's span: a wrong SigV4
// signature or an expired token is visible as such. Empty when the body
// says nothing readable.
func ErrorDetail(h http.Header, body []byte) string {
	typ := h.Get("X-Amzn-Errortype")
	if i := strings.IndexAny(typ, ":"); i >= 0 {
		typ = typ[:i]
	}
	var e struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
		Type    string          `json:"__type"`
		// ElevenLabs: {"detail":{"status":"system_busy","message":…}}.
		Detail json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		msg = e.Message
		if len(e.Detail) > 0 && e.Detail[0] == '{' {
			var d struct{ Status, Message string }
			if json.Unmarshal(e.Detail, &d) == nil {
				typ, msg = d.Status, d.Message
			}
		}
		if typ == "" {
			typ = e.Type
		}
		if len(e.Error) > 0 {
			var inner struct {
				Type    string          `json:"type"`
				Code    json.RawMessage `json:"code"`
				Status  string          `json:"status"`
				Message string          `json:"message"`
			}
			if json.Unmarshal(e.Error, &inner) == nil {
				if inner.Message != "" {
					msg = inner.Message
				}
				switch {
				case inner.Type != "":
					typ = inner.Type
				case inner.Status != "":
					typ = inner.Status
				case len(inner.Code) > 0 && inner.Code[0] == '"':
					_ = json.Unmarshal(inner.Code, &typ)
				}
			} else if s := strings.Trim(string(bytes.TrimSpace(e.Error)), `"`); s != "" {
				msg = s
			}
		}
	}
	if len(msg) > maxDetail {
		// Cut at a rune boundary: the detail goes on spans and logs, and
		// an exporter may refuse a string that is not valid UTF-8.
		n := maxDetail
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	switch {
	case typ != "" && msg != "":
		return typ + ": " + msg
	case typ != "":
		return typ
	}
	return msg
}

// AWSErrorType is the exception an AWS REST-JSON error answer names
// (Bedrock's ServiceQuotaExceededException, ValidationException, …),
// resolved as the AWS SDK for Go v2 does: the X-Amzn-ErrorType header,
// else the body's __type, else its code; without a namespace
// ("com.amazon…#Name") or a URI suffix ("Name:http://…"). Empty when the
// answer names none.
func AWSErrorType(h http.Header, body []byte) string {
	typ := h.Get("X-Amzn-Errortype")
	if typ == "" {
		var e struct {
			Type string          `json:"__type"`
			Code json.RawMessage `json:"code"`
		}
		if json.Unmarshal(body, &e) == nil {
			typ = e.Type
			if typ == "" && len(e.Code) > 0 && e.Code[0] == '"' {
				_ = json.Unmarshal(e.Code, &typ)
			}
		}
	}
	if i := strings.IndexByte(typ, ':'); i >= 0 {
		typ = typ[:i]
	}
	if i := strings.IndexByte(typ, '#'); i >= 0 {
		typ = typ[i+1:]
	}
	return typ
}

package config

import (
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Provider families (channels[].provider, DESIGN.md §8).
const (
	ProviderOpenAI    = "openai"    // OpenAI-compatible HTTP API, Bearer key
	ProviderAzure     = "azure"     // Azure OpenAI: deployment URLs + api-version, or the v1 API; api-key or Entra ID
	ProviderAnthropic = "anthropic" // Anthropic Messages, x-api-key
	ProviderBedrock   = "bedrock"   // Claude on AWS Bedrock, SigV4 from the AWS default credential chain
	ProviderVertex    = "vertex"    // Claude on Google Vertex AI, OAuth from Application Default Credentials
	// ProviderElevenLabs serves audio_speech only (DESIGN.md §15), xi-api-key.
	ProviderElevenLabs = "elevenlabs"
)

var providers = []string{ProviderOpenAI, ProviderAzure, ProviderAnthropic, ProviderBedrock, ProviderVertex, ProviderElevenLabs}

// AnthropicFamily reports whether a provider speaks Anthropic's Messages
// API (bodies and stream events), whoever operates it.
func AnthropicFamily(provider string) bool {
	return provider == ProviderAnthropic || provider == ProviderBedrock || provider == ProviderVertex
}

// regionRE: an AWS region or Google location goes into a host name.
var regionRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// Operations a model may serve (model.operations).
const (
	OpChat                = "chat"
	OpCompletions         = "completions"
	OpEmbeddings          = "embeddings"
	OpImages              = "images"
	OpAudioSpeech         = "audio_speech"
	OpAudioTranscriptions = "audio_transcriptions"
	OpResponses           = "responses"
)

var operations = []string{OpChat, OpCompletions, OpEmbeddings, OpImages, OpAudioSpeech, OpAudioTranscriptions, OpResponses, OpRealtime}

func knownOperation(op string) bool {
	for _, o := range operations {
		if o == op {
			return true
		}
	}
	return false
}

func joinOps() string { return strings.Join(operations, ", ") }

var (
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	channelIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// modelNameRE: a model name travels in the X-Hopgate-Model header, whose
	// value must be ASCII (RFC 9110 §5.5); model ids of every provider are.
	modelNameRE = regexp.MustCompile(`^[\x21-\x7e]+$`)
)

// hostPort reads a listen address: host:port with a numeric port (the host
// may be empty, meaning every interface).
func (p *parser) hostPort(n *yaml.Node, what string) val[string] {
	v := p.str(n, what)
	if !v.set {
		return v
	}
	_, port, err := net.SplitHostPort(v.v)
	if err == nil {
		if pn, perr := strconv.Atoi(port); perr != nil || pn < 0 || pn > 65535 {
			err = strconv.ErrRange
		}
	}
	if err != nil {
		p.errorf(v.node, "%s must be host:port like 127.0.0.1:8080, not %q", what, v.v)
		return val[string]{}
	}
	return v
}

// baseURL reads an upstream base URL: absolute http(s), no query or
// fragment (the client appends paths such as /chat/completions), no
// userinfo (that would be an inline credential), trailing slash trimmed.
func (p *parser) baseURL(n *yaml.Node, what string) val[string] {
	v := p.str(n, what)
	if !v.set {
		return v
	}
	u, err := url.Parse(v.v)
	var why string
	switch {
	case err != nil:
		why = "it does not parse"
	case u.Scheme == "" || u.Host == "" && u.Opaque == "" && (u.Scheme == "http" || u.Scheme == "https"):
		why = "it must be absolute, like https://api.openai.com/v1"
	case u.Scheme != "http" && u.Scheme != "https":
		why = "the scheme must be http or https"
	case u.Opaque != "":
		why = "it must be absolute, like https://api.openai.com/v1"
	case u.User != nil:
		why = "credentials in the URL are not allowed; use api_key_env"
	case u.RawQuery != "" || u.ForceQuery:
		why = "it must not have a query"
	case u.Fragment != "" || strings.Contains(v.v, "#"):
		why = "it must not have a fragment"
	}
	if why != "" {
		p.errorf(v.node, "%s is not a valid base URL (%q): %s", what, v.v, why)
		return val[string]{}
	}
	v.v = strings.TrimRight(v.v, "/")
	return v
}

// traceURL reads telemetry.trace_url: an absolute http(s) URL (a link
// on the admin pages) that contains {trace_id} where the trace id goes.
func (p *parser) traceURL(n *yaml.Node, what string) val[string] {
	v := p.str(n, what)
	if !v.set {
		return v
	}
	var why string
	u, err := url.Parse(strings.ReplaceAll(v.v, TraceURLPlaceholder, "0"))
	switch {
	case !strings.Contains(v.v, TraceURLPlaceholder):
		why = "it must contain " + TraceURLPlaceholder + ", where the trace id goes"
	case err != nil:
		why = "it does not parse"
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		why = "it must be an absolute http or https URL, like http://127.0.0.1:16686/trace/{trace_id}"
	case u.User != nil:
		why = "credentials in the URL are not allowed"
	}
	if why != "" {
		p.errorf(v.node, "%s is not a valid trace URL template (%q): %s", what, v.v, why)
		return val[string]{}
	}
	return v
}

// envName reads the name of an environment variable (not its value).
func (p *parser) envName(n *yaml.Node, what string) val[string] {
	v := p.str(n, what)
	if v.set && !envNameRE.MatchString(v.v) {
		p.errorf(v.node, "%s must name an environment variable (letters, digits, _), not %q", what, v.v)
		return val[string]{}
	}
	return v
}

package upstream

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Dialect is the provider API a request arrived in, chosen by its URL path.
type Dialect string

// The dialects the fake speaks (see the package doc for their paths).
const (
	DialectOpenAI    Dialect = "openai"    // /v1/chat/completions, ...
	DialectAzure     Dialect = "azure"     // /openai/deployments/{dep}/..., /openai/v1/...
	DialectAnthropic Dialect = "anthropic" // /v1/messages
	DialectBedrock   Dialect = "bedrock"   // /model/{id}/invoke[-with-response-stream]
	DialectVertex    Dialect = "vertex"    // /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{m}:rawPredict
	DialectOAuth     Dialect = "oauth"     // /token, the Google OAuth2 token endpoint of the Vertex dialect
)

// target is what the URL says about a request.
type target struct {
	dialect  Dialect
	ep       endpoint
	found    bool
	model    string // from the URL (Azure deployment, Bedrock model id, Vertex model); "": the body's
	stream   bool   // from the URL (Bedrock, Vertex)
	azureV1  bool   // /openai/v1/...: the model is in the body, api-version optional
	project  string // Vertex
	location string // Vertex
	voice    string // ElevenLabs: the voice id of the path
}

var messagesEndpoint = endpoint{method: http.MethodPost, messages: true, serve: serveMessages}

// route reads the dialect and endpoint from the URL. Path segments that
// carry a model are read escaped, so an ARN's "/" (sent as %2F) or a
// fault's "|" stays inside its segment.
func route(r *http.Request) target {
	esc := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(esc, "/openai/deployments/"):
		t := target{dialect: DialectAzure}
		dep, op, ok := strings.Cut(strings.TrimPrefix(esc, "/openai/deployments/"), "/")
		if dep, err := url.PathUnescape(dep); ok && err == nil && dep != "" {
			t.ep, t.found = azureRoutes["/"+op]
			t.model = dep
		}
		return t
	case strings.HasPrefix(esc, "/openai/v1/"):
		t := target{dialect: DialectAzure, azureV1: true}
		t.ep, t.found = routes[strings.TrimPrefix(r.URL.Path, "/openai/v1")]
		return t
	case strings.HasPrefix(esc, "/openai/"):
		// The dated API outside a deployment (the Responses API): the
		// deployment is the body's model.
		t := target{dialect: DialectAzure}
		t.ep, t.found = azureResourceRoutes[strings.TrimPrefix(r.URL.Path, "/openai")]
		return t
	case r.URL.Path == "/v1/messages":
		return target{dialect: DialectAnthropic, ep: messagesEndpoint, found: true}
	case r.URL.Path == "/v1/messages/count_tokens":
		return target{dialect: DialectAnthropic, ep: countEndpoint, found: true}
	case strings.HasPrefix(esc, "/model/"):
		return bedrockRoute(esc)
	case strings.HasPrefix(esc, "/v1/projects/"):
		return vertexRoute(esc)
	case strings.HasPrefix(esc, "/v1/text-to-speech/"):
		return elevenLabsRoute(esc)
	case r.URL.Path == "/token":
		return target{dialect: DialectOAuth, ep: endpoint{method: http.MethodPost, serve: serveToken}, found: true, model: TokenModel}
	}
	t := target{dialect: DialectOpenAI}
	t.ep, t.found = routes[strings.TrimPrefix(r.URL.Path, "/v1")]
	return t
}

// unescapeSegment unescapes one path segment; "" when it is not valid.
func unescapeSegment(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return ""
	}
	return u
}

// requestID is the id this answer reports in the dialect's request-id
// header and error bodies.
func (ex *exchange) requestID() string {
	return "req_" + ex.s.opts.Name + "_" + itoa(ex.seq)
}

// setIDHeaders sets the headers every answer of the dialect carries.
func (ex *exchange) setIDHeaders() {
	h := ex.w.Header()
	h.Set("X-Fake-Upstream", ex.s.opts.Name)
	h.Set("X-Request-Id", ex.requestID())
	switch ex.dialect {
	case DialectAzure:
		h.Set("Apim-Request-Id", ex.requestID())
		h.Set("X-Ms-Region", "East US")
	case DialectAnthropic, DialectVertex:
		h.Set("Request-Id", ex.requestID())
	case DialectBedrock:
		h.Set("X-Amzn-Requestid", ex.requestID())
	}
}

// clientError answers a request the provider refuses (bad body, unknown
// fault, unknown path) in the dialect's error shape. code is the OpenAI
// error code; other dialects derive their type from status.
func (ex *exchange) clientError(status int, code, msg string) {
	switch ex.dialect {
	case DialectAzure, DialectOpenAI:
		writeError(ex.w, status, "invalid_request_error", code, msg)
	case DialectAnthropic:
		ex.anthropicStatus(status, msg)
	case DialectVertex:
		ex.vertexStatus(status, msg)
	case DialectBedrock:
		ex.bedrockStatus(status, msg)
	case DialectOAuth:
		writeOAuthError(ex.w, status, "invalid_request", msg)
	case DialectElevenLabs:
		writeElevenLabsError(ex.w, status, code, msg)
	}
}

// statusFault writes a status fault in the dialect's shape, with
// Retry-After when the fault asks for it.
func (ex *exchange) statusFault(status int) {
	f := ex.fault
	if f.HasRetryAfter {
		ex.w.Header().Set("Retry-After", itoa(int(f.RetryAfter/time.Second)))
		if ex.dialect == DialectAzure {
			ex.w.Header().Set("Retry-After-Ms", itoa(int(f.RetryAfter/time.Millisecond)))
		}
	}
	if status == http.StatusBadGateway && ex.dialect != DialectBedrock {
		writeStatus(ex.w, status) // the load balancer's HTML, whatever the API
		return
	}
	switch ex.dialect {
	case DialectOpenAI:
		writeStatus(ex.w, status)
	case DialectAzure:
		ex.azureStatus(status)
	case DialectAnthropic:
		ex.anthropicStatus(status, "")
	case DialectVertex:
		ex.vertexStatus(status, "")
	case DialectBedrock:
		ex.bedrockStatus(status, "")
	case DialectOAuth:
		writeOAuthError(ex.w, status, oauthStatusCode(status), "fakeupstream: token endpoint status "+itoa(status))
	case DialectElevenLabs:
		ex.elevenLabsStatus(status)
	}
}

// contextLength writes the dialect's "prompt too long" answer.
func (ex *exchange) contextLength() {
	const anthropicMsg = "prompt is too long: 210000 tokens > 200000 maximum"
	switch ex.dialect {
	case DialectAnthropic, DialectVertex:
		writeBody(ex.w, http.StatusBadRequest, "application/json", anthropicErrorJSON("invalid_request_error", anthropicMsg, ex.requestID()))
	case DialectBedrock:
		ex.bedrockError(http.StatusBadRequest, "ValidationException", anthropicMsg)
	default:
		writeErrorParam(ex.w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "messages",
			"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages.")
	}
}

// streamErrorType is the error type of an in-stream error: error=T, or the
// dialect's most common one.
func (ex *exchange) streamErrorType() string {
	if ex.fault.ErrorType != "" {
		return ex.fault.ErrorType
	}
	switch ex.dialect {
	case DialectAnthropic, DialectVertex:
		return "overloaded_error"
	case DialectBedrock:
		return "internalServerException"
	}
	return "server_error"
}

// openAIStreamError is the error object of an OpenAI in-stream error.
func (ex *exchange) openAIStreamError() []byte {
	return errorJSON(ex.streamErrorType(), "stream_error", "", "fakeupstream: the model failed while generating")
}

// errorBody is the body of a 200 that carries an error (error-body).
func (ex *exchange) errorBody() []byte {
	switch ex.dialect {
	case DialectAnthropic, DialectVertex, DialectBedrock:
		typ := ex.fault.ErrorType
		if typ == "" || ex.dialect == DialectBedrock {
			typ = "api_error"
		}
		return anthropicErrorJSON(typ, anthropicErrorMessage(typ), ex.requestID())
	}
	if ex.dialect == DialectElevenLabs {
		return elevenLabsErrorJSON("system_busy", "fakeupstream: the error came under 200")
	}
	return ex.openAIStreamError()
}

// dialectError says why a fault does not exist in dialect d ("" when it
// does): a fault that cannot happen there must not pass as healthy.
func (f Fault) dialectError(d Dialect) string {
	anthropicFamily := d == DialectAnthropic || d == DialectBedrock || d == DialectVertex
	switch {
	case f.Kind == KindContentFilter && anthropicFamily:
		return "content-filter is an OpenAI/Azure fault; Claude refuses with stop=refusal"
	case f.Kind == KindModelNotReady && d != DialectBedrock:
		return "model-not-ready is a Bedrock fault"
	case f.Stop != "" && anthropicFamily && !slices.Contains(anthropicStops, f.Stop):
		return "stop=" + f.Stop + " is not an Anthropic stop_reason (" + strings.Join(anthropicStops, ", ") + ")"
	case f.Stop != "" && !anthropicFamily && !slices.Contains(openAIStops, f.Stop):
		return "stop=" + f.Stop + " is not an OpenAI finish_reason (" + strings.Join(openAIStops, ", ") + ")"
	case f.ErrorType != "" && (d == DialectAnthropic || d == DialectVertex) && anthropicErrorTypes[f.ErrorType] == "":
		return "error=" + f.ErrorType + " is not an Anthropic error type"
	case f.ErrorType != "" && d == DialectBedrock && bedrockStreamExceptions[f.ErrorType] == "":
		return "error=" + f.ErrorType + " is not a Bedrock stream exception (" + strings.Join(sortedKeys(bedrockStreamExceptions), ", ") + ")"
	case f.ErrorType != "" && d == DialectElevenLabs && f.ErrorType != "system_busy" && f.ErrorType != "too_many_concurrent_requests":
		return "error=" + f.ErrorType + " is not an ElevenLabs 429 status (system_busy, too_many_concurrent_requests)"
	case f.ErrorType != "" && d != DialectElevenLabs && f.Kind == KindStatus:
		return "429|error=" + f.ErrorType + " is an ElevenLabs fault"
	case f.CacheWrite && !anthropicFamily:
		return "cache-write is an Anthropic usage option"
	}
	return ""
}

// betasAccepted refuses, on Bedrock and Vertex, a beta outside
// Options.CloudBetas, as those clouds refuse betas they do not serve.
func (ex *exchange) betasAccepted() bool {
	var bad []string
	switch ex.dialect {
	case DialectBedrock:
		bad = unknownBetas(ex.msgs.AnthropicBeta, ex.s.opts.CloudBetas)
		if len(bad) > 0 {
			ex.bedrockError(http.StatusBadRequest, "ValidationException", "invalid beta flag: "+strings.Join(bad, ", "))
			return false
		}
	case DialectVertex:
		bad = unknownBetas(headerBetas(ex.r.Header.Values("Anthropic-Beta")), ex.s.opts.CloudBetas)
		if len(bad) > 0 {
			ex.clientError(http.StatusBadRequest, "invalid_request", "Unexpected value(s) `"+strings.Join(bad, "`, `")+
				"` for the `anthropic-beta` header. Please consult our documentation at docs.claude.com or try again without the header.")
			return false
		}
	}
	return true
}

package upstream

import (
	"net/http"
	"strings"
)

// vertexRoute reads
// /v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}:rawPredict
// (or :streamRawPredict).
func vertexRoute(esc string) target {
	t := target{dialect: DialectVertex}
	p := strings.Split(strings.TrimPrefix(esc, "/v1/"), "/")
	if len(p) != 8 || p[0] != "projects" || p[2] != "locations" || p[4] != "publishers" || p[5] != "anthropic" || p[6] != "models" {
		return t
	}
	last := unescapeSegment(p[7])
	i := strings.LastIndexByte(last, ':')
	if i <= 0 {
		return t
	}
	switch last[i+1:] {
	case "rawPredict":
	case "streamRawPredict":
		t.stream = true
	default:
		return t
	}
	t.project, t.location = unescapeSegment(p[1]), unescapeSegment(p[3])
	if t.project == "" || t.location == "" {
		return t
	}
	t.ep, t.found, t.model = messagesEndpoint, true, last[:i]
	if t.model == "count-tokens" && !t.stream {
		t.ep, t.model = countEndpoint, "" // the model is the body's
	}
	return t
}

// vertexAuthorized accepts a bearer token minted by the fake's token
// endpoint and not yet expired on the server clock, for the configured
// project.
func (ex *exchange) vertexAuthorized() bool {
	tok, ok := strings.CutPrefix(ex.r.Header.Get("Authorization"), "Bearer ")
	reason := ""
	switch {
	case !ok || tok == "":
		reason = "CREDENTIALS_MISSING"
	default:
		ex.s.mu.Lock()
		issued, known := ex.s.tokens[tok]
		ex.s.mu.Unlock()
		switch {
		case !known:
			reason = "ACCESS_TOKEN_TYPE_UNSUPPORTED"
		case !ex.now.Before(issued.expiry):
			reason = "ACCESS_TOKEN_EXPIRED"
		}
	}
	if reason != "" {
		ex.w.Header().Set("Www-Authenticate", `Bearer realm="https://accounts.google.com/", error="invalid_token"`)
		ex.googleError(http.StatusUnauthorized, "UNAUTHENTICATED",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
			reason)
		return false
	}
	if ex.tgt.project != ex.s.opts.GoogleProject {
		ex.googleError(http.StatusForbidden, "PERMISSION_DENIED",
			"Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/"+ex.tgt.project+
				"/locations/"+ex.tgt.location+"/publishers/anthropic/models/"+ex.model+"' (or it may not exist).",
			"IAM_PERMISSION_DENIED")
		return false
	}
	return true
}

// googleStatuses are the statuses Vertex's front end answers itself, in
// Google's error shape; the others come from the model, in Anthropic's.
var googleStatuses = map[int]struct{ status, msg string }{
	401: {"UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."},
	403: {"PERMISSION_DENIED", "Permission 'aiplatform.endpoints.predict' denied on resource (or it may not exist)."},
	404: {"NOT_FOUND", "Publisher model was not found or your project does not have access to it. Please ensure you are using a valid model version."},
	429: {"RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model with base model: anthropic-claude. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."},
	500: {"INTERNAL", "Internal error encountered."},
	503: {"UNAVAILABLE", "The service is currently unavailable."},
	504: {"DEADLINE_EXCEEDED", "Deadline exceeded."},
}

// vertexStatus writes a status as Vertex does: Google's shape for its own
// statuses, the model's Anthropic shape for the rest (400, 413, 529, ...).
func (ex *exchange) vertexStatus(status int, msg string) {
	g, ok := googleStatuses[status]
	if !ok {
		ex.anthropicStatus(status, msg)
		return
	}
	if msg == "" {
		msg = g.msg
	}
	ex.googleError(status, g.status, msg, "")
}

// googleError writes {"error":{"code","message","status"}}, with an
// ErrorInfo detail when reason is set (how Google says why a token failed).
func (ex *exchange) googleError(code int, status, msg, reason string) {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if reason != "" {
		e["details"] = []map[string]any{{
			"@type":  "type.googleapis.com/google.rpc.ErrorInfo",
			"reason": reason, "domain": "googleapis.com",
			"metadata": map[string]string{"service": "aiplatform.googleapis.com", "method": "google.cloud.aiplatform.v1.PredictionService.RawPredict"},
		}}
	}
	writeBody(ex.w, code, "application/json; charset=UTF-8", mustJSON(map[string]any{"error": e}))
}

package upstream

import (
	"net/http"
	"regexp"
	"strings"
	"time"
)

// azureRoutes are the operations of a deployment URL
// (/openai/deployments/{deployment}/...).
var azureRoutes = map[string]endpoint{
	"/chat/completions":     routes["/chat/completions"],
	"/completions":          routes["/completions"],
	"/embeddings":           routes["/embeddings"],
	"/images/generations":   routes["/images/generations"],
	"/audio/speech":         routes["/audio/speech"],
	"/audio/transcriptions": routes["/audio/transcriptions"],
}

// azureResourceRoutes are the dated API's operations outside a deployment
// (/openai/{operation}?api-version=..., the model in the body).
var azureResourceRoutes = map[string]endpoint{
	"/responses": routes["/responses"],
}

// azureAPIVersionRE is the shape of a dated api-version ("2024-10-21",
// "2025-04-01-preview").
var azureAPIVersionRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(-preview)?$`)

// azureAuthorized accepts the configured key in api-key, the configured
// Entra ID token as a bearer token, and, on the v1 API only, the key as a
// bearer token (what the plain OpenAI SDK sends there).
func (ex *exchange) azureAuthorized() bool {
	o := ex.s.opts
	if k := ex.r.Header.Get("Api-Key"); k != "" {
		if k == o.AzureAPIKey {
			return true
		}
		ex.azureError(http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return false
	}
	if tok, ok := strings.CutPrefix(ex.r.Header.Get("Authorization"), "Bearer "); ok {
		if tok == o.AzureADToken || ex.tgt.azureV1 && tok == o.AzureAPIKey {
			return true
		}
		ex.azureError(http.StatusUnauthorized, "401", "Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired.")
		return false
	}
	ex.azureError(http.StatusUnauthorized, "401", "Access denied due to missing subscription key. Make sure to include subscription key when making requests to an API.")
	return false
}

// azureValid requires api-version on deployment URLs, as Azure does (a
// missing one is a 404: no such resource without a version).
func (ex *exchange) azureValid() bool {
	v, has := ex.r.URL.Query()["api-version"]
	switch {
	case ex.tgt.azureV1 && (!has || v[0] == "preview" || v[0] == "latest" || v[0] == "v1"):
		return true
	case !ex.tgt.azureV1 && !has:
		ex.azureError(http.StatusNotFound, "404", "Resource not found")
		return false
	case ex.tgt.azureV1 || !azureAPIVersionRE.MatchString(v[0]):
		ex.azureError(http.StatusBadRequest, "BadRequest", "API version not supported")
		return false
	}
	return true
}

func (ex *exchange) azureError(status int, code, msg string) {
	type inner struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	writeBody(ex.w, status, "application/json", mustJSON(struct {
		Error inner `json:"error"`
	}{inner{code, msg}}))
}

// azureStatus writes a status fault as Azure OpenAI does: its own
// {"error":{"code","message"}} for the statuses its front end produces,
// the OpenAI shape for the rest.
func (ex *exchange) azureStatus(status int) {
	switch status {
	case http.StatusUnauthorized:
		ex.azureError(status, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
	case http.StatusForbidden:
		ex.azureError(status, "403", "Access denied due to Virtual Network/Firewall rules.")
	case http.StatusNotFound:
		ex.azureError(status, "DeploymentNotFound", "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.")
	case http.StatusRequestTimeout:
		ex.azureError(status, "Timeout", "The operation was timeout.")
	case http.StatusTooManyRequests:
		secs := max(1, int(ex.fault.RetryAfter/time.Second))
		version := ex.r.URL.Query().Get("api-version")
		if version == "" {
			version = "v1"
		}
		ex.azureError(status, "429", "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "+version+
			" have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after "+itoa(secs)+
			" seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit.")
	case http.StatusInternalServerError:
		ex.azureError(status, "InternalServerError", "The server had an error while processing your request. Sorry about that!")
	case http.StatusServiceUnavailable:
		ex.azureError(status, "ServiceUnavailable", "The service is temporarily unable to process your request. Please try again later.")
	default:
		writeStatus(ex.w, status)
	}
}

// azureContentFilter is Azure's 400 for a prompt its content filter
// blocked, byte for byte in the documented shape.
func (ex *exchange) azureContentFilter() {
	no := false
	body := map[string]any{"error": map[string]any{
		"message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
		"type":    nil, "param": "prompt", "code": "content_filter", "status": 400,
		"innererror": map[string]any{
			"code": "ResponsibleAIPolicyViolation",
			"content_filter_result": map[string]filterResult{
				"hate":      {Severity: "safe"},
				"jailbreak": {Detected: &no},
				"self_harm": {Severity: "safe"},
				"sexual":    {Severity: "safe"},
				"violence":  {Filtered: true, Severity: "medium"},
			},
		},
	}}
	writeBody(ex.w, http.StatusBadRequest, "application/json", mustJSON(body))
}

// filterResult is one category of Azure's content filter annotations.
type filterResult struct {
	Filtered bool   `json:"filtered"`
	Severity string `json:"severity,omitempty"`
	Detected *bool  `json:"detected,omitempty"`
}

// azurePromptFilterResults is the prompt annotation Azure adds to every
// chat answer (and sends alone in the first stream chunk).
func azurePromptFilterResults() []map[string]any {
	no := false
	safe := filterResult{Severity: "safe"}
	return []map[string]any{{
		"prompt_index": 0,
		"content_filter_results": map[string]filterResult{
			"hate": safe, "jailbreak": {Detected: &no}, "self_harm": safe, "sexual": safe, "violence": safe,
		},
	}}
}

// azureChoiceFilterResults is the completion annotation of a choice;
// filtered marks violence as the reason of a content_filter finish.
func azureChoiceFilterResults(filtered bool) map[string]filterResult {
	no := false
	safe := filterResult{Severity: "safe"}
	r := map[string]filterResult{
		"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe,
		"protected_material_code": {Detected: &no}, "protected_material_text": {Detected: &no},
	}
	if filtered {
		r["violence"] = filterResult{Filtered: true, Severity: "medium"}
	}
	return r
}

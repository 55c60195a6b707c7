package upstream

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is the OpenAI error shape.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func errorJSON(typ, code, param, msg string) []byte {
	e := apiError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	if param != "" {
		e.Param = &param
	}
	b, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{e})
	return b
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeErrorParam(w, status, typ, code, "", msg)
}

func writeErrorParam(w http.ResponseWriter, status int, typ, code, param, msg string) {
	writeBody(w, status, "application/json", errorJSON(typ, code, param, msg))
}

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// statusBodies are what real providers send with each status. 502 and 504
// come from the load balancer in front of the provider, as HTML: a gateway
// must not assume an error body is JSON.
var statusBodies = map[int]struct{ typ, code, msg string }{
	400: {"invalid_request_error", "invalid_request", "Invalid request."},
	401: {"invalid_request_error", "invalid_api_key", "Incorrect API key provided."},
	402: {"insufficient_quota", "payment_required", "Your account has no remaining credit."},
	403: {"permission_error", "unsupported_country_region_territory", "Country, region, or territory not supported."},
	404: {"invalid_request_error", "model_not_found", "The model does not exist or you do not have access to it."},
	408: {"timeout_error", "request_timeout", "Request timed out."},
	409: {"conflict_error", "conflict", "Conflict with a concurrent request."},
	413: {"invalid_request_error", "request_too_large", "Request too large."},
	422: {"invalid_request_error", "unprocessable_entity", "Unprocessable entity."},
	429: {"requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."},
	500: {"server_error", "server_error", "The server had an error while processing your request."},
	503: {"server_error", "engine_overloaded", "The engine is currently overloaded, please try again later."},
	529: {"overloaded_error", "overloaded", "Overloaded."},
}

func writeStatus(w http.ResponseWriter, status int) {
	if status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
		text := strconv.Itoa(status) + " " + http.StatusText(status)
		writeBody(w, status, "text/html", []byte("<html><head><title>"+text+"</title></head><body><center><h1>"+text+"</h1></center><hr><center>nginx</center></body></html>\n"))
		return
	}
	b, ok := statusBodies[status]
	if !ok {
		b.typ, b.code, b.msg = "server_error", "status_"+strconv.Itoa(status), "fakeupstream status "+strconv.Itoa(status)
		if status < 500 {
			b.typ = "invalid_request_error"
		}
	}
	writeError(w, status, b.typ, b.code, b.msg)
}

func itoa(n int) string { return strconv.Itoa(n) }

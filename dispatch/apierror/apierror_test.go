package apierror

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

// TestWriteShape pins the OpenAI error shape clients parse, including a null
// param and the request id beside the error object.
func TestWriteShape(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, "4bf92f3577b34da6a3ce929d0e0e4736", EngineOverloaded("overloaded", 1500*time.Millisecond))
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("status %d retry-after %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	e := got["error"].(map[string]any)
	if e["code"] != "engine_overloaded" || e["type"] != "server_error" || e["param"] != nil || got["request_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("body %s", rec.Body.String())
	}
	if _, ok := e["message"]; !ok {
		t.Fatal("message missing")
	}
}

// TestStreamFrame pins the in-band frame a committed stream ends with.
func TestStreamFrame(t *testing.T) {
	got := string(StreamFrame("r1", StreamInterrupted("cut")))
	want := `data: {"error":{"message":"cut","type":"server_error","code":"upstream_stream_interrupted","param":null},"request_id":"r1"}` + "\n\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// TestAnthropicShape pins the error POST /v1/messages clients parse:
// Anthropic's shape, hopgate's code leading the message, the status and
// Retry-After as in the OpenAI shape, and the type Anthropic's API gives
// the status (a shared upstream status of all_channels_failed included).
func TestAnthropicShape(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteAnthropic(rec, "r1", EngineOverloaded("slow", time.Second))
	want := `{"type":"error","error":{"type":"overloaded_error","message":"engine_overloaded: slow"},"request_id":"r1"}` + "\n"
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || rec.Body.String() != want {
		t.Fatalf("%d retry-after %q body %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body.String())
	}
	for status, typ := range map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 402: "billing_error", 403: "permission_error",
		404: "not_found_error", 408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
		500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error",
	} {
		e := &Error{Status: status, Code: CodeAllChannelsFailed, Message: "m"}
		if got := e.AnthropicType(); got != typ {
			t.Errorf("status %d: %s, want %s", status, got, typ)
		}
	}
}

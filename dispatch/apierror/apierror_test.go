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

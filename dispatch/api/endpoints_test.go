package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// upload is a multipart transcription body with the given form fields (in
// order) and an audio file.
func upload(fields ...string) (ct string, body []byte) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	fw, _ := w.CreateFormFile("file", "a.mp3")
	_, _ = fw.Write([]byte("ID3\x04\x00\xff\xfe audio"))
	for i := 0; i+1 < len(fields); i += 2 {
		_ = w.WriteField(fields[i], fields[i+1])
	}
	_ = w.Close()
	return w.FormDataContentType(), buf.Bytes()
}

func post(t *testing.T, gw *gwtest.Gateway, path, ct string, body []byte) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, gw.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	req.Header.Set("Content-Type", ct)
	resp, m := doReq(t, req)
	return resp, m
}

func doReq(t *testing.T, req *http.Request) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp, m
}

// TestOperationGuardOnEveryRoute: a model that does not serve a route's
// operation is refused with a 400 naming the model and the operation, on
// every route, and no upstream is called.
func TestOperationGuardOnEveryRoute(t *testing.T) {
	gw, up := front(t)
	jsonBody := func(model string) []byte {
		return []byte(`{"model":"` + model + `","input":"x","prompt":"x","messages":[]}`)
	}
	cases := []struct{ path, op, model string }{
		{"/v1/chat/completions", "chat", "embed-only"},
		{"/v1/completions", "completions", "m"},
		{"/v1/responses", "responses", "m"},
		{"/v1/embeddings", "embeddings", "m"},
		{"/v1/images/generations", "images", "m"},
		{"/v1/audio/speech", "audio_speech", "m"},
		{"/v1/audio/transcriptions", "audio_transcriptions", "m"},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			ct, body := "application/json", jsonBody(c.model)
			if c.op == "audio_transcriptions" {
				ct, body = upload("model", c.model)
			}
			resp, m := post(t, gw, c.path, ct, body)
			e, _ := m["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if resp.StatusCode != 400 || e["code"] != "operation_not_supported" || e["param"] != "model" ||
				!strings.Contains(msg, `"`+c.model+`"`) || !strings.Contains(msg, `"`+c.op+`"`) {
				t.Fatalf("%d %v", resp.StatusCode, m)
			}
		})
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("refused operations reached the upstream %d times", n)
	}
}

// TestEndpointFrontDoor: input the gateway cannot proxy faithfully is
// refused before any upstream call: streams on routes without a stream
// gate, uploads that are not multipart or whose model part is missing or
// ambiguous.
func TestEndpointFrontDoor(t *testing.T) {
	gw, up := front(t)
	multiModel := func() (string, []byte) { return upload("model", "all", "model", "embed-only") }
	cases := []struct {
		name, path string
		body       func() (string, []byte)
		status     int
		code       string
	}{
		// The gate has no classifier for image or audio events: refuse
		// rather than fail over from a healthy channel.
		{"stream on embeddings", "/v1/embeddings", func() (string, []byte) {
			return "application/json", []byte(`{"model":"all","input":"x","stream":true}`)
		}, 400, "invalid_request"},
		{"stream on images", "/v1/images/generations", func() (string, []byte) {
			return "application/json", []byte(`{"model":"all","prompt":"x","stream":true}`)
		}, 400, "invalid_request"},
		{"stream on speech", "/v1/audio/speech", func() (string, []byte) {
			return "application/json", []byte(`{"model":"all","input":"x","stream":true}`)
		}, 400, "invalid_request"},
		{"upload as JSON", "/v1/audio/transcriptions", func() (string, []byte) {
			return "application/json", []byte(`{"model":"all"}`)
		}, 400, "invalid_request"},
		{"multipart without boundary", "/v1/audio/transcriptions", func() (string, []byte) {
			_, b := upload("model", "all")
			return "multipart/form-data", b
		}, 400, "invalid_request"},
		{"upload without model", "/v1/audio/transcriptions", func() (string, []byte) { return upload("language", "en") }, 400, "invalid_request"},
		// Two model parts: the upstream might read the other one.
		{"upload with two models", "/v1/audio/transcriptions", multiModel, 400, "invalid_request"},
		{"truncated upload", "/v1/audio/transcriptions", func() (string, []byte) {
			ct, b := upload("model", "all")
			return ct, b[:len(b)-10]
		}, 400, "invalid_request"},
		{"unknown model in upload", "/v1/audio/transcriptions", func() (string, []byte) { return upload("model", "nope") }, 404, "model_not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct, body := c.body()
			resp, m := post(t, gw, c.path, ct, body)
			e, _ := m["error"].(map[string]any)
			if resp.StatusCode != c.status || e["code"] != c.code {
				t.Fatalf("%d %v, want %d %s", resp.StatusCode, m, c.status, c.code)
			}
		})
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}
	// The same upload with one model goes through, model rewritten.
	ct, body := upload("model", "all", "language", "en")
	if resp, m := post(t, gw, "/v1/audio/transcriptions", ct, body); resp.StatusCode != 200 {
		t.Fatalf("valid upload: %d %v", resp.StatusCode, m)
	}
	if log := up.Log(); len(log) != 1 || log[0].Model != "up-all" || log[0].Header.Get("Content-Type") != ct {
		t.Fatalf("upstream saw %+v", log)
	}
}

// records is a slog handler that hands every record to a channel, so a
// test can wait for the access log line of a request that never answers.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool        { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error { r <- rec; return nil }
func (r records) WithAttrs([]slog.Attr) slog.Handler              { return r }
func (r records) WithGroup(string) slog.Handler                   { return r }

// TestDisconnectMidUploadCostsNoAttempt: a client that sends half of its
// body and leaves costs no upstream attempt: bodies are read whole, bounded,
// before the first hop.
func TestDisconnectMidUploadCostsNoAttempt(t *testing.T) {
	logs := make(records, 16)
	gw := gwtest.NewWith(t, gwtest.Options{Logger: slog.New(logs)}, `
auth: {mode: none}
channels:
  - {id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}
models:
  - {name: whisper, operations: [audio_transcriptions, chat], chain: [{channel: a}]}
`, "a")
	up := gw.Ups["a"]

	for _, c := range []struct{ path, ct string }{
		{"/v1/audio/transcriptions", "multipart/form-data; boundary=b0undary"},
		{"/v1/chat/completions", "application/json"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		half := "--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n\r\n" + strings.Repeat("\x00", 4096)
		if c.ct == "application/json" {
			half = `{"model":"whisper","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", c.path, c.ct, 2*len(half), half)
		_ = conn.Close()
		rec := testkit.Recv(t, logs, c.path+": the handler's end")
		code := ""
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "code" {
				code = a.Value.String()
			}
			return true
		})
		if rec.Message != "request" || code != "invalid_request" {
			t.Fatalf("%s: log %q code %q, want the body read failure", c.path, rec.Message, code)
		}
	}
	if n := len(up.Log()); n != 0 {
		t.Fatalf("a half-sent body reached the upstream %d times", n)
	}
}

// TestModelsListOperations: GET /v1/models says which operations each
// public model serves (chat when the config names none).
func TestModelsListOperations(t *testing.T) {
	gw, _ := front(t)
	req, _ := http.NewRequest(http.MethodGet, gw.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	_, m := doReq(t, req)
	got := map[string]string{}
	for _, d := range m["data"].([]any) {
		d := d.(map[string]any)
		got[d["id"].(string)] = fmt.Sprint(d["hopgate_operations"])
	}
	if got["m"] != "[chat]" || got["embed-only"] != "[embeddings]" || !strings.Contains(got["all"], "audio_transcriptions") {
		t.Fatalf("operations %v", got)
	}
}

package dispatch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/cmd/fakeupstream/upstream"
	"github.com/hopgate/hopgate/dispatch"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/telemetry"
)

// serveOne runs one request through a fresh engine in front of two fake
// providers (channels a and b, a cheapest) and returns the Result, what
// the client got, and the providers.
func serveOne(t *testing.T, model string, body string) (dispatch.Result, *httptest.ResponseRecorder, *upstream.Server, *upstream.Server) {
	t.Helper()
	return serveOp(t, config.OpChat, model, body)
}

// serveOp is serveOne on the route of operation op (chat, completions,
// responses).
func serveOp(t *testing.T, op, model string, body string) (dispatch.Result, *httptest.ResponseRecorder, *upstream.Server, *upstream.Server) {
	t.Helper()
	return serveWith(t, op, model, body, nil)
}

// serveWith is serveOp with the request changed by with (nil: as it is).
func serveWith(t *testing.T, op, model, body string, with func(*dispatch.Request, *httptest.ResponseRecorder)) (dispatch.Result, *httptest.ResponseRecorder, *upstream.Server, *upstream.Server) {
	t.Helper()
	return serveYAML(t, op, func(urlA, urlB string) string {
		return `auth: {mode: none}
channels:
  - {id: a, base_url: "` + urlA + `/v1"}
  - {id: b, base_url: "` + urlB + `/v1"}
models:
  - name: m
    chain:
      - {channel: a, upstream_model: "` + model + `", price: {input: 1, output: 2}}
      - {channel: b, upstream_model: "ok", price: {input: 3, output: 4}}
    operations: [chat, completions, responses, audio_speech]
`
	}, body, with)
}

// serveYAML is serveWith on the config yaml returns for the URLs of the
// fake providers "a" and "b" (its model "m" is asked).
func serveYAML(t *testing.T, op string, yaml func(urlA, urlB string) string, body string, with func(*dispatch.Request, *httptest.ResponseRecorder)) (dispatch.Result, *httptest.ResponseRecorder, *upstream.Server, *upstream.Server) {
	t.Helper()
	ua, ub := upstream.New(upstream.Options{Name: "a"}), upstream.New(upstream.Options{Name: "b"})
	sa, sb := httptest.NewServer(ua), httptest.NewServer(ub)
	t.Cleanup(func() { ua.Close(); ub.Close(); sa.Close(); sb.Close() })
	cfg, err := config.Parse([]byte(yaml(sa.URL, sb.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := dispatch.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	e := dispatch.New(dispatch.Options{Telemetry: telemetry.Noop(), Transport: tr})
	f, err := reqbody.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	req := &dispatch.Request{Config: cfg, Model: cfg.Model("m"), Operation: op, Path: "/" + op,
		Body: []byte(body), Fields: f, Stream: f.Stream, Events: dispatch.ChatEvents}
	switch op {
	case config.OpChat:
		req.Path = "/chat/completions"
	case config.OpResponses:
		req.Events = dispatch.ResponsesEvents
	case config.OpAudioSpeech:
		req.Path, req.Binary = "/audio/speech", true
	}
	rec := httptest.NewRecorder()
	if with != nil {
		with(req, rec)
	}
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/chat/completions", nil)
	return e.Serve(rec, r, req), rec, ua, ub
}

const prompt = `"messages":[{"role":"user","content":"two words"}]`

// Why: a wallet charges Result.Usage, so the serving hop's reported usage
// must reach it, for buffered and streamed answers alike, and a stream
// whose client did not ask for usage still gets it from the upstream
// without the extra chunk reaching the client.
func TestResultCarriesUsage(t *testing.T) {
	for _, tc := range []struct {
		name, model, body string
		wantIn, wantOut   int64
		upstreamAsked     bool
		clientSeesUsage   bool
	}{
		{"buffered", "m|tokens=5", `{"model":"m",` + prompt + `}`, 2, 5, false, true},
		{"stream, client did not ask", "m|tokens=6", `{"model":"m","stream":true,` + prompt + `}`, 2, 6, true, false},
		{"stream, client asked", "m|tokens=7", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + prompt + `}`, 2, 7, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, rec, ua, _ := serveOne(t, tc.model, tc.body)
			if !res.Answered || res.Outcome != dispatch.OutcomeOK {
				t.Fatalf("result %+v", res)
			}
			if want := (dispatch.Usage{InputTokens: tc.wantIn, OutputTokens: tc.wantOut, Present: true}); res.Usage != want {
				t.Errorf("usage %+v, want %+v", res.Usage, want)
			}
			if log := ua.Log(); len(log) != 1 || strings.Contains(string(log[0].Body), `"include_usage":true`) != tc.upstreamAsked {
				t.Errorf("upstream body %s: include_usage asked = %v", log[0].Body, !tc.upstreamAsked)
			}
			if got := strings.Contains(rec.Body.String(), `"completion_tokens"`); got != tc.clientSeesUsage {
				t.Errorf("client sees usage = %v, want %v:\n%s", got, tc.clientSeesUsage, rec.Body.String())
			}
		})
	}
}

// Why: a stream cut after commit reports no usage; the wallet estimates
// from what was delivered, so the Result counts the delivered text (and
// tool-call frames), never the frames of a failed hop.
func TestResultCountsDelivered(t *testing.T) {
	res, rec, _, _ := serveOne(t, "m|tokens=10|cut=4", `{"model":"m","stream":true,`+prompt+`}`)
	if !res.Answered || res.Outcome != dispatch.OutcomeInterrupted || res.Usage.Present {
		t.Fatalf("result %+v\n%s", res, rec.Body.String())
	}
	if want := int64(len("tok1 tok2 tok3 tok4 ")); res.Delivered.TextBytes != want || res.Delivered.ToolCallFrames != 0 {
		t.Errorf("delivered %+v, want %d text bytes", res.Delivered, want)
	}
	res, _, _, _ = serveOne(t, "m|tool-calls|tokens=6|cut=3", `{"model":"m","stream":true,`+prompt+`}`)
	if !res.Answered || res.Delivered.ToolCallFrames < 3 {
		t.Errorf("tool calls: %+v", res)
	}
}

// Why: a failover charges the serving hop only; final errors and
// hopgate's own replies are not answers and must never be charged.
func TestResultAnswered(t *testing.T) {
	res, _, ua, ub := serveOne(t, "m|503", `{"model":"m",`+prompt+`}`)
	if !res.Answered || res.Outcome != dispatch.OutcomeFailoverOK || !res.Usage.Present || res.Usage.OutputTokens != 8 {
		t.Errorf("failover: %+v", res)
	}
	if len(ua.Log()) != 1 || len(ub.Log()) != 1 {
		t.Errorf("attempts a=%d b=%d", len(ua.Log()), len(ub.Log()))
	}
	res, _, _, _ = serveOne(t, "m|content-filter", `{"model":"m",`+prompt+`}`)
	if res.Answered || res.Status != http.StatusBadRequest || res.Usage.Present {
		t.Errorf("final error passed through counts as answered: %+v", res)
	}
	res, _, _, _ = serveOne(t, "m|stream-error", `{"model":"m","stream":true,`+prompt+`}`)
	if !res.Answered || res.Outcome != dispatch.OutcomeFailoverOK {
		t.Errorf("discarded hop then b: %+v", res)
	}
}

// Why: every streaming endpoint reports usage to the wallet: completions
// streams ask the upstream for it (and drop the extra chunk for a client
// that did not ask), Responses streams carry it in response.completed.
func TestStreamingEndpointsReportUsage(t *testing.T) {
	res, rec, ua, _ := serveOp(t, config.OpCompletions, "m|tokens=4", `{"model":"m","prompt":"two words","stream":true}`)
	if !res.Usage.Present || res.Usage.OutputTokens != 4 || !strings.Contains(string(ua.Log()[0].Body), `"include_usage":true`) ||
		strings.Contains(rec.Body.String(), "completion_tokens") {
		t.Errorf("completions: %+v\n%s", res, rec.Body.String())
	}
	res, rec, _, _ = serveOp(t, config.OpResponses, "m|tokens=5", `{"model":"m","input":"two words","stream":true}`)
	if !res.Answered || !res.Usage.Present || res.Usage.OutputTokens != 5 {
		t.Errorf("responses: %+v\n%s", res, rec.Body.String())
	}
}

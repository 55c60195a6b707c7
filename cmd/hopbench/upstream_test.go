package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/sse"
	"github.com/hopgate/hopgate/internal/translate"
)

// post sends body to the fast upstream at path and returns the answer.
func post(t *testing.T, c *http.Client, url string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// The translating row compares like with like only if the Anthropic stream,
// translated by hopgate's own transcoder, gives the client what the
// pass-through stream gives it: the same content frames, as many, with the
// same text, and the same end.
func TestAnthropicStreamMatchesPassThrough(t *testing.T) {
	srv := httptest.NewServer(newFastUpstream())
	defer srv.Close()
	_, openai := post(t, srv.Client(), srv.URL+"/v1/chat/completions", requestBody(modelBench, true))
	resp, anthropic := post(t, srv.Client(), srv.URL+"/v1/messages", requestBody(modelBench, true))
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}

	var want []string // content of the pass-through stream's chunks
	rd := sse.NewReader(bytes.NewReader(openai), sse.DefaultMaxFrame)
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if info := gate.InspectChat(f); info.Kind == gate.Content {
			want = append(want, string(info.Text))
		}
	}

	var got []string
	var out []byte
	tr := translate.NewMessagesToChatStream(translate.ChatStreamOptions{Created: 1700000000})
	events := 0
	rd = sse.NewReader(bytes.NewReader(anthropic), sse.DefaultMaxFrame)
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		events++
		var info gate.Info
		out, info = tr.Event(out, f.Event, f.Data)
		switch info.Kind {
		case gate.Content:
			got = append(got, string(info.Text))
		case gate.Malformed, gate.Error:
			t.Fatalf("event %d (%s) classified %v", events, f.Event, info.Kind)
		}
	}
	if len(want) != StreamFrames || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("content frames: translated %d %q, pass-through %d %q", len(got), got, len(want), want)
	}
	// What the client receives: role chunk, the content chunks, finish, [DONE].
	frames := bytes.Count(out, []byte("\n\n"))
	if frames != StreamFrames+3 || !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) || bytes.Count(out, firstContent) != StreamFrames {
		t.Errorf("translated stream: %d frames (want %d), ends %q", frames, StreamFrames+3, out[max(0, len(out)-40):])
	}
	if events != StreamFrames+6 {
		t.Errorf("upstream sent %d events, want message_start, block start, ping, %d deltas, block stop, message_delta, message_stop", events, StreamFrames)
	}

	// The non-streaming answer translates to a chat.completion with the
	// same text as the OpenAI one.
	_, msg := post(t, srv.Client(), srv.URL+"/v1/messages", requestBody(modelBench, false))
	cc, info, err := translate.MessageToChatCompletion(msg, 1700000000)
	if err != nil || info.Kind == gate.Error || checkAnswer(http.StatusOK, "", cc, false) != "" {
		t.Fatalf("translated message: %v %v %s", err, info.Kind, cc)
	}
}

// TLS rows are only meaningful if the listeners speak what they claim: the
// h1 one HTTP/1.1 only, the h2 one HTTP/2 to a client that offers it (as
// dispatch.NewTransport does), and only to a client that trusts the CA.
func TestTLSUpstreams(t *testing.T) {
	pki, err := newBenchPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(pki.certFile, pki.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	u := newFastUpstream()
	s1, a1, err := serveTLSLoopback(u.counting(&u.tls.h1), cert, false, func() { u.tls.h1.conns.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, a2, err := serveTLSLoopback(u.counting(&u.tls.h2), cert, true, func() { u.tls.h2.conns.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()

	// Why: the children trust the CA through SSL_CERT_FILE, that is a pool
	// holding this one file; a client without it must fail.
	if _, err := http.Post("https://"+a1+"/v1/chat/completions", "application/json", bytes.NewReader(requestBody(modelBench, false))); err == nil {
		t.Fatal("a client that does not trust the bench CA connected")
	}
	pem, err := os.ReadFile(pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		name      string
		addr      string
		wantMajor int
	}{
		{"h1 listener: HTTP/1.1 only", a1, 1},
		{"h2 listener: HTTP/2 when offered", a2, 2},
	} {
		for _, stream := range []bool{false, true} {
			resp, body := post(t, c, "https://"+tc.addr+"/v1/chat/completions", requestBody(modelBench, stream))
			if resp.ProtoMajor != tc.wantMajor {
				t.Errorf("%s: answered over %s", tc.name, resp.Proto)
			}
			if msg := checkAnswer(uint16(resp.StatusCode), "", body, stream); msg != "" {
				t.Errorf("%s (stream %v): %s", tc.name, stream, msg)
			}
		}
	}
	// Two requests each, on one kept-alive connection per listener (the h1
	// one also accepted the untrusting client's, whose handshake failed).
	st := u.stats()
	if want := (tlsStats{Conns: 2, HTTP1: 2}); st.TLSH1 != want {
		t.Errorf("h1 listener saw %+v, want %+v", st.TLSH1, want)
	}
	if want := (tlsStats{Conns: 1, HTTP2: 2}); st.TLSH2 != want {
		t.Errorf("h2 listener saw %+v, want %+v", st.TLSH2, want)
	}
	if d := (tlsStats{Conns: 3, HTTP1: 5, HTTP2: 7}).sub(tlsStats{Conns: 1, HTTP1: 2, HTTP2: 3}); d != (tlsStats{Conns: 2, HTTP1: 3, HTTP2: 4}) {
		t.Errorf("sub: %+v", d)
	}
}

// The gateway's config is what `hopgate check` would accept, with the
// Anthropic channel in the anthropic family and the TLS channels present
// exactly when their upstreams are.
func TestGatewayYAML(t *testing.T) {
	env := func(string) (string, bool) { return "sk", true }
	for _, tc := range []struct {
		name       string
		h1, h2, rt string
		tls        bool
	}{
		{"with the TLS and realtime upstreams", "127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003", true},
		// Why: a gateway started without them (a role test) still starts.
		{"without", "", "", "", false},
	} {
		cfg, err := config.Parse([]byte(gatewayYAML("127.0.0.1:1000", tc.h1, tc.h2, tc.rt, 9999)), env)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		models := map[string]*config.Model{}
		for _, m := range cfg.Models {
			models[m.Name] = m
		}
		if rt := models[modelRealtime]; (rt != nil) != (tc.rt != "") || rt != nil && rt.Chain[0].Channel.BaseURL != "http://"+tc.rt+"/v1" {
			t.Errorf("%s: realtime model %+v", tc.name, rt)
		}
		an := models[modelAnthropic]
		if an == nil || an.Chain[0].Channel.Provider != config.ProviderAnthropic || an.Chain[0].Channel.BaseURL != "http://127.0.0.1:1000" {
			t.Fatalf("%s: model %s: %+v", tc.name, modelAnthropic, an)
		}
		for _, m := range []struct{ name, url string }{{modelH1, "https://" + tc.h1 + "/v1"}, {modelH2, "https://" + tc.h2 + "/v1"}} {
			got := models[m.name]
			if (got != nil) != tc.tls {
				t.Errorf("%s: model %s present: %v", tc.name, m.name, got != nil)
			}
			if got != nil && got.Chain[0].Channel.BaseURL != m.url {
				t.Errorf("%s: model %s goes to %s, want %s", tc.name, m.name, got.Chain[0].Channel.BaseURL, m.url)
			}
		}
	}
}

func TestUpstreamURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:80":         "http://127.0.0.1:80",  // the plain upstream, as before
		"https://127.0.0.1:81": "https://127.0.0.1:81", // a TLS one
	} {
		u, err := upstreamURL(in)
		if err != nil || u.String() != want {
			t.Errorf("%q: got %v, %v; want %s", in, u, err, want)
		}
	}
}

// The burst stream is the per-frame stream's bytes, written at once: the
// same answer, so a relay's rows differ only in how it was written.
func TestBurstStreamMatchesPerFrame(t *testing.T) {
	srv := httptest.NewServer(newFastUpstream())
	defer srv.Close()
	_, perFrame := post(t, srv.Client(), srv.URL+"/v1/chat/completions", wlStream.body(modelBench))
	_, burst := post(t, srv.Client(), srv.URL+"/v1/chat/completions", wlBurst.body(modelBench))
	if string(perFrame) != string(burst) {
		t.Fatalf("burst stream differs from the per-frame one:\n%s\n--\n%s", burst, perFrame)
	}
	if !json.Valid(wlBurst.body(modelBench)) {
		t.Fatalf("burst request body is not JSON: %s", wlBurst.body(modelBench))
	}
	_, st := post(t, srv.Client(), srv.URL+"/_stats", nil)
	var stats upstreamStats
	if err := json.Unmarshal(st, &stats); err != nil || stats.Burst != 1 || stats.Stream != 1 {
		t.Fatalf("stats %s (%v): want one burst and one per-frame stream", st, err)
	}
}

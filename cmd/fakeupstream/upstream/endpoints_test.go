package upstream

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
)

// The legacy completions stream has no role chunk but the same text.
func TestCompletions(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.post(t.Context(), "/v1/completions", map[string]any{"model": "m|tokens=3", "prompt": "hi", "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := frames(resp.Body)
	if err != nil || len(got) != 5 || got[4] != "data: [DONE]" {
		t.Fatalf("frames %q, %v", got, err)
	}
	var text strings.Builder
	for _, f := range got[:4] {
		var c struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	if text.String() != Answer(3) {
		t.Fatalf("text %q", text.String())
	}
}

// Responses API streams typed events ending with response.completed.
func TestResponses(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.post(t.Context(), "/v1/responses", map[string]any{"model": "m|tokens=2", "input": "hello", "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := frames(resp.Body)
	if err != nil || len(got) != 4 {
		t.Fatalf("frames %q, %v", got, err)
	}
	for i, ev := range []string{"response.created", "response.output_text.delta", "response.output_text.delta", "response.completed"} {
		if !strings.HasPrefix(got[i], "event: "+ev+"\ndata: {") {
			t.Fatalf("frame %d = %q, want event %s", i, got[i], ev)
		}
	}
	if !strings.Contains(got[1], `"delta":"tok1 "`) || !strings.Contains(got[3], `"text":"tok1 tok2 "`) {
		t.Fatalf("deltas %q", got)
	}

	// Non-streaming, with an input item list.
	resp2, err := fx.post(t.Context(), "/v1/responses", map[string]any{"model": "m|tokens=2",
		"input": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "input_text", "text": "a b c"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var r struct {
		Object, Status, Model string
		Output                []struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	decode(t, resp2.Body, &r)
	if r.Object != "response" || r.Status != "completed" || r.Output[0].Content[0].Text != Answer(2) ||
		r.Usage.InputTokens != 3 || r.Usage.OutputTokens != 2 {
		t.Fatalf("response %+v", r)
	}

	// The same fault grammar applies: an error event before any delta.
	resp3, err := fx.post(t.Context(), "/v1/responses", map[string]any{"model": "m|stream-error-event", "input": "x", "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp3.Body.Close()
	got, err = frames(resp3.Body)
	if err != nil || len(got) != 2 || !strings.HasPrefix(got[1], "event: error\n") {
		t.Fatalf("error event: %q, %v", got, err)
	}
}

// Embeddings are deterministic so replays compare equal.
func TestEmbeddings(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.post(t.Context(), "/v1/embeddings", map[string]any{"model": "e", "input": []string{"a", "b"}, "dimensions": 12})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
	}
	decode(t, resp.Body, &r)
	if len(r.Data) != 2 || len(r.Data[1].Embedding) != 12 {
		t.Fatalf("data %+v", r.Data)
	}
	for i, in := range []string{"a", "b"} {
		want := Embedding(in, 12)
		for j := range want {
			if r.Data[i].Embedding[j] != want[j] || want[j] < -1 || want[j] >= 1 {
				t.Fatalf("embedding %d[%d] = %v, want %v", i, j, r.Data[i].Embedding[j], want[j])
			}
		}
	}
	// Status faults apply to every endpoint.
	resp2, err := fx.post(t.Context(), "/v1/embeddings", map[string]any{"model": "e|503", "input": "a"})
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 503 {
		t.Fatalf("embeddings fault: %d", resp2.StatusCode)
	}
}

// Images: n base64 payloads.
func TestImages(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.post(t.Context(), "/v1/images/generations", map[string]any{"model": "dall-e", "prompt": "a cat", "n": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []struct {
			B64 string `json:"b64_json"`
		} `json:"data"`
	}
	decode(t, resp.Body, &r)
	if len(r.Data) != 2 || r.Data[0].B64 == r.Data[1].B64 {
		t.Fatalf("images %+v", r)
	}
	if img, err := base64.StdEncoding.DecodeString(r.Data[0].B64); err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) {
		t.Fatalf("image bytes: %v", err)
	}
}

// Speech is binary; short-body must cut binary bodies too.
func TestSpeech(t *testing.T) {
	fx := newFixture(t, Options{})
	resp, err := fx.post(t.Context(), "/v1/audio/speech", map[string]any{"model": "tts|tokens=4", "input": "hello", "voice": "alloy"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.Header.Get("Content-Type") != "audio/mpeg" || !bytes.Equal(b, SpeechAudio("hello", 4)) || len(b) != 10+4*256 {
		t.Fatalf("speech %q %d bytes, %v", resp.Header.Get("Content-Type"), len(b), err)
	}
	resp2, err := fx.post(t.Context(), "/v1/audio/speech", map[string]any{"model": "tts|short-body", "input": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	if _, err := io.ReadAll(resp2.Body); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short speech: %v", err)
	}
}

// Transcriptions echo the upload's sha256: replays must be byte-identical.
func TestTranscription(t *testing.T) {
	fx := newFixture(t, Options{})
	file := bytes.Repeat([]byte{0, 1, 2, 0xff}, 5000)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("model", "whisper-1")
	fw, _ := mw.CreateFormFile("file", "a.mp3")
	_, _ = fw.Write(file)
	_ = mw.Close()
	resp, err := fx.client.Post(fx.ts.URL+"/v1/audio/transcriptions", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Text string }
	decode(t, resp.Body, &r)
	if r.Text != FileDigest(file) || fx.fake.Attempts("whisper-1") != 1 {
		t.Fatalf("text %q, want %q", r.Text, FileDigest(file))
	}
}

// GET /v1/models lists Options.Models.
func TestModels(t *testing.T) {
	fx := newFixture(t, Options{Models: []string{"a", "b"}})
	resp, err := fx.client.Get(fx.ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []struct{ ID string } `json:"data"`
	}
	decode(t, resp.Body, &r)
	if len(r.Data) != 2 || r.Data[1].ID != "b" {
		t.Fatalf("models %+v", r)
	}
	if resp, err := fx.client.Post(fx.ts.URL+"/v1/models", "application/json", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /v1/models: %v", err)
	} else {
		resp.Body.Close()
	}
}

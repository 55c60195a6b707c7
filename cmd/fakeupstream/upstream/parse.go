package upstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// parsed is what the fake reads from any request body. Each endpoint uses
// the fields it needs.
type parsed struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	Messages     []message // chat messages, or responses input items
	Inputs       []string  // embeddings input, completions/images/speech prompt
	N            int       // images
	Dimensions   int       // embeddings
	File         []byte    // transcription upload
	FileName     string
}

type message struct {
	Role string
	Text string
}

func (p parsed) lastRole() string {
	if len(p.Messages) == 0 {
		return ""
	}
	return p.Messages[len(p.Messages)-1].Role
}

// promptTokens is a deterministic stand-in for a tokenizer: whitespace
// separated words of the prompt, at least 1.
func (p parsed) promptTokens() int {
	n := 0
	for _, m := range p.Messages {
		n += len(strings.Fields(m.Text))
	}
	for _, s := range p.Inputs {
		n += len(strings.Fields(s))
	}
	return max(n, 1)
}

type wireRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Input      json.RawMessage `json:"input"`  // responses, embeddings, speech
	Prompt     json.RawMessage `json:"prompt"` // completions, images
	N          int             `json:"n"`
	Dimensions int             `json:"dimensions"`
}

func parseJSON(body []byte) (parsed, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return parsed{}, fmt.Errorf("request body is not valid JSON: %v", err)
	}
	p := parsed{Model: w.Model, Stream: w.Stream, N: w.N, Dimensions: w.Dimensions}
	if w.StreamOptions != nil {
		p.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	for _, m := range w.Messages {
		p.Messages = append(p.Messages, message{Role: m.Role, Text: strings.Join(texts(m.Content), "")})
	}
	// Responses input is either a string or a list of role/content items;
	// embeddings and speech input is a string or a list of strings.
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(w.Input, &items) == nil && len(items) > 0 && items[0].Role != "" {
		for _, it := range items {
			p.Messages = append(p.Messages, message{Role: it.Role, Text: strings.Join(texts(it.Content), "")})
		}
	} else {
		p.Inputs = append(p.Inputs, texts(w.Input)...)
	}
	p.Inputs = append(p.Inputs, texts(w.Prompt)...)
	return p, nil
}

// texts extracts the text of a content value: a string, a list of strings,
// a list of parts with a "text" field, or a list of token ids (rendered as
// their decimal form so they still hash deterministically).
func texts(raw json.RawMessage) []string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return []string{string(raw)}
	}
	var out []string
	for _, item := range list {
		var part struct {
			Text *string `json:"text"`
		}
		switch {
		case json.Unmarshal(item, &s) == nil:
			out = append(out, s)
		case json.Unmarshal(item, &part) == nil && part.Text != nil:
			out = append(out, *part.Text)
		default:
			out = append(out, string(item))
		}
	}
	return out
}

// parseForm reads a multipart/form-data transcription request.
func parseForm(r *http.Request, body []byte) (parsed, error) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return parsed{}, errors.New("expected multipart/form-data with a boundary")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	var p parsed
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return p, fmt.Errorf("multipart body: %v", err)
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return p, fmt.Errorf("multipart part %q: %v", part.FormName(), err)
		}
		switch part.FormName() {
		case "model":
			p.Model = string(data)
		case "stream":
			p.Stream = string(data) == "true"
		case "file":
			p.File, p.FileName = data, part.FileName()
		}
	}
	if p.File == nil {
		return p, errors.New("multipart body has no file part")
	}
	return p, nil
}

// FileDigest is the text a transcription answers for an uploaded file, so
// tests can check that a replayed upload reached the fake byte for byte.
func FileDigest(file []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(file))
}

package reqbody

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"strings"
	"testing"
)

const bnd = "XyZ123"

// form builds a multipart body the way clients (curl, the OpenAI SDKs) do.
func form(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString("--" + bnd + "\r\n" + p + "\r\n")
	}
	b.WriteString("--" + bnd + "--\r\n")
	return b.String()
}

func field(name, value string) string {
	return `Content-Disposition: form-data; name="` + name + `"` + "\r\n\r\n" + value
}

func file(name, content string) string {
	return `Content-Disposition: form-data; name="file"; filename="` + name + `"` + "\r\nContent-Type: audio/mpeg\r\n\r\n" + content
}

func TestParseMultipart(t *testing.T) {
	audio := "ID3\x04\x00\r\n--" + bnd + "x\r\n\x00\xff binary"
	cases := []struct {
		name  string
		body  string
		model string
		found bool
		parts int
		err   error
	}{
		// What the OpenAI SDK sends for a transcription.
		{"sdk upload", form(file("a.mp3", audio), field("model", "whisper-1"), field("language", "en")), "whisper-1", true, 3, nil},
		// The model may come first; its value is taken byte for byte.
		{"model first", form(field("model", "gpt-4o-transcribe"), file("a.mp3", "x")), "gpt-4o-transcribe", true, 2, nil},
		{"no model", form(file("a.mp3", "x")), "", false, 1, nil},
		{"empty model value", form(field("model", ""), file("a", "x")), "", true, 2, nil},
		// The boundary inside the file but followed by other bytes is content (RFC 2046, as Go reads it).
		{"boundary lookalike in content", form(file("a", "\r\n--"+bnd+"abc"), field("model", "m")), "m", true, 2, nil},
		{"transport padding after boundary", strings.Replace(form(field("model", "m")), bnd+"\r\n", bnd+" \t\r\n", 1), "m", true, 1, nil},
		{"epilogue ignored", form(field("model", "m")) + "trailing epilogue", "m", true, 1, nil},
		{"header case", form("content-disposition: FORM-DATA; NAME=\"model\"\r\n\r\nm"), "m", true, 1, nil},
		{"quoted-printable but not model", form("Content-Disposition: form-data; name=\"p\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db", field("model", "m")), "m", true, 2, nil},
		// Two model parts: decoders disagree on which wins.
		{"duplicate model", form(field("model", "cheap"), field("model", "dear")), "", false, 0, ErrAmbiguousPart},
		{"case variant model", form(field("Model", "dear")), "", false, 0, ErrAmbiguousPart},
		// Go's reader decodes quoted-printable: the upstream would read another value.
		{"qp model", form("Content-Disposition: form-data; name=\"model\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nd=65ar"), "", false, 0, ErrAmbiguousPart},
		{"preamble", "preamble\r\n" + form(field("model", "m")), "", false, 0, ErrMultipart},
		{"no close delimiter", "--" + bnd + "\r\n" + field("model", "m") + "\r\n", "", false, 0, ErrMultipart},
		{"LF only", strings.ReplaceAll(form(field("model", "m")), "\r\n", "\n"), "", false, 0, ErrMultipart},
		{"folded header", form("Content-Disposition: form-data;\r\n name=\"model\"\r\n\r\nm"), "", false, 0, ErrMultipart},
		{"bad disposition", form("Content-Disposition: form-data; name=\r\n\r\nm"), "", false, 0, ErrMultipart},
		{"two dispositions", form("Content-Disposition: form-data; name=\"x\"\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm"), "", false, 0, ErrMultipart},
		{"junk after close", form(field("model", "m"))[:len(form(field("model", "m")))-2] + "junk", "", false, 0, ErrMultipart},
		{"no parts", "--" + bnd + "--\r\n", "", false, 0, ErrMultipart},
		{"empty", "", "", false, 0, ErrMultipart},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseMultipart([]byte(tc.body), bnd)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if f.Model != tc.model || f.ModelPresent != tc.found || f.Parts != tc.parts {
				t.Fatalf("got %+v", f)
			}
			checkAgainstStdlib(t, []byte(tc.body), f)
		})
	}
}

// TestRewriteMultipartModel: only the model value changes; the file part,
// binary bytes included, is copied byte for byte.
func TestRewriteMultipartModel(t *testing.T) {
	audio := "\x00\x01\xfe\xff\r\n--" + bnd + "-x\r\n"
	body := []byte(form(file("a.mp3", audio), field("model", "whisper"), field("prompt", "p")))
	f, err := ParseMultipart(body, bnd)
	if err != nil {
		t.Fatal(err)
	}
	out, err := RewriteMultipartModel(nil, body, f, "whisper-1-upstream")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(body), "\r\n\r\nwhisper\r\n", "\r\n\r\nwhisper-1-upstream\r\n", 1)
	if string(out) != want {
		t.Fatalf("rewritten body\n%q\nwant\n%q", out, want)
	}
	g, err := ParseMultipart(out, bnd)
	if err != nil || g.Model != "whisper-1-upstream" {
		t.Fatalf("reparse: %+v %v", g, err)
	}
	// A model name with a line break could forge a delimiter.
	if _, err := RewriteMultipartModel(nil, body, f, "m\r\n--"+bnd); !errors.Is(err, ErrModelValue) {
		t.Fatalf("line break accepted: %v", err)
	}
	// No model part: the body is copied unchanged.
	body2 := []byte(form(file("a", "x")))
	f2, _ := ParseMultipart(body2, bnd)
	if out, _ := RewriteMultipartModel(nil, body2, f2, "m"); !bytes.Equal(out, body2) {
		t.Fatalf("body without model changed")
	}
}

// checkAgainstStdlib: whatever ParseMultipart accepts, Go's mime/multipart
// (the upstream fake, and many real servers) reads the same parts and the
// same model.
func checkAgainstStdlib(t *testing.T, body []byte, f Form) {
	t.Helper()
	mr := multipart.NewReader(bytes.NewReader(body), bnd)
	parts, models := 0, []string{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("accepted, but mime/multipart fails: %v\n%q", err, body)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			t.Fatalf("accepted, but mime/multipart fails reading a part: %v\n%q", err, body)
		}
		parts++
		if p.FormName() == "model" {
			models = append(models, string(data))
		}
	}
	if parts != f.Parts {
		t.Fatalf("parts: ours %d, mime/multipart %d\n%q", f.Parts, parts, body)
	}
	switch {
	case f.ModelPresent && (len(models) != 1 || models[0] != f.Model):
		t.Fatalf("model: ours %q, mime/multipart %q\n%q", f.Model, models, body)
	case !f.ModelPresent && len(models) != 0:
		t.Fatalf("model: ours none, mime/multipart %q\n%q", models, body)
	}
}

// FuzzParseMultipart: untrusted upload bodies never panic, and everything
// accepted is read identically by mime/multipart, before and after the
// model rewrite (which must leave every other part byte-identical).
func FuzzParseMultipart(f *testing.F) {
	f.Add([]byte(form(file("a.mp3", "ID3\x00\xff"), field("model", "whisper-1"))))
	f.Add([]byte(form(field("model", "m"), field("language", "en"))))
	f.Add([]byte(form("Content-Disposition: form-data; name=\"model\"\r\n\r\n")))
	f.Add([]byte("--" + bnd + "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n--" + bnd + "--"))
	f.Add([]byte(form(file("a", "\r\n--"+bnd+"x"), field("model", "m"))))
	f.Add([]byte(form(field("model", "a"), field("model", "b"))))
	f.Fuzz(func(t *testing.T, body []byte) {
		fm, err := ParseMultipart(body, bnd)
		if err != nil {
			return
		}
		checkAgainstStdlib(t, body, fm)
		out, err := RewriteMultipartModel(nil, body, fm, "up-model")
		if err != nil {
			t.Fatal(err)
		}
		g, err := ParseMultipart(out, bnd)
		if err != nil {
			t.Fatalf("rewritten body rejected: %v\n%q", err, out)
		}
		if fm.ModelPresent && g.Model != "up-model" || g.Parts != fm.Parts {
			t.Fatalf("rewrite: %+v from %+v", g, fm)
		}
		checkAgainstStdlib(t, out, g)
		if !fm.ModelPresent && !bytes.Equal(out, body) {
			t.Fatal("a body without a model part was changed")
		}
	})
}

package reqbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		body string
		want Fields // only exported fields compared
		err  error
	}{
		// The everyday chat request.
		{"chat", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
			Fields{Model: "gpt-4o-mini", ModelPresent: true, Stream: true, IncludeUsage: true}, nil},
		// "model" inside messages/tools must not be taken for the routing key.
		{"nested model ignored", `{"messages":[{"role":"user","content":"x","model":"evil"}],"tools":[{"model":"evil2"}],"model":"good"}`,
			Fields{Model: "good", ModelPresent: true}, nil},
		{"only nested model", `{"metadata":{"model":"evil"}}`, Fields{}, nil},
		// Escapes and unicode in the model value are decoded.
		{"escaped model", `{"model":"gpt\u002d4o \"x\" é"}`, Fields{Model: `gpt-4o "x" é`, ModelPresent: true}, nil},
		// An escaped key spelling is the same key to every decoder.
		{"escaped key", `{"mod\u0065l":"m"}`, Fields{Model: "m", ModelPresent: true}, nil},
		{"whitespace", " \n{ \"model\" :\t\"m\" , \"stream\" : false }\r\n", Fields{Model: "m", ModelPresent: true}, nil},
		{"stream null", `{"stream":null,"stream_options":null}`, Fields{}, nil},
		// Duplicate routing keys: decoders disagree on which wins.
		{"duplicate model", `{"model":"cheap","model":"expensive"}`, Fields{}, ErrDuplicateKey},
		{"duplicate escaped model", `{"model":"cheap","mod\u0065l":"expensive"}`, Fields{}, ErrDuplicateKey},
		// Go's encoding/json matches "Model" to a model field.
		{"case variant model", `{"model":"cheap","Model":"expensive"}`, Fields{}, ErrDuplicateKey},
		{"lone case variant", `{"MODEL":"x"}`, Fields{}, ErrDuplicateKey},
		{"duplicate stream", `{"stream":false,"stream":true}`, Fields{}, ErrDuplicateKey},
		{"duplicate include_usage", `{"stream_options":{"include_usage":false,"include_usage":true}}`, Fields{}, ErrDuplicateKey},
		// Duplicates of keys we do not route on are the upstream's business.
		{"duplicate other key", `{"temperature":1,"temperature":2,"model":"m"}`, Fields{Model: "m", ModelPresent: true}, nil},
		{"model not string", `{"model":42}`, Fields{}, ErrInvalidField},
		{"stream not bool", `{"stream":"yes"}`, Fields{}, ErrInvalidField},
		{"stream_options not object", `{"stream_options":[]}`, Fields{}, ErrInvalidField},
		{"array", `[{"model":"m"}]`, Fields{}, ErrNotObject},
		{"string", `"x"`, Fields{}, ErrNotObject},
		{"empty", ``, Fields{}, ErrInvalidJSON},
		{"truncated", `{"model":"m"`, Fields{}, ErrInvalidJSON},
		{"trailing data", `{"model":"m"}{}`, Fields{}, ErrInvalidJSON},
		{"trailing comma", `{"model":"m",}`, Fields{}, ErrInvalidJSON},
		// Errors after the model must still fail the whole body.
		{"invalid after model", `{"model":"m","x":tru}`, Fields{}, ErrInvalidJSON},
		{"invalid inside stream_options", `{"stream_options":{"include_usage":true,}}`, Fields{}, ErrInvalidJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.body))
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if got.Model != tc.want.Model || got.ModelPresent != tc.want.ModelPresent || got.Stream != tc.want.Stream || got.IncludeUsage != tc.want.IncludeUsage {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

func rewrite(t *testing.T, body string, opts Options) string {
	t.Helper()
	f, err := Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Rewrite(nil, []byte(body), f, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(out) {
		t.Fatalf("invalid output %s", out)
	}
	return string(out)
}

func TestRewrite(t *testing.T) {
	prefix := "Hello, \"wor"
	cases := []struct {
		name string
		body string
		opts Options
		want string
	}{
		// Only the model value changes; spacing and key order survive.
		{"model", `{ "messages" : [{"model":"keep"}],  "model" : "gpt-4o-mini" , "x":1}`, Options{Model: "gpt-4o-mini-2024-07-18"},
			`{ "messages" : [{"model":"keep"}],  "model" : "gpt-4o-mini-2024-07-18" , "x":1}`},
		{"model escaped", `{"model":"a"}`, Options{Model: "q\"\n<é>"}, `{"model":"q\"\n<é>"}`},
		{"model inserted", `{"messages":[]}`, Options{Model: "m"}, `{"model":"m","messages":[]}`},
		{"model into empty", `{}`, Options{Model: "m"}, `{"model":"m"}`},
		// include_usage: all four shapes of stream_options.
		{"usage added", `{"stream":true}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"usage into options", `{"stream":true,"stream_options":{"x":1}}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true,"x":1}}`},
		{"usage into empty options", `{"stream":true,"stream_options":{ }}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true }}`},
		{"usage flipped", `{"stream":true,"stream_options":{"include_usage":false}}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"usage null options", `{"stream":true,"stream_options":null}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{"usage already", `{"stream":true,"stream_options":{"include_usage":true}}`, Options{IncludeUsage: true}, `{"stream":true,"stream_options":{"include_usage":true}}`},
		// OpenAI 400s stream_options without stream: leave non-streaming alone.
		{"usage not streaming", `{"stream":false}`, Options{IncludeUsage: true}, `{"stream":false}`},
		{"prefix", `{"messages":[{"role":"user","content":"hi"}]}`, Options{AssistantPrefix: &prefix},
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello, \"wor"}]}`},
		{"prefix empty messages", `{"messages":[ ]}`, Options{AssistantPrefix: &prefix}, `{"messages":[ {"role":"assistant","content":"Hello, \"wor"}]}`},
		// Everything at once, in one pass, edits in body order regardless of key order.
		{"all", `{"stream":true,"messages":[{"role":"user","content":"hi"}],"model":"pub"}`, Options{Model: "up", IncludeUsage: true, AssistantPrefix: &prefix},
			`{"stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello, \"wor"}],"model":"up","stream_options":{"include_usage":true}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rewrite(t, tc.body, tc.opts); got != tc.want {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Insertions into an empty object meet at one offset; both must land, model first.
func TestRewriteEmptyObjectBothInserts(t *testing.T) {
	f, _ := Parse([]byte(`{}`))
	f.Stream = true // as if stream came from elsewhere; exercises the comma logic
	out, _ := Rewrite(nil, []byte(`{}`), f, Options{Model: "m", IncludeUsage: true})
	if string(out) != `{"model":"m","stream_options":{"include_usage":true}}` {
		t.Fatalf("%s", out)
	}
}

func TestAppendAssistantPrefix(t *testing.T) {
	out, err := AppendAssistantPrefix(nil, []byte(`{"messages":[{"role":"user","content":"x"}]}`), "partial")
	if err != nil || string(out) != `{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"partial"}]}` {
		t.Fatalf("%s %v", out, err)
	}
	// /v1/completions bodies have a prompt, not messages: resume by prefill is impossible.
	if _, err := AppendAssistantPrefix(nil, []byte(`{"prompt":"x"}`), "p"); !errors.Is(err, ErrNoMessages) {
		t.Fatalf("err = %v", err)
	}
	if _, err := AppendAssistantPrefix(nil, []byte(`{"messages":"x"}`), "p"); !errors.Is(err, ErrNoMessages) {
		t.Fatalf("err = %v", err)
	}
	if _, err := AppendAssistantPrefix(nil, []byte(`nope`), "p"); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("err = %v", err)
	}
}

// A large body is parsed and rewritten without touching the payload bytes.
func TestHugeBody(t *testing.T) {
	body := bigBody(4 << 20)
	f, err := Parse(body)
	if err != nil || f.Model != "gpt-4o-mini" {
		t.Fatal(err)
	}
	out := RewriteModel(nil, body, f, "x")
	if len(out) != len(body)-len("gpt-4o-mini")+1 || !bytes.HasSuffix(out, body[f.model.e:]) {
		t.Fatal("payload changed")
	}
}

func bigBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o-mini","messages":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"message %d: %s \"quoted\" \u00e9 \n"}`, i, strings.Repeat("lorem ipsum ", 8))
	}
	b.WriteString(`],"temperature":0.2,"stream":true}`)
	return b.Bytes()
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"a","stream":true,"stream_options":{"x":null}}`,
		`{"stream":true,"stream_options":null,"messages":[]}`,
		`{}`, `[]`, `{"model":"a","model":"b"}`, `{"mod\u0065l":"x"}`, ` {"a":[1,{"model":2}]} `,
		`{"model":"m","max_completion_tokens":1e3,"max_tokens":256,"max_output_tokens":null}`,
		`{"max_tokens":100.0,"max_output_tokens":123456789012345678901234567890}`,
		`{"max_tokens":1.5}`, `{"max_output_tokens":-0}`, `{"max_completion_tokens":"7"}`,
	} {
		f.Add([]byte(s), "up\"model", "pre")
	}
	f.Fuzz(func(t *testing.T, body []byte, model, prefix string) {
		fields, err := Parse(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("Parse accepted invalid JSON %q", body)
		}
		var orig map[string]json.RawMessage
		if err := json.Unmarshal(body, &orig); err != nil {
			t.Fatalf("Parse accepted a non-object: %v", err)
		}
		// The token limit the wallet reserves for is the one an upstream
		// reads: each key an integral number, clamped.
		var wantMax int64
		wantPresent := false
		for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
			v, ok := orig[k]
			if !ok || string(v) == "null" {
				continue
			}
			n, ok := new(big.Float).SetString(string(v))
			if !ok || n.Sign() < 0 || !n.IsInt() {
				t.Fatalf("Parse accepted %s = %s, which is not a non-negative integer", k, v)
			}
			c := int64(maxTokenCount)
			if n.Cmp(big.NewFloat(maxTokenCount)) < 0 {
				c, _ = n.Int64()
			}
			wantMax, wantPresent = max(wantMax, c), true
		}
		if fields.MaxTokens != wantMax || fields.MaxTokensPresent != wantPresent {
			t.Fatalf("MaxTokens = %d (present %v), want %d (%v) for %s", fields.MaxTokens, fields.MaxTokensPresent, wantMax, wantPresent, body)
		}
		if model == "" {
			model = "m"
		}
		_, hasMessages := orig["messages"]
		opts := Options{Model: model, IncludeUsage: true}
		if hasMessages && bytes.HasPrefix(bytes.TrimSpace(orig["messages"]), []byte("[")) {
			opts.AssistantPrefix = &prefix
		}
		out, err := Rewrite(nil, body, fields, opts)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("rewrite of %q produced invalid JSON %q: %v", body, out, err)
		}
		var gotModel string
		if err := json.Unmarshal(got["model"], &gotModel); err != nil || gotModel != json2string(model) {
			t.Fatalf("model %q, want %q", got["model"], model)
		}
		for k, v := range orig {
			switch k {
			case "model", "stream_options", "messages":
				continue
			}
			if !jsonEqual(v, got[k]) {
				t.Fatalf("key %q changed: %s -> %s", k, v, got[k])
			}
		}
		if fields.Stream {
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			if json.Unmarshal(got["stream_options"], &so) != nil || !so.IncludeUsage {
				t.Fatalf("include_usage not set: %s", out)
			}
		} else if !jsonEqual(orig["stream_options"], got["stream_options"]) {
			t.Fatalf("stream_options changed on a non-stream body")
		}
		if opts.AssistantPrefix != nil {
			var msgs []json.RawMessage
			if json.Unmarshal(got["messages"], &msgs) != nil || len(msgs) == 0 {
				t.Fatalf("messages: %s", got["messages"])
			}
			var last struct{ Role, Content string }
			if json.Unmarshal(msgs[len(msgs)-1], &last) != nil || last.Role != "assistant" || last.Content != json2string(prefix) {
				t.Fatalf("last message %s", msgs[len(msgs)-1])
			}
		}
		if got2, err := Parse(out); err != nil || got2.Model != json2string(model) {
			t.Fatalf("re-parse: %v %q", err, got2.Model)
		}
	})
}

// json2string is what a decoder sees after s went through a JSON encoder
// (invalid UTF-8 becomes U+FFFD).
func json2string(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}

func benchBody(b *testing.B, body []byte) {
	dst := make([]byte, 0, len(body)+256)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		f, err := Parse(body)
		if err != nil {
			b.Fatal(err)
		}
		dst, err = Rewrite(dst[:0], body, f, Options{Model: "gpt-4o-mini-2024-07-18", IncludeUsage: true})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// Parse+Rewrite with a pooled dst: the only allocation is the Model string.
func BenchmarkParseRewrite1KB(b *testing.B)   { benchBody(b, bigBody(1<<10)) }
func BenchmarkParseRewrite100KB(b *testing.B) { benchBody(b, bigBody(100<<10)) }

package jsonscan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

var validityCases = []struct {
	name string
	in   string
}{
	{"empty", ""},
	{"ws only", " \n\t"},
	{"object", `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`},
	{"spaced", " { \"a\" : [ 1 , 2 ] } \r\n"},
	{"numbers", `[0,-0,1.5,-2e10,3E+2,4e-3,12345678901234567890]`},
	{"leading zero", `01`},
	{"bare minus", `-`},
	{"dot no digit", `1.`},
	{"exp no digit", `1e`},
	{"escapes", `"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"`},
	{"bad escape", `"\x"`},
	{"short unicode", `"\u12"`},
	{"control char", "\"a\x01\""},
	{"invalid utf8 accepted", "\"\xff\xfe\""},
	{"trailing comma object", `{"a":1,}`},
	{"trailing comma array", `[1,]`},
	{"two values", `1 2`},
	{"unterminated", `{"a":`},
	{"non-string key", `{1:2}`},
	{"missing colon", `{"a" 1}`},
	{"literal prefix", `tru`},
	{"literal suffix", `truex`},
	{"mismatched", `[1}`},
	{"depth at limit", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
	{"depth over limit", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)},
	{"deep mixed objects", strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)},
}

// Valid must agree with encoding/json.Valid: reqbody promises json.Valid semantics.
func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, tc := range validityCases {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := Valid([]byte(tc.in)), json.Valid([]byte(tc.in)); got != want {
				t.Fatalf("Valid(%.40q) = %v, encoding/json says %v", tc.in, got, want)
			}
		})
	}
}

// The iterators see the same members a decoder sees, including escaped keys.
func TestMembers(t *testing.T) {
	b := []byte(` {"a" : 1, "b\u0063":{"x":[1,2]} ,"d":"s"} `)
	o := Members(b, 1)
	var keys, vals []string
	for {
		k, esc, vs, ve, ok := o.Next()
		if !ok {
			break
		}
		keys = append(keys, string(Unquote(nil, k))+map[bool]string{true: "*", false: ""}[esc])
		vals = append(vals, string(b[vs:ve]))
	}
	if o.Err() || o.End() != len(b)-1 || o.Len() != 3 {
		t.Fatalf("err=%v end=%d len=%d", o.Err(), o.End(), o.Len())
	}
	if got := strings.Join(keys, ","); got != "a,bc*,d" {
		t.Fatalf("keys %s", got)
	}
	if got := strings.Join(vals, "|"); got != `1|{"x":[1,2]}|"s"` {
		t.Fatalf("vals %s", got)
	}
}

// KeyIs must see through escapes and, with fold, through ASCII case — the two
// ways a client could smuggle a second "model" key past the gateway.
func TestKeyIs(t *testing.T) {
	cases := []struct {
		raw  string
		esc  bool
		fold bool
		want bool
	}{
		{"model", false, false, true},
		{"Model", false, false, false},
		{"Model", false, true, true},
		{`mod\u0065l`, true, false, true},
		{`MOD\u0045L`, true, true, true},
		{"models", false, true, false},
	}
	for _, c := range cases {
		if got := KeyIs([]byte(c.raw), c.esc, "model", c.fold); got != c.want {
			t.Errorf("KeyIs(%q, fold=%v) = %v", c.raw, c.fold, got)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, tc := range validityCases {
		if len(tc.in) < 200 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// Unquote must decode exactly like encoding/json, including broken surrogates
// and invalid UTF-8; AppendQuote must round-trip, from a string or []byte.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`a`, `\n\t\"`, `\ud83d\ude00`, `\ud83d`, `\ud83d\u0041`, "\xff", `\u2028`, `é`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit := `"` + s + `"`
		if Valid([]byte(lit)) {
			var want string
			if err := json.Unmarshal([]byte(lit), &want); err != nil {
				t.Fatal(err)
			}
			if got := string(Unquote(nil, []byte(s))); got != want {
				t.Fatalf("Unquote(%q) = %q, want %q", s, got, want)
			}
		}
		q := AppendQuote(nil, s)
		var back string
		if err := json.Unmarshal(q, &back); err != nil {
			t.Fatalf("AppendQuote(%q) = %s: %v", s, q, err)
		}
		want, _ := json.Marshal(s)
		var want2 string
		_ = json.Unmarshal(want, &want2)
		if back != want2 {
			t.Fatalf("round trip %q -> %q, want %q", s, back, want2)
		}
		if b := AppendQuote(nil, []byte(s)); string(b) != string(q) {
			t.Fatalf("AppendQuote of a string and of []byte differ: %s vs %s", q, b)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	doc := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant.\nBe brief."},{"role":"user","content":"Hello there, how are you today? Tell me about Go."}],"temperature":0.7,"stream":true}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if !Valid(doc) {
			b.Fatal("invalid")
		}
	}
}

func BenchmarkEncodingJSONValid(b *testing.B) {
	doc := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant.\nBe brief."},{"role":"user","content":"Hello there, how are you today? Tell me about Go."}],"temperature":0.7,"stream":true}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(doc) {
			b.Fatal("invalid")
		}
	}
}

// walk lists every member and element of the value at b[i], recursively,
// with the validating iterators or the known-valid ones.
func walk(t testing.TB, b []byte, i int, known bool, out *[]string) {
	if i < 0 || i >= len(b) {
		return
	}
	switch b[i] {
	case '{':
		o := Members(b, i)
		if known {
			o = ValidMembers(b, i)
		}
		for {
			k, esc, vs, ve, ok := o.Next()
			if !ok {
				break
			}
			if vs > ve || ve > len(b) {
				t.Fatalf("member span %d-%d out of order or beyond %d bytes", vs, ve, len(b))
			}
			*out = append(*out, fmt.Sprintf("key %q esc=%v value %d-%d", k, esc, vs, ve))
			walk(t, b, vs, known, out)
		}
		*out = append(*out, fmt.Sprintf("} at %d err=%v", o.End(), o.Err()))
	case '[':
		a := Elements(b, i)
		if known {
			a = ValidElements(b, i)
		}
		for {
			vs, ve, ok := a.Next()
			if !ok {
				break
			}
			if vs > ve || ve > len(b) {
				t.Fatalf("element span %d-%d out of order or beyond %d bytes", vs, ve, len(b))
			}
			*out = append(*out, fmt.Sprintf("element %d-%d", vs, ve))
			walk(t, b, vs, known, out)
		}
		*out = append(*out, fmt.Sprintf("] at %d len=%d err=%v", a.End(), a.Len(), a.Err()))
	}
}

// checkKnownIterators: on valid JSON the known-valid iterators see exactly
// what the validating ones see; on anything else they stay within b.
func checkKnownIterators(t testing.TB, b []byte) {
	i := SkipWS(b, 0)
	var want, got []string
	walk(t, b, i, true, &got)
	if !json.Valid(b) {
		return
	}
	walk(t, b, i, false, &want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%q:\nknown-valid iterators:\n%s\nvalidating iterators:\n%s", b, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	checkResume(t, b, i)
}

// checkResume: an object iterator rebuilt with ResumeMembers at any point
// the gate may cut (after a member, before its ',') returns the same
// remaining members, and the same end, as the iterator it was cut from.
func checkResume(t testing.TB, b []byte, i int) {
	if i >= len(b) || b[i] != '{' {
		return
	}
	type member struct {
		key    string
		vs, ve int
	}
	type point struct{ pos, n int }
	var all []member
	var cuts []point
	o := Members(b, i)
	for {
		if pos := o.Pos(); o.Count() > 0 {
			if j := SkipWS(b, pos); j < len(b) && b[j] == ',' {
				cuts = append(cuts, point{pos, o.Count()})
			}
		}
		key, _, vs, ve, ok := o.Next()
		if !ok {
			break
		}
		all = append(all, member{string(key), vs, ve})
	}
	if o.Err() {
		t.Fatalf("%q: valid JSON, iterator error", b)
	}
	for _, c := range cuts {
		r := ResumeMembers(b, c.pos, c.n)
		k := c.n
		for {
			key, _, vs, ve, ok := r.Next()
			if !ok {
				break
			}
			if k >= len(all) || (member{string(key), vs, ve}) != all[k] {
				t.Fatalf("%q resumed at %d after %d members: member %d is %q [%d,%d)", b, c.pos, c.n, k, key, vs, ve)
			}
			k++
		}
		if r.Err() || k != len(all) || r.End() != o.End() || r.Len() != len(all) {
			t.Fatalf("%q resumed at %d after %d members: err %v, %d of %d members, end %d want %d", b, c.pos, c.n, r.Err(), k, len(all), r.End(), o.End())
		}
	}
}

var knownCases = []string{
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	` { "a" : [ 1 , 2 ] , "b" : { } , "c" : [ ] } `,
	`{"k\"q":"v\\","x\\\"y":["\\\\\"",{"]":"}"}],"n":-1.5e+3}`,
	`[[[]],[{}],"[{",{"a":"\u0022"}]`,
	`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"line\nnext \"quoted\""},"finish_reason":null}]}`,
	`{"a":1,}`, `{"a" 1}`, `[1,]`, `{"a":"unterminated`, `{"a":[1}`, `{"\`,
}

func TestKnownValidIterators(t *testing.T) {
	for _, c := range knownCases {
		checkKnownIterators(t, []byte(c))
	}
	for _, tc := range validityCases {
		if len(tc.in) < 1000 {
			checkKnownIterators(t, []byte(tc.in))
		}
	}
}

func FuzzKnownValidIterators(f *testing.F) {
	for _, c := range knownCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkKnownIterators(t, b)
	})
}

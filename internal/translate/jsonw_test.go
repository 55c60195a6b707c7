package translate

import (
	"encoding/json"
	"testing"
)

// appendString must produce what encoding/json decodes back to the same
// text (invalid UTF-8 aside), for every input: frames are built with it.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\\n\r\t\x00\x1f", "é😀", "\xff\xfe", "<&>", "\u2028\u2029"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendString(nil, s)
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q -> %s: %v", s, out, err)
		}
		want, _ := json.Marshal(s)
		var w string
		_ = json.Unmarshal(want, &w)
		if got != w {
			t.Fatalf("%q: got %q want %q", s, got, w)
		}
		if b := appendString(nil, []byte(s)); string(b) != string(out) {
			t.Fatalf("string and []byte differ: %s vs %s", out, b)
		}
	})
}

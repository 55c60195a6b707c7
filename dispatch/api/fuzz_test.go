package api

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch/config"
)

// FuzzAuthorization feeds arbitrary Authorization header values (and a
// second, conflicting one) to the client-key check: the header is the
// first untrusted bytes of every request, so it must never panic, must
// accept exactly "Bearer <key>" (scheme case-insensitive, surrounding
// spaces trimmed) for a configured key, and must name that key's id.
func FuzzAuthorization(f *testing.F) {
	for _, s := range []string{
		"Bearer hg-key-a", "bearer hg-key-b", "BEARER  hg-key-a  ", "Bearer ", "Bearer", "",
		"Basic aGc6a2V5", "Bearer hg-key-a\x00", "Bearer\thg-key-a", "Bearer hg-key-a, Bearer hg-key-b",
		"Bearer \xff\xfe", "Bearerhg-key-a", strings.Repeat("B", 300),
	} {
		f.Add(s, "")
	}
	f.Add("Bearer hg-key-a", "Bearer hg-key-b")
	f.Add("", "Bearer hg-key-a") // an empty first header is not sent: the second is the first
	keys := map[string]string{"hg-key-a": "team-a", "hg-key-b": "team-b"}
	cfg := &config.Config{Auth: config.Auth{Mode: config.AuthKeys}}
	for k, id := range keys {
		cfg.Auth.Keys = append(cfg.Auth.Keys, config.Key{ID: id, SHA256: sha256.Sum256([]byte(k))})
	}
	f.Fuzz(func(t *testing.T, h1, h2 string) {
		r := &http.Request{Header: http.Header{}}
		if h1 != "" {
			r.Header["Authorization"] = []string{h1}
		}
		if h2 != "" {
			r.Header["Authorization"] = append(r.Header["Authorization"], h2)
		}
		id, ok := authenticate(cfg, r)
		// The reference: only the first header counts (Header.Get), and an
		// empty h1 is not sent at all, so h2 is then the first.
		first := h1
		if first == "" {
			first = h2
		}
		wantID, wantOK := "", false
		if len(first) > len("bearer ") && strings.EqualFold(first[:len("bearer ")], "bearer ") {
			wantID = keys[strings.TrimSpace(first[len("bearer "):])]
			wantOK = wantID != ""
		}
		if ok != wantOK || id != wantID {
			t.Fatalf("authenticate(%q, %q) = %q,%v; want %q,%v", h1, h2, id, ok, wantID, wantOK)
		}
		// auth.mode none lets anything through, with no tenant.
		none := &config.Config{Auth: config.Auth{Mode: config.AuthNone}}
		if id, ok := authenticate(none, r); !ok || id != "" {
			t.Fatalf("mode none: %q %v", id, ok)
		}
	})
}

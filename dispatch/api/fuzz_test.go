package api

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/config"
)

// FuzzAuthorization feeds arbitrary Authorization header values (and a
// second, conflicting one) and x-api-key values to the client-key check
// the server runs (identify): the headers are the first untrusted bytes of
// every request, so it must never panic, must accept exactly "Bearer <key>"
// (scheme case-insensitive, surrounding spaces trimmed) for a configured
// key, or x-api-key (trimmed) when no Authorization is sent, and must name
// that key's tenant (its id when it names none).
func FuzzAuthorization(f *testing.F) {
	for _, s := range []string{
		"Bearer hg-key-a", "bearer hg-key-b", "BEARER  hg-key-a  ", "Bearer ", "Bearer", "",
		"Basic aGc6a2V5", "Bearer hg-key-a\x00", "Bearer\thg-key-a", "Bearer hg-key-a, Bearer hg-key-b",
		"Bearer \xff\xfe", "Bearerhg-key-a", strings.Repeat("B", 300),
	} {
		f.Add(s, "", "")
	}
	f.Add("Bearer hg-key-a", "Bearer hg-key-b", "")
	f.Add("", "Bearer hg-key-a", "") // an empty first header is not sent: the second is the first
	f.Add("", "", " hg-key-b ")
	f.Add("Bearer hg-wrong", "", "hg-key-a") // Authorization wins over x-api-key
	f.Add("Basic aGc6a2V5", "", "hg-key-a")
	keys := map[string]string{"hg-key-a": "team-a", "hg-key-b": "acme"}
	cfg := &config.Config{Auth: config.Auth{Mode: config.AuthKeys}}
	cfg.Auth.Keys = []config.Key{
		{ID: "team-a", SHA256: sha256.Sum256([]byte("hg-key-a"))},
		{ID: "team-b", Tenant: "acme", SHA256: sha256.Sum256([]byte("hg-key-b"))},
	}
	s := &Server{}
	f.Fuzz(func(t *testing.T, h1, h2, xKey string) {
		r := &http.Request{Header: http.Header{}}
		if h1 != "" {
			r.Header["Authorization"] = []string{h1}
		}
		if h2 != "" {
			r.Header["Authorization"] = append(r.Header["Authorization"], h2)
		}
		if xKey != "" {
			r.Header["X-Api-Key"] = []string{xKey}
		}
		tenant, e := s.identify(cfg, r)
		// The reference: only the first header counts (Header.Get), and an
		// empty h1 is not sent at all, so h2 is then the first.
		first := h1
		if first == "" {
			first = h2
		}
		want := ""
		switch {
		case len(first) > len("bearer ") && strings.EqualFold(first[:len("bearer ")], "bearer "):
			want = keys[strings.TrimSpace(first[len("bearer "):])]
		case first == "":
			want = keys[strings.TrimSpace(xKey)]
		}
		if tenant != want || (e == nil) != (want != "") || e != nil && e.Code != apierror.CodeInvalidAPIKey {
			t.Fatalf("identify(%q, %q, x-api-key %q) = %q, %v; want %q", h1, h2, xKey, tenant, e, want)
		}
		// auth.mode none lets anything through, with no tenant.
		none := &config.Config{Auth: config.Auth{Mode: config.AuthNone}}
		if tenant, e := s.identify(none, r); e != nil || tenant != "" {
			t.Fatalf("mode none: %q %v", tenant, e)
		}
	})
}

package pagekit

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http/httptest"
	"strings"
	"testing"
)

// The CSP allows exactly the inline style and script the page embeds, and
// nothing inline besides: a page whose escaping failed would still not run
// an injected script.
func TestCSPAllowsOnlyTheEmbeddedAssets(t *testing.T) {
	a := New(".x{color:red}")
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return base64.StdEncoding.EncodeToString(h[:]) }
	csp := a.CSP()
	for _, want := range []string{
		"script-src 'sha256-" + sum(string(a.JS)) + "'",
		"style-src 'sha256-" + sum(string(a.CSS)) + "'",
		"default-src 'none'", "frame-ancestors 'none'",
	} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || !strings.HasSuffix(string(a.CSS), ".x{color:red}") {
		t.Errorf("CSP %q / CSS", csp)
	}
	w := httptest.NewRecorder()
	a.SetHeaders(w)
	if w.Header().Get("Content-Security-Policy") != csp || w.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", w.Header())
	}
}

// The pages draw the ASCII arrows of hopgate.failover.path.
func TestArrows(t *testing.T) {
	if got := Arrows("a:open -> b:503 -> c:ok"); got != "a:open → b:503 → c:ok" {
		t.Fatal(got)
	}
}

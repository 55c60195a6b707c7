package pagekit

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
)

//go:embed base.css
var baseCSS string

//go:embed refresh.js
var refreshJS string

// Assets are the inline style and script of one page, and the CSP that
// allows exactly them.
type Assets struct {
	CSS template.CSS
	JS  template.JS
	csp string
}

// New returns the assets of a page whose own stylesheet is css (appended
// to the base stylesheet); every page gets the refresh script.
func New(css string) *Assets {
	all := baseCSS + css
	return &Assets{
		CSS: template.CSS(all),
		JS:  template.JS(refreshJS),
		csp: "default-src 'none'; style-src " + hash(all) + "; script-src " + hash(refreshJS) +
			"; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	}
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// CSP is the Content-Security-Policy value of the page.
func (a *Assets) CSP() string { return a.csp }

// SetHeaders sets the headers of an HTML page: type, CSP, no sniffing, no
// framing, no caching (the pages are live views), no referrer (a trace
// link must not leak the admin URL to the operator's trace UI).
func (a *Assets) SetHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", a.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

// Arrows draws a failover path's ASCII arrows ("a:503 -> b:ok") as the
// pages show them ("a:503 → b:ok"). The result is text: templates escape
// it.
func Arrows(path string) string { return strings.ReplaceAll(path, " -> ", " → ") }

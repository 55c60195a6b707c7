package gateway_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// TestClientKeysStoredOnlyAsHashes: a client key exists in memory only as
// its sha256, and the config has no field that could hold it in clear.
func TestClientKeysStoredOnlyAsHashes(t *testing.T) {
	kt := reflect.TypeOf(config.Key{})
	for i := 0; i < kt.NumField(); i++ {
		f := kt.Field(i)
		if f.Name != "ID" && f.Name != "Tenant" && f.Type != reflect.TypeOf([32]byte{}) { // names, and the hash
			t.Fatalf("config.Key.%s (%s) could hold a key in clear", f.Name, f.Type)
		}
	}
	const secret = "hg-live-client-secret"
	sum := sha256.Sum256([]byte(secret))
	yml := `auth:
  keys:
    - {id: team-a, sha256: ` + hex.EncodeToString(sum[:]) + `}
channels: [{id: a, base_url: "http://127.0.0.1:1/v1"}]
models: [{name: m, chain: [{channel: a, upstream_model: m, price: {input: 1, output: 1}}]}]
`
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Auth.Keys; len(got) != 1 || got[0].SHA256 != sum {
		t.Fatalf("keys %+v", got)
	}
	if strings.Contains(fmt.Sprintf("%#v", cfg.Auth), secret) {
		t.Fatal("plaintext key in the config")
	}
	// A plaintext key in the file is refused, never accepted "for convenience".
	plain := strings.Replace(yml, "sha256: "+hex.EncodeToString(sum[:]), "key: "+secret, 1)
	if _, err := config.Parse([]byte(plain), nil); err == nil {
		t.Fatal("a plaintext client key was accepted in the config")
	}
}

// TestKeyComparisonIsConstantTime checks the code itself: the client-key
// and admin-token checks compare with subtle.ConstantTimeCompare, never
// with ==, bytes.Equal or an early exit from the loop over keys (a timing
// oracle would let a client learn which key prefix is right).
func TestKeyComparisonIsConstantTime(t *testing.T) {
	for _, c := range []struct{ file, fn string }{
		{"../api/auth.go", "configKey"},
		{"../admin/admin.go", "guard"},
		{"../admin/tenants.go", "adminKey"},
		{"../admin/tenants.go", "adminToken"},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, c.file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var fn *ast.FuncDecl
		for _, d := range f.Decls {
			if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == c.fn {
				fn = d
			}
		}
		if fn == nil {
			t.Fatalf("%s: no func %s", c.file, c.fn)
		}
		constant := 0
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok {
						switch id.Name + "." + sel.Sel.Name {
						case "subtle.ConstantTimeCompare":
							constant++
						case "bytes.Equal", "bytes.Compare", "strings.Compare", "hmac.Equal":
							t.Errorf("%s: %s compares with %s.%s", fset.Position(n.Pos()), c.fn, id.Name, sel.Sel.Name)
						}
					}
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					for _, side := range []ast.Expr{n.X, n.Y} {
						if s := exprString(side); strings.Contains(strings.ToLower(s), "sha256") ||
							strings.Contains(s, "sum") || strings.Contains(s, "tok") || strings.Contains(s, "got") {
							if !strings.Contains(s, "ConstantTimeCompare") && s != `""` && s != "tok" {
								t.Errorf("%s: %s compares secrets with %s", fset.Position(n.Pos()), c.fn, n.Op)
							}
						}
					}
				}
			case *ast.RangeStmt, *ast.ForStmt:
				ast.Inspect(n, func(m ast.Node) bool {
					switch m := m.(type) {
					case *ast.ReturnStmt:
						t.Errorf("%s: %s returns from inside the key loop (early exit)", fset.Position(m.Pos()), c.fn)
					case *ast.BranchStmt:
						if m.Tok == token.BREAK {
							t.Errorf("%s: %s breaks out of the key loop (early exit)", fset.Position(m.Pos()), c.fn)
						}
					}
					return true
				})
			}
			return true
		})
		if constant == 0 {
			t.Errorf("%s: %s never calls subtle.ConstantTimeCompare", c.file, c.fn)
		}
	}
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.BasicLit:
		return e.Value
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.IndexExpr:
		return exprString(e.X) + "[" + exprString(e.Index) + "]"
	case *ast.SliceExpr:
		return exprString(e.X) + "[:]"
	case *ast.CallExpr:
		return exprString(e.Fun) + "()"
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.UnaryExpr:
		return e.Op.String() + exprString(e.X)
	}
	return fmt.Sprintf("%T", e)
}

// TestAdminListener: the admin listener is loopback unless configured
// otherwise, separate from the API listener, and with admin.token_env set
// every endpoint but the probes needs the bearer token.
func TestAdminListener(t *testing.T) {
	cfg, err := config.Parse([]byte(`auth: {mode: none}
channels: [{id: a, base_url: "http://127.0.0.1:1/v1"}]
models: [{name: m, chain: [{channel: a, upstream_model: m, price: {input: 1, output: 1}}]}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{cfg.AdminListen, cfg.Listen} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Fatalf("default listen address %q is not loopback", addr)
		}
	}

	const token = "adm-0123456789abcdef"
	g := gwtest.Start(t, gwtest.Options{Env: map[string]string{"ADMIN_TOKEN": token}}, relTwo("m", "admin: {token_env: ADMIN_TOKEN}\n"), "a", "b")
	get := func(base, path, auth string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	adm := g.Process.AdminAddr()
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200},
		{"/readyz", "", 200},
		{"/metrics", "", 401},
		{"/admin", "", 401},
		{"/admin/chains", "", 401},
		{"/admin/breakers", "", 401},
		{"/admin/failovers", "", 401},
		{"/metrics", "Bearer wrong", 401},
		{"/admin/failovers", "Basic " + token, 401},
		{"/metrics", "Bearer " + token, 200},
		{"/admin", "Bearer " + token, 200},
		{"/admin/chains", "Bearer " + token, 200},
		{"/admin/breakers", "Bearer " + token, 200},
		{"/admin/failovers", "Bearer " + token, 200},
	} {
		if got := get(adm, c.path, c.auth); got != c.want {
			t.Errorf("admin GET %s (%q): %d, want %d", c.path, c.auth, got, c.want)
		}
	}
	// The API listener serves none of it, token or not.
	for _, p := range []string{"/metrics", "/admin", "/admin/failovers", "/healthz"} {
		if got := get(g.Process.Addr(), p, "Bearer "+token); got != 404 && got != 405 {
			t.Errorf("API listener GET %s: %d, want 404", p, got)
		}
	}
}

// TestUpstreamHostComesOnlyFromConfig: nothing a client sends (Host,
// X-Forwarded-Host, Forwarded, a base_url body field, a query string) can
// point a hop at another host.
func TestUpstreamHostComesOnlyFromConfig(t *testing.T) {
	var decoyHits atomic.Int64
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { decoyHits.Add(1) }))
	defer decoy.Close()
	dh := strings.TrimPrefix(decoy.URL, "http://")
	g := gwtest.Start(t, gwtest.Options{}, relTwo("m", ""), "a", "b")
	body := `{"model":"m","base_url":"` + decoy.URL + `/v1","api_base":"` + decoy.URL + `","messages":[{"role":"user","content":"hi"}]}`
	r := g.PostCtx(t.Context(), body, map[string]string{
		"Host": dh, "X-Forwarded-Host": dh, "X-Forwarded-Proto": "http", "Forwarded": "host=" + dh,
		"X-Original-URL": decoy.URL, "X-Rewrite-URL": decoy.URL,
	})
	if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:ok" {
		t.Fatalf("status %d path %q %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
	}
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions?base_url="+decoy.URL, strings.NewReader(relChat))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("query string request: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if n := decoyHits.Load(); n != 0 {
		t.Fatalf("the client-named host received %d requests", n)
	}
	log := g.Ups["a"].Log()
	if len(log) != 2 {
		t.Fatalf("configured upstream saw %d requests, want 2", len(log))
	}
	for _, l := range log {
		for _, h := range []string{"X-Forwarded-Host", "Forwarded", "X-Original-Url"} {
			if v := l.Header.Get(h); v != "" {
				t.Fatalf("client header %s=%q forwarded upstream", h, v)
			}
		}
	}
}

// TestUpstreamTLSIsVerified: an upstream with a certificate nobody signed
// fails the hop as retryable, labelled tls, instead of being trusted.
func TestUpstreamTLSIsVerified(t *testing.T) {
	var served atomic.Int64
	bad := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	bad.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake errors are the point
	bad.StartTLS()
	defer bad.Close()
	g := gwtest.Start(t, gwtest.Options{URLs: map[string]string{"a": bad.URL + "/v1"}}, relTwo("m", ""), "b")
	for _, body := range []string{relChat, relChatStream} {
		r := g.Post(body)
		if r.Status != 200 || r.Header.Get("X-Hopgate-Path") != "a:tls -> b:ok" {
			t.Fatalf("status %d path %q %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
		}
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("a request went through an unverified TLS connection %d times", n)
	}
}

// hostileUpstream answers like a provider but adds headers that must never
// reach a client: cookies, hop-by-hop headers, internal ones.
func hostileUpstream(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Set-Cookie", "session=upstream; Path=/")
		h.Set("Connection", "X-Hop-Private")
		h.Set("X-Hop-Private", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("X-Internal-Secret", "y")
		h.Set("Server", "internal-llm/1.2")
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Strict-Transport-Security", "max-age=1")
		h.Set("Openai-Organization", "org-internal")
		if status != 200 {
			h.Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"message":"bad","type":"invalid_request_error","code":"content_filter","param":null}}`))
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "event-stream") {
			h.Set("Content-Type", "text/event-stream")
			chunk := `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":%s}]}` + "\n\n"
			fmt.Fprintf(w, chunk, "hello", "null")
			fmt.Fprintf(w, chunk, "", `"stop"`)
			_, _ = w.Write([]byte("data: [DONE]\n\n"))
			return
		}
		h.Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	})
}

// allowedResponseHeaders is every header a client may see on a proxied
// response; anything else from an upstream is dropped.
var allowedResponseHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Cache-Control": true,
	"X-Accel-Buffering": true, "X-Request-Id": true, "Traceparent": true,
	"X-Hopgate-Model": true, "X-Hopgate-Attempts": true, "X-Hopgate-Path": true,
	"X-Hopgate-Degraded": true, "Retry-After": true,
}

// TestUpstreamResponseHeadersAreFiltered: Set-Cookie, hop-by-hop headers
// and anything not on the allow-list stay between hopgate and the upstream,
// on success (stream and not) and on a passed-through final error.
func TestUpstreamResponseHeadersAreFiltered(t *testing.T) {
	for _, status := range []int{200, 400} {
		up := httptest.NewServer(hostileUpstream(status))
		g := gwtest.Start(t, gwtest.Options{URLs: map[string]string{"a": up.URL + "/v1"}}, relTwo("m", ""), "b")
		for _, body := range []string{relChat, relChatStream} {
			r := g.Post(body)
			if r.Status != status || r.Header.Get("X-Hopgate-Path") != "a:"+map[int]string{200: "ok", 400: "400"}[status] {
				t.Fatalf("status %d path %q: %s", r.Status, r.Header.Get("X-Hopgate-Path"), r.Body)
			}
			for k := range r.Header {
				if !allowedResponseHeaders[k] {
					t.Errorf("upstream %d, %s: header %s=%q reached the client", status, body[:30], k, r.Header.Get(k))
				}
			}
		}
		up.Close()
	}
}

var traceIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestClientRequestIDOnlyCorrelates: a client's X-Request-Id is never
// echoed as ours (it could collide or be chosen to confuse an audit); a
// client traceparent makes the request a child span of the client's trace,
// which is correlation, not authority.
func TestClientRequestIDOnlyCorrelates(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{}, relTwo("m", ""), "a", "b")
	r := g.PostCtx(t.Context(), relChat, map[string]string{"X-Request-Id": "evil"})
	id := r.Header.Get("X-Request-Id")
	if id == "evil" || !traceIDRe.MatchString(id) {
		t.Fatalf("X-Request-Id %q: want a server-generated trace id", id)
	}
	if tp := r.Header.Get("Traceparent"); !strings.Contains(tp, id) {
		t.Fatalf("traceparent %q does not carry %s", tp, id)
	}
	if got := g.Ups["a"].Log()[0].Header.Get("X-Request-Id"); got == "evil" {
		t.Fatal("client X-Request-Id forwarded upstream as if it were ours")
	}

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r = g.PostCtx(t.Context(), relChat, map[string]string{"Traceparent": "00-" + clientTrace + "-" + clientSpan + "-01", "X-Request-Id": "evil"})
	if got := r.Header.Get("X-Request-Id"); got != clientTrace {
		t.Fatalf("X-Request-Id %q, want the client's trace id %s (we join its trace)", got, clientTrace)
	}
	_ = g.Tel.TracerProvider.ForceFlush(t.Context())
	found := false
	for _, s := range g.Spans.GetSpans() {
		if s.SpanKind == trace.SpanKindServer && s.SpanContext.TraceID().String() == clientTrace {
			found = true
			if !s.Parent.IsRemote() || s.Parent.SpanID().String() != clientSpan {
				t.Fatalf("server span parent %v, want the client's span %s", s.Parent, clientSpan)
			}
			if s.SpanContext.SpanID().String() == clientSpan {
				t.Fatal("the server span reused the client's span id")
			}
		}
	}
	if !found {
		t.Fatal("no server span in the client's trace")
	}
	// A malformed traceparent is ignored: a fresh trace, no error.
	r = g.PostCtx(t.Context(), relChat, map[string]string{"Traceparent": "00-zz-evil-01"})
	if id := r.Header.Get("X-Request-Id"); !traceIDRe.MatchString(id) || r.Status != 200 {
		t.Fatalf("malformed traceparent: status %d id %q", r.Status, id)
	}
}

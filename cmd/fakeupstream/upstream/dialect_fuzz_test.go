package upstream

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"strings"
	"testing"
	"time"
)

// signJWT signs claims with the private key of a service-account file.
func signJWT(t testing.TB, saJSON []byte, claims map[string]any) string {
	t.Helper()
	var sa struct {
		PrivateKey   string `json:"private_key"`
		PrivateKeyID string `json:"private_key_id"`
	}
	if err := json.Unmarshal(saJSON, &sa); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode([]byte(sa.PrivateKey))
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	signed := enc(map[string]string{"alg": "RS256", "typ": "JWT", "kid": sa.PrivateKeyID}) + "." + enc(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, k.(*rsa.PrivateKey), crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// The assertion checks Google makes, one by one: signature, audience (the
// token_uri), a short lifetime, a known account.
func TestVerifyAssertion(t *testing.T) {
	s := New(Options{})
	sa, err := s.ServiceAccountJSON("http://fake.test")
	if err != nil {
		t.Fatal(err)
	}
	var acct struct {
		ClientEmail string `json:"client_email"`
	}
	_ = json.Unmarshal(sa, &acct)
	now := time.Now().Unix()
	claims := func(mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": acct.ClientEmail, "scope": cloudScope, "aud": "http://fake.test/token", "iat": now, "exp": now + 3600}
		if mod != nil {
			mod(c)
		}
		return c
	}
	tests := []struct {
		name string
		jwt  string
		want string // "" = accepted
	}{
		{"valid", signJWT(t, sa, claims(nil)), ""},
		{"other audience", signJWT(t, sa, claims(func(c map[string]any) { c["aud"] = "https://oauth2.googleapis.com/token" })), "Failed audience check"},
		{"too long", signJWT(t, sa, claims(func(c map[string]any) { c["exp"] = now + 7200 })), "short-lived"},
		{"unknown account", signJWT(t, sa, claims(func(c map[string]any) { c["iss"] = "x@y.iam.gserviceaccount.com" })), "account not found"},
		{"tampered", strings.Replace(signJWT(t, sa, claims(nil)), ".", ".e30", 1), "Invalid JWT"},
		{"not a jwt", "abc", "Invalid JWT Signature."},
	}
	for _, tt := range tests {
		_, err := s.verifyAssertion(tt.jwt)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// Assertions are untrusted bytes: no input may panic the verifier, and
// nothing but a signature by a known key passes.
func FuzzVerifyAssertion(f *testing.F) {
	s := New(Options{})
	sa, err := s.ServiceAccountJSON("http://fake.test")
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now().Unix()
	var acct struct {
		ClientEmail string `json:"client_email"`
	}
	_ = json.Unmarshal(sa, &acct)
	valid := signJWT(f, sa, map[string]any{"iss": acct.ClientEmail, "scope": "s", "aud": "http://fake.test/token", "iat": now, "exp": now + 60})
	for _, seed := range []string{valid, "a.b.c", "..", "eyJhbGciOiJub25lIn0.e30.", valid[:len(valid)-2]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, jwt string) {
		claims, err := s.verifyAssertion(jwt)
		if err == nil && (jwt != valid || claims.Iss != acct.ClientEmail) {
			t.Fatalf("accepted %q", jwt)
		}
	})
}

// SigV4 Authorization headers are untrusted: the parser never panics and
// accepts only complete headers.
func FuzzParseSigV4(f *testing.F) {
	for _, seed := range []string{
		"AWS4-HMAC-SHA256 Credential=AKIA/20260102/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=abcd",
		"AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request,SignedHeaders=,Signature=x",
		"AWS4-HMAC-SHA256 ", "Bearer x", "AWS4-HMAC-SHA256 Credential=,,,",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		s, err := parseSigV4(h)
		if err == nil && (s.AccessKey == "" && s.Date == "" && s.Region == "" && s.Service == "" || s.Signature == "" || len(s.SignedHeaders) == 0) {
			t.Fatalf("accepted an incomplete header %q: %+v", h, s)
		}
	})
}

// Messages bodies are untrusted: decoding and every dialect's judgement of
// them never panic, whatever the bytes.
func FuzzMessagesRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"n","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"n"},"thinking":{"type":"enabled","budget_tokens":1024}}`,
		`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"tool_result","content":[{"type":"tool_result","content":[{"type":"tool_result","content":"deep"}]}]}]}]}]}`,
		`{"messages":[{"role":"assistant","content":"a "}]}`, `[]`, `{"messages":7}`, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := parseMessagesRequest(body)
		if err != nil {
			return
		}
		for _, d := range []Dialect{DialectAnthropic, DialectBedrock, DialectVertex} {
			_ = m.check(d, "fake")
		}
		p := parsedFromMessages(m)
		_ = p.promptTokens()
		_ = m.cachedTokens()
		_ = m.toolChoiceName()
		_ = m.Blocks("text")
	})
}

// Paths are untrusted: routing never panics, and a found route always has
// an endpoint that can serve it.
func FuzzRoute(f *testing.F) {
	for _, seed := range []string{
		"/v1/chat/completions", "/openai/deployments/d%7C503/chat/completions", "/openai/v1/responses", "/v1/messages",
		"/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/invoke", "/model//invoke", "/token",
		"/v1/projects/p/locations/l/publishers/anthropic/models/m:streamRawPredict", "/v1/projects/p/locations/l/publishers/anthropic/models/:rawPredict",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, err := http.NewRequest(http.MethodPost, "http://fake.test"+path, nil)
		if err != nil {
			return
		}
		tgt := route(r)
		if tgt.found && tgt.ep.method == "" {
			t.Fatalf("%q: found without an endpoint", path)
		}
		if tgt.found && (tgt.dialect == DialectBedrock || tgt.dialect == DialectVertex) && tgt.model == "" {
			t.Fatalf("%q: %s route without a model", path, tgt.dialect)
		}
	})
}

package upstream

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TokenModel is the name under which requests to the token endpoint
// (POST /token) are logged, counted and faulted: SetFault(TokenModel,
// "503") makes every token refresh fail, Attempts(TokenModel) counts them.
const TokenModel = "oauth2-token"

// jwtBearerGrant is the grant of a service account's signed assertion
// (RFC 7523), what golang.org/x/oauth2/google sends for a key file.
const jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// serviceAccount is a key the token endpoint trusts.
type serviceAccount struct {
	key      *rsa.PublicKey
	keyID    string
	tokenURI string
}

// issuedToken is an access token the vertex dialect accepts until expiry
// (on the server clock).
type issuedToken struct {
	email  string
	expiry time.Time
}

// ServiceAccountJSON returns a Google service-account key file with a
// fresh RSA key whose token_uri is baseURL+"/token" (baseURL is where this
// Server is reachable, e.g. httptest.Server.URL). The token endpoint trusts
// the key from now on; the file is what GOOGLE_APPLICATION_CREDENTIALS or
// google.CredentialsFromJSON take.
func (s *Server) ServiceAccountJSON(baseURL string) ([]byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	var idBytes [20]byte
	if _, err := rand.Read(idBytes[:]); err != nil {
		return nil, err
	}
	keyID := hex.EncodeToString(idBytes[:])
	tokenURI := strings.TrimSuffix(baseURL, "/") + "/token"
	s.mu.Lock()
	n := len(s.accounts) + 1
	email := fmt.Sprintf("fake-sa-%d@%s.iam.gserviceaccount.com", n, s.opts.GoogleProject)
	s.accounts[email] = serviceAccount{key: &key.PublicKey, keyID: keyID, tokenURI: tokenURI}
	s.mu.Unlock()
	return json.MarshalIndent(map[string]string{
		"type":                        "service_account",
		"project_id":                  s.opts.GoogleProject,
		"private_key_id":              keyID,
		"private_key":                 string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":                email,
		"client_id":                   fmt.Sprintf("1000000000000000000%02d", n),
		"auth_uri":                    "https://accounts.google.com/o/oauth2/auth",
		"token_uri":                   tokenURI,
		"auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
		"client_x509_cert_url":        "https://www.googleapis.com/robot/v1/metadata/x509/" + url.PathEscape(email),
		"universe_domain":             "googleapis.com",
	}, "", "  ")
}

// WriteServiceAccountFile writes ServiceAccountJSON(baseURL) to a new file
// in dir (mode 0600) and returns its path.
func (s *Server) WriteServiceAccountFile(dir, baseURL string) (string, error) {
	b, err := s.ServiceAccountJSON(baseURL)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "service-account-*.json")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", err
	}
	return filepath.Clean(f.Name()), f.Close()
}

// jwtClaims are the claims of a service account's assertion.
type jwtClaims struct {
	Iss   string `json:"iss"`
	Scope string `json:"scope"`
	Aud   string `json:"aud"`
	Exp   int64  `json:"exp"`
	Iat   int64  `json:"iat"`
}

// errInvalidSignature is what Google says about an assertion it cannot
// verify.
var errInvalidSignature = errors.New("Invalid JWT Signature.")

// verifyAssertion checks an RS256 JWT signed by a known service account
// (untrusted bytes). Its times are checked for shape only (exp after iat,
// at most an hour apart): the client signs with its own wall clock, the
// fake's clock is usually fake.
func (s *Server) verifyAssertion(jwt string) (jwtClaims, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return jwtClaims{}, errInvalidSignature
	}
	var header struct{ Alg, Kid, Typ string }
	var claims jwtClaims
	if decodeSegment(parts[0], &header) != nil || decodeSegment(parts[1], &claims) != nil {
		return jwtClaims{}, errors.New("Invalid JWT: the assertion is not a JWT.")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || header.Alg != "RS256" {
		return jwtClaims{}, errInvalidSignature
	}
	s.mu.Lock()
	acct, ok := s.accounts[claims.Iss]
	s.mu.Unlock()
	if !ok {
		return jwtClaims{}, errors.New("Invalid grant: account not found")
	}
	if header.Kid != "" && header.Kid != acct.keyID {
		return jwtClaims{}, errInvalidSignature
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(acct.key, crypto.SHA256, sum[:], sig) != nil {
		return jwtClaims{}, errInvalidSignature
	}
	if claims.Aud != acct.tokenURI {
		return jwtClaims{}, fmt.Errorf("Invalid JWT: Failed audience check. The right audience is %s", acct.tokenURI)
	}
	if claims.Exp <= claims.Iat || claims.Exp-claims.Iat > 3600 {
		return jwtClaims{}, errors.New("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
	}
	return claims, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serveToken is Google's OAuth2 token endpoint for the JWT-bearer grant:
// a verified assertion gets an access token valid for
// Options.GoogleTokenLifetime on the server clock.
func serveToken(ex *exchange) {
	form, err := url.ParseQuery(string(ex.raw))
	if err != nil {
		writeOAuthError(ex.w, http.StatusBadRequest, "invalid_request", "The request body is not a form.")
		return
	}
	if g := form.Get("grant_type"); g != jwtBearerGrant {
		writeOAuthError(ex.w, http.StatusBadRequest, "unsupported_grant_type", "Invalid grant_type: "+g)
		return
	}
	claims, err := ex.s.verifyAssertion(form.Get("assertion"))
	if err != nil {
		writeOAuthError(ex.w, http.StatusBadRequest, "invalid_grant", err.Error())
		return
	}
	if claims.Scope == "" {
		writeOAuthError(ex.w, http.StatusBadRequest, "invalid_scope", "Invalid OAuth scope or ID token audience provided.")
		return
	}
	sum := sha256.Sum256([]byte(claims.Iss + "#" + itoa(ex.seq) + "#" + ex.s.opts.Name))
	token := "ya29.fake-" + hex.EncodeToString(sum[:16])
	life := ex.s.opts.GoogleTokenLifetime
	ex.s.mu.Lock()
	ex.s.tokens[token] = issuedToken{email: claims.Iss, expiry: ex.now.Add(life)}
	ex.s.mu.Unlock()
	ex.body("application/json; charset=utf-8", mustJSON(map[string]any{
		"access_token": token, "expires_in": int(life / time.Second), "token_type": "Bearer",
	}))
}

// writeOAuthError writes RFC 6749's error shape, as Google's token
// endpoint does.
func writeOAuthError(w http.ResponseWriter, status int, code, desc string) {
	writeBody(w, status, "application/json; charset=utf-8", mustJSON(map[string]string{"error": code, "error_description": desc}))
}

// oauthStatusCode is the OAuth error code of a status fault on the token
// endpoint.
func oauthStatusCode(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return "invalid_grant"
	case status == http.StatusUnauthorized:
		return "invalid_client"
	case status == http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case status >= 500:
		return "internal_failure"
	}
	return "invalid_request"
}

package telemetry

import (
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"golang.org/x/net/http/httpguts"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/otlpwire"
)

// writeCert makes a self-signed ECDSA certificate valid for 127.0.0.1 as
// server and client, and writes its PEM certificate and key to dir.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// exportOne sets telemetry up from env, ends one span and shuts down,
// which flushes it.
func exportOne(t *testing.T, env map[string]string) error {
	t.Helper()
	tel, err := Setup(context.Background(), Options{HealthyRatio: 1, ServiceVersion: "1.2.3", Getenv: envOf(env)})
	if err != nil {
		return err
	}
	_, span := tel.Tracer.Start(context.Background(), SpanServer)
	span.End()
	return tel.Shutdown(context.Background())
}

// Why: the OTLP exporter specification's settings reach the requests:
// headers (percent-decoded), gzip, the traces-specific variable over the
// generic one, and hopgate's user agent.
func TestOTLPHTTPSettings(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Error(err)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
	}))
	defer srv.Close()
	err := exportOne(t, map[string]string{
		envEndpoint:          srv.URL,
		envHeaders:           "x-generic=ignored",
		envTracesHeaders:     "Authorization=Bearer%20k%3D1, x-tenant = a ,",
		envCompression:       "none",
		envTracesCompression: "GZIP",
		envTracesTimeout:     "2500",
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	h := got[0].Header
	for k, want := range map[string]string{
		"Authorization": "Bearer k=1", "X-Tenant": "a", "X-Generic": "",
		"Content-Encoding": "gzip", "User-Agent": "hopgate/1.2.3",
		"Content-Type": "application/x-protobuf",
	} {
		if h.Get(k) != want {
			t.Errorf("%s: %q, want %q", k, h.Get(k), want)
		}
	}
	if !strings.Contains(string(bodies[0]), SpanServer) {
		t.Error("the body does not carry the span")
	}
}

// Why: each setting takes its traces-specific variable over the generic
// one, on its own; a repeated header key keeps its last value.
func TestOTLPHTTPPrecedence(t *testing.T) {
	cfg, err := otlpHTTPConfig(envOf(map[string]string{
		envTimeout: "1000", envTracesTimeout: "2500",
		envHeaders: "a=generic", envCompression: "gzip", envTracesHeaders: "b=1,b=2,c=%20v%20",
		envTracesCompression: "  ", // blank: the generic variable speaks
	}), "http://collector:4318/v1/traces", "hopgate")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 2500*time.Millisecond || !cfg.Gzip || cfg.Header.Get("A") != "" || len(cfg.Header["B"]) != 1 || cfg.Header.Get("B") != "2" || cfg.Header.Get("C") != "v" {
		t.Fatalf("config %+v", cfg)
	}
}

// Why: where spans go when only part of the endpoint is said: the
// specification's default, and /v1/traces appended to the generic
// endpoint only.
func TestOTLPHTTPEndpoint(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{envTracesExporter: "otlp"}, "http://localhost:4318/v1/traces"},
		{map[string]string{envEndpoint: "https://collector:4318"}, "https://collector:4318/v1/traces"},
		{map[string]string{envEndpoint: "https://collector:4318/"}, "https://collector:4318/v1/traces"},
		{map[string]string{envEndpoint: "http://c:4318/base"}, "http://c:4318/base/v1/traces"},
		{map[string]string{envEndpoint: "http://ignored:4318", envTracesEndpoint: "http://c:4318/custom"}, "http://c:4318/custom"},
	} {
		exp, _, err := spanExporterFromEnv(context.Background(), envOf(tc.env), "hopgate", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := exp.(*otlpwire.Exporter).URL(); got != tc.want {
			t.Errorf("%v: exports to %q, want %q", tc.env, got, tc.want)
		}
		_ = exp.Shutdown(context.Background())
	}
}

// Why: a collector behind TLS with a private CA, and one that wants a
// client certificate (mTLS), are common in production; both must work
// from the standard variables, and a missing client certificate must fail.
func TestOTLPHTTPTLS(t *testing.T) {
	dir := t.TempDir()
	srvCertFile, srvKeyFile, _ := writeCert(t, dir, "collector")
	cliCertFile, cliKeyFile, cliCert := writeCert(t, dir, "gateway")
	pair, err := tls.LoadX509KeyPair(srvCertFile, srvKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(cliCert)
	var mu sync.Mutex
	var peers []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		peers = append(peers, r.TLS.PeerCertificates[0].Subject.CommonName)
		mu.Unlock()
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.StartTLS()
	defer srv.Close()

	env := map[string]string{
		envTracesEndpoint:    srv.URL + "/v1/traces",
		envTracesCertificate: srvCertFile,
		envClientCert:        cliCertFile,
		envClientKey:         cliKeyFile,
	}
	if err := exportOne(t, env); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(peers) != 1 || peers[0] != "gateway" {
		t.Fatalf("collector saw client certificates %q", peers)
	}
	mu.Unlock()

	// Without the client certificate the handshake fails, and the export
	// fails without retrying (Shutdown reports errors through the SDK's
	// handler, so the exporter is driven directly here). Over TLS 1.3 the
	// client may see its write reset before it reads the collector's alert,
	// which looks like a collector going away and is retried; TLS 1.2
	// verifies the client within the handshake, so the alert always comes.
	srv12 := httptest.NewUnstartedServer(srv.Config.Handler)
	srv12.TLS = srv.TLS.Clone()
	srv12.TLS.MaxVersion = tls.VersionTLS12
	srv12.Config.ErrorLog = srv.Config.ErrorLog
	srv12.StartTLS()
	defer srv12.Close()
	delete(env, envClientCert)
	delete(env, envClientKey)
	cfg, err := otlpHTTPConfig(envOf(env), srv12.URL+"/v1/traces", "hopgate")
	if err != nil {
		t.Fatal(err)
	}
	waits := 0
	cfg.Wait = func(ctx context.Context, d time.Duration) error { waits++; return context.Canceled }
	exp, err := otlpwire.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	err = exp.ExportSpans(context.Background(), oneSpan(t))
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || waits != 0 {
		t.Fatalf("export without a client certificate: %v after %d waits, want the collector's TLS alert, not retried", err, waits)
	}
}

// Why: settings that cannot be used are startup errors naming the
// variable, not traces silently lost.
func TestOTLPHTTPBadSettings(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := writeCert(t, dir, "x")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, val string
		extra          map[string]string
	}{
		{"header without =", envHeaders, "Authorization", nil},
		{"header with a bad name", envTracesHeaders, "bad name=v", nil},
		{"header with a bad escape", envHeaders, "k=%zz", nil},
		{"timeout not a number", envTimeout, "10s", nil},
		{"timeout zero", envTracesTimeout, "0", nil},
		{"unknown compression", envCompression, "zstd", nil},
		{"CA file missing", envCertificate, filepath.Join(dir, "nope.crt"), nil},
		{"CA file without PEM", envTracesCertificate, notPEM, nil},
		{"client certificate without key", envClientCert, certFile, nil},
		{"client key without certificate", envTracesClientKey, keyFile, nil},
		{"client pair mismatched", envClientCert, notPEM, map[string]string{envClientKey: keyFile}},
		{"endpoint without scheme", envEndpoint, "collector:4318", nil},
		{"certificates with an http endpoint", envCertificate, certFile, map[string]string{envEndpoint: "http://collector:4318"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{envTracesExporter: "otlp", tc.key: tc.val}
			for k, v := range tc.extra {
				env[k] = v
			}
			_, _, err := spanExporterFromEnv(context.Background(), envOf(env), "hopgate", nil)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_") && !strings.Contains(err.Error(), "otlp endpoint") {
				t.Fatalf("error %q names no variable", err)
			}
		})
	}
}

func oneSpan(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	return tracetest.SpanStubs{{Name: SpanServer}}.Snapshots()
}

// Why: whatever an operator writes in the headers variable, what reaches
// the request is valid HTTP, or the gateway refuses to start.
func FuzzParseOTLPHeaders(f *testing.F) {
	for _, s := range []string{"", "a=b", "Authorization=Bearer%20k%3D1, x-tenant = a ,", "k", "=v", "k=%zz",
		"k=a%0Db", "k=\x00", "bad name=v", "a=1,a=2", "k=v=w", ",,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseOTLPHeaders(s)
		if err != nil {
			return
		}
		for k, vs := range h {
			if !httpguts.ValidHeaderFieldName(k) || len(vs) != 1 || !httpguts.ValidHeaderFieldValue(vs[0]) {
				t.Fatalf("parseOTLPHeaders(%q) gave %q: %q", s, k, vs)
			}
		}
	})
}

// Why: the exporter's retry pauses run on Options.Clock, like the rest of
// telemetry: a collector's 503 is retried when the clock says so.
func TestOTLPHTTPRetriesOnTheClock(t *testing.T) {
	var mu sync.Mutex
	answers := []int{http.StatusServiceUnavailable, http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		st := answers[0]
		answers = answers[1:]
		mu.Unlock()
		w.WriteHeader(st)
	}))
	defer srv.Close()
	clock := clockwork.NewFakeClock()
	tel, err := Setup(context.Background(), Options{HealthyRatio: 1, Clock: clock, Getenv: envOf(map[string]string{envEndpoint: srv.URL})})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	_, span := tel.Tracer.Start(context.Background(), SpanServer)
	span.End()
	flushed := make(chan error, 1)
	go func() { flushed <- tel.TracerProvider.ForceFlush(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // the pause after the 503
		t.Fatalf("no retry pause on the injected clock: %v", err)
	}
	clock.Advance(time.Minute)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(answers) != 0 {
		t.Fatalf("%d answers left: the retry did not happen", len(answers))
	}
}

// Why: HOPGATE_OTLP_ENCODER=sdk is the escape hatch to the SDK's own
// OTLP/HTTP exporter should hopgate's encoder ever disagree with it: the
// same span arrives, decodable as protobuf, with hopgate's user agent; an
// unknown value is a start-up error.
func TestOTLPEncoderSwitch(t *testing.T) {
	var mu sync.Mutex
	var agents []string
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		agents, bodies = append(agents, r.Header.Get("User-Agent")), append(bodies, b)
		mu.Unlock()
	}))
	defer srv.Close()
	for _, enc := range []string{"", "hopgate", "SDK"} {
		_, kind, err := spanExporterFromEnv(context.Background(), envOf(map[string]string{envEndpoint: srv.URL, envOTLPEncoder: enc}), "hopgate", nil)
		want := exporterHTTP
		if enc == "SDK" {
			want = exporterHTTPSDK
		}
		if err != nil || kind != want {
			t.Fatalf("%s=%q: kind %q, %v; want %q", envOTLPEncoder, enc, kind, err, want)
		}
		if err := exportOne(t, map[string]string{envEndpoint: srv.URL, envOTLPEncoder: enc}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 {
		t.Fatalf("%d exports, want 3", len(bodies))
	}
	for i, b := range bodies {
		if !strings.Contains(string(b), SpanServer) || !strings.HasPrefix(agents[i], "hopgate/1.2.3") {
			t.Errorf("export %d: user agent %q, span missing: %v", i, agents[i], !strings.Contains(string(b), SpanServer))
		}
	}
	if _, _, err := spanExporterFromEnv(context.Background(), envOf(map[string]string{envEndpoint: srv.URL, envOTLPEncoder: "fast"}), "hopgate", nil); err == nil || !strings.Contains(err.Error(), envOTLPEncoder) {
		t.Fatalf("an unknown encoder must be refused by name: %v", err)
	}
}

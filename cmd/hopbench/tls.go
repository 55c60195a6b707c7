package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Real providers are HTTPS, HTTP/2 where they offer it: the TLS rows of the
// bench pay the handshakes, the record layer and (over h2) one multiplexed
// connection as users do. The certificate is made at run time; the gateway
// and the bare proxy are told to trust its CA the way a deployment trusts a
// private CA, through SSL_CERT_FILE (read by crypto/x509's system pool on
// Linux, so dispatch.NewTransport is used unchanged).

// benchPKI is a CA and a leaf certificate for 127.0.0.1, as PEM files.
type benchPKI struct {
	dir      string
	caFile   string // the CA certificate: what SSL_CERT_FILE points at
	certFile string // the leaf, served by the TLS upstreams
	keyFile  string
}

// Environment of the TLS upstreams and their clients.
const (
	envTLSCert = "HOPBENCH_TLS_CERT" // the upstream role's certificate (PEM file)
	envTLSKey  = "HOPBENCH_TLS_KEY"  // and its key
	// envUpstreamH1 and envUpstreamH2 are host:port of the TLS upstreams:
	// one offers HTTP/1.1 only, the other HTTP/2 and HTTP/1.1 (ALPN).
	envUpstreamH1 = "HOPBENCH_UPSTREAM_H1"
	envUpstreamH2 = "HOPBENCH_UPSTREAM_H2"
	envCertFile   = "SSL_CERT_FILE"
)

// newBenchPKI writes a fresh ECDSA P-256 CA and a leaf it signed (the key
// type most HTTPS APIs serve) into dir.
func newBenchPKI(dir string) (*benchPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hopbench CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	p := &benchPKI{dir: dir, caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem")}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{p.caFile, "CERTIFICATE", caDER}, {p.certFile, "CERTIFICATE", leafDER}, {p.keyFile, "PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// upstreamEnv is what the upstream role needs to serve TLS.
func (p *benchPKI) upstreamEnv() []string {
	return []string{envTLSCert + "=" + p.certFile, envTLSKey + "=" + p.keyFile}
}

// trustEnv makes a child's crypto/x509 system pool trust the CA.
func (p *benchPKI) trustEnv() string { return envCertFile + "=" + p.caFile }

// serveTLSLoopback serves h over TLS on an ephemeral loopback port,
// offering HTTP/2 (and HTTP/1.1) in ALPN when h2, HTTP/1.1 only otherwise.
// onConn is called for every accepted connection (each pays a handshake).
func serveTLSLoopback(h http.Handler, cert tls.Certificate, h2 bool, onConn func()) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(h2)
	s := &http.Server{
		Handler: h, Addr: ln.Addr().String(), ReadHeaderTimeout: 10 * time.Second,
		Protocols: &protos,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				onConn()
			}
		},
		ErrorLog: discardLog,
	}
	go func() { _ = s.ServeTLS(ln, "", "") }()
	return s, ln.Addr().String(), nil
}

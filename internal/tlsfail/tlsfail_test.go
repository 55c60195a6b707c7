package tlsfail

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
)

// Why: the shapes crypto/tls and net/http give a failed handshake are TLS
// failures however deeply wrapped; the failures of a plain connection are
// not. (dispatch's TestNetLabel and telemetry's TestOTLPHTTPTLS produce
// the same errors from real handshakes.)
func TestIs(t *testing.T) {
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: "https://x", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"certificate not verified", wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), true},
		{"not a TLS record", wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), true},
		{"HTTP answer to an HTTPS client", wrap(http.ErrSchemeMismatch), true},
		{"alert from the peer", wrap(&net.OpError{Op: "remote error", Err: errors.New("tls: protocol version not supported")}), true},
		{"refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), false},
		{"reset while reading", wrap(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), false},
		{"closed", wrap(io.ErrUnexpectedEOF), false},
		{"nil", nil, false},
	} {
		if got := Is(tc.err); got != tc.want {
			t.Errorf("%s: Is(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// Package tlsfail recognises a failed TLS handshake in the errors net/http
// returns, by the error's type and never its text (STYLE), for the
// gateway's hops (the failover path's "tls" label) and the trace exporter
// (a TLS failure is configuration: retrying it cannot help).
//
// It owns the recognition only; what a TLS failure means is the caller's.
package tlsfail

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
)

// Is reports whether err comes from a TLS handshake that failed: a
// certificate that did not verify, TLS spoken to a peer that does not speak
// it, or an alert from the peer (an unsupported version, a client
// certificate it required).
func Is(err error) bool {
	var (
		verify *tls.CertificateVerificationError
		record tls.RecordHeaderError
		op     *net.OpError
	)
	// crypto/tls reports the peer's alert as a net.OpError with this Op
	// around an unexported type; tls.AlertError is only QUIC's.
	// http.Client turns a record that reads "HTTP/" into ErrSchemeMismatch
	// (TLS spoken to a plain HTTP port); http.Transport leaves it a
	// RecordHeaderError.
	return errors.As(err, &verify) || errors.As(err, &record) || errors.Is(err, http.ErrSchemeMismatch) ||
		errors.As(err, &op) && op.Op == "remote error"
}

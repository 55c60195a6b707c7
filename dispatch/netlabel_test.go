package dispatch

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
)

// roundTripErr is the error the engine's transport returns for one POST.
func roundTripErr(t *testing.T, url string) error {
	t.Helper()
	tr := NewTransport()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("POST %s succeeded", url)
	}
	return err
}

// TestNetLabel: the failover path names transport failures by the error's
// type and errno (STYLE: never by its text), on errors a real transport
// returns where this machine can produce them.
func TestNetLabel(t *testing.T) {
	// A port nothing listens on: connection refused.
	closed := testkit.LoopbackAddr(t)
	// A plain TCP server answering a TLS client: not a TLS record.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	// A TLS server whose certificate the client does not trust.
	untrusted := httptest.NewUnstartedServer(http.NotFoundHandler())
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake failure is the point
	untrusted.StartTLS()
	defer untrusted.Close()
	// A TLS server that speaks only versions the client refuses: its
	// alert arrives as the handshake's error.
	oldTLS := httptest.NewUnstartedServer(http.NotFoundHandler())
	oldTLS.Config.ErrorLog = log.New(io.Discard, "", 0)
	oldTLS.TLS = &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	oldTLS.StartTLS()
	defer oldTLS.Close()
	// A server that closes the connection without answering.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()

	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", roundTripErr(t, "http://"+closed+"/v1"), "refused"},
		{"closed without an answer", roundTripErr(t, "http://"+ln.Addr().String()+"/v1"), "reset"},
		{"not TLS", roundTripErr(t, "https://"+plain.Listener.Addr().String()+"/v1"), "tls"},
		{"untrusted certificate", roundTripErr(t, untrusted.URL+"/v1"), "tls"},
		{"TLS alert from the server", roundTripErr(t, oldTLS.URL+"/v1"), "tls"},
		{"reset by peer", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, "reset"},
		{"no such host", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}}, "dns"},
		{"timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, "timeout"},
		{"anything else", errors.New("proxyconnect failed"), "connect_error"},
	} {
		if got := netLabel(tc.err); got != tc.want {
			t.Errorf("%s: netLabel(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

package otlpwire

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

var testRes = resource.NewSchemaless(attribute.String("service.name", "hopgate"))

// collector is an httptest OTLP/HTTP receiver that answers with the
// statuses it is given, one per request, then 200.
type collector struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	header   http.Header // sent with a non-200 answer
	reqs     []*http.Request
	spans    int
	bodyErrs []error
}

func newCollector(t *testing.T, statuses ...int) *collector {
	c := &collector{statuses: statuses}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reqs = append(c.reqs, r)
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				c.bodyErrs = append(c.bodyErrs, err)
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			c.bodyErrs = append(c.bodyErrs, err)
		}
		if len(c.statuses) > 0 {
			st := c.statuses[0]
			c.statuses = c.statuses[1:]
			for k, vs := range c.header {
				w.Header()[k] = vs
			}
			w.WriteHeader(st)
			_, _ = io.WriteString(w, "collector says no")
			return
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				c.spans += len(ss.Spans)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// recordWaits is a Config.Wait that pauses no time, keeps the pauses and
// moves the fake clock now by them.
type recordWaits struct {
	pauses []time.Duration
	now    time.Time
}

func (w *recordWaits) wait(ctx context.Context, d time.Duration) error {
	w.pauses = append(w.pauses, d)
	w.now = w.now.Add(d)
	return ctx.Err()
}

func newTestExporter(t *testing.T, cfg Config) (*Exporter, *recordWaits) {
	t.Helper()
	w := &recordWaits{now: time.Unix(1e9, 0)}
	if cfg.Wait == nil {
		cfg.Wait = w.wait
		cfg.Now = func() time.Time { return w.now }
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e, w
}

// Why: the exporter must speak OTLP/HTTP as a collector expects it: POST
// to the URL, protobuf content type, the configured headers, bodies that
// decode to every span, plain or gzip.
func TestExportRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		c := newCollector(t)
		e, _ := newTestExporter(t, Config{URL: c.srv.URL + "/v1/traces", Gzip: gz,
			Header: http.Header{"Authorization": {"Bearer k"}}, UserAgent: "hopgate/test"})
		spans := gatewaySpans(testRes)
		for range 3 { // reused buffers give whole requests every time
			if err := e.ExportSpans(context.Background(), spans); err != nil {
				t.Fatal(err)
			}
		}
		if len(c.bodyErrs) > 0 || c.spans != 3*len(spans) {
			t.Fatalf("gzip=%v: collector decoded %d spans, want %d; errors %v", gz, c.spans, 3*len(spans), c.bodyErrs)
		}
		r := c.reqs[0]
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" ||
			r.Header.Get("Content-Type") != "application/x-protobuf" ||
			r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("User-Agent") != "hopgate/test" ||
			(r.Header.Get("Content-Encoding") == "gzip") != gz {
			t.Fatalf("gzip=%v: request %s %s with headers %v", gz, r.Method, r.URL.Path, r.Header)
		}
	}
}

// Why: without a configured User-Agent the collector still sees who
// sends.
func TestExportDefaultUserAgent(t *testing.T) {
	c := newCollector(t)
	e, _ := newTestExporter(t, Config{URL: c.srv.URL})
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil {
		t.Fatal(err)
	}
	if ua := c.reqs[0].Header.Get("User-Agent"); ua != "hopgate" {
		t.Fatalf("User-Agent %q", ua)
	}
}

// Why: an empty batch is not worth a request.
func TestExportNothing(t *testing.T) {
	c := newCollector(t)
	e, _ := newTestExporter(t, Config{URL: c.srv.URL})
	if err := e.ExportSpans(context.Background(), nil); err != nil || c.attempts() != 0 {
		t.Fatalf("err %v, %d requests", err, c.attempts())
	}
}

// Why: the OTLP specification's retryable answers are retried with a
// growing, jittered pause, or the pause the collector asks for; anything
// else fails at once with the collector's words.
func TestExportRetries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		statuses   []int
		retryAfter string
		wantErr    bool
		attempts   int
		pauses     [][2]time.Duration // each pause within [lo, hi]
	}{
		{"503 twice then accepted", []int{503, 503}, "", false, 3,
			[][2]time.Duration{{2500 * time.Millisecond, 7500 * time.Millisecond}, {5 * time.Second, 15 * time.Second}}},
		{"429, 502 and 504 are retryable", []int{429, 502, 504}, "", false, 4, nil},
		{"a short Retry-After does not shorten the backoff", []int{429}, "2", false, 2,
			[][2]time.Duration{{2500 * time.Millisecond, 7500 * time.Millisecond}}},
		{"a long Retry-After is waited out", []int{503}, "20", false, 2,
			[][2]time.Duration{{20 * time.Second, 20 * time.Second}}},
		{"a Retry-After past the budget ends the retrying", []int{503}, "120", true, 1, nil},
		{"an absurd Retry-After does not overflow", []int{503}, "9999999999999", true, 1, nil},
		{"400 is final", []int{400}, "", true, 1, nil},
		{"500 is final", []int{500}, "", true, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCollector(t, tc.statuses...)
			if tc.retryAfter != "" {
				c.header = http.Header{"Retry-After": {tc.retryAfter}}
			}
			e, w := newTestExporter(t, Config{URL: c.srv.URL})
			err := e.ExportSpans(context.Background(), gatewaySpans(testRes))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "collector says no") {
				t.Fatalf("error %q does not carry the collector's answer", err)
			}
			if got := c.attempts(); got != tc.attempts {
				t.Fatalf("%d attempts, want %d", got, tc.attempts)
			}
			if len(w.pauses) != tc.attempts-1 {
				t.Fatalf("pauses %v for %d attempts", w.pauses, tc.attempts)
			}
			for i, p := range tc.pauses {
				if w.pauses[i] < p[0] || w.pauses[i] > p[1] {
					t.Fatalf("pause %d = %v, want within %v", i, w.pauses[i], p)
				}
			}
		})
	}
}

// Why: a collector that stays down must not hold the batch processor
// forever: no attempt starts after a minute of retrying.
func TestExportRetryBudget(t *testing.T) {
	c := newCollector(t, make([]int, 100)...)
	for i := range c.statuses {
		c.statuses[i] = http.StatusServiceUnavailable
	}
	e, w := newTestExporter(t, Config{URL: c.srv.URL})
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err == nil {
		t.Fatal("no error after the retry budget")
	}
	var total time.Duration
	for _, p := range w.pauses {
		total += p
	}
	if total > time.Minute || c.attempts() < 3 || c.attempts() > 10 {
		t.Fatalf("%d attempts over %v of pauses %v", c.attempts(), total, w.pauses)
	}
	for _, p := range w.pauses {
		if p < 2500*time.Millisecond || p > 45*time.Second { // 5 s to 30 s, ±50 %
			t.Fatalf("pause %v outside the backoff's range: %v", p, w.pauses)
		}
	}
}

// Why: a refused connection (collector restarting) is retried; a caller
// that gives up ends the retrying.
func TestExportConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var waits int
	e, _ := newTestExporter(t, Config{URL: "http://" + addr + "/v1/traces", Wait: func(ctx context.Context, d time.Duration) error {
		waits++
		if waits == 2 {
			cancel()
		}
		return ctx.Err()
	}})
	err = e.ExportSpans(ctx, gatewaySpans(testRes))
	if err == nil || !errors.Is(err, context.Canceled) || waits != 2 {
		t.Fatalf("err = %v after %d waits", err, waits)
	}
}

// Why: a collector that accepts a request but rejects some of its spans
// says so in the answer; that must not pass for success. An answer that
// cannot be read is an error too; one that is not protobuf is not read.
func TestExportPartialSuccess(t *testing.T) {
	answer := func(n int64, msg string) []byte {
		b, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{
			PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: n, ErrorMessage: msg}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name        string
		contentType string
		body        []byte
		wantErr     string // "" for success
	}{
		{"spans rejected, with a reason", "application/x-protobuf", answer(2, "too old"), "rejected 2 spans: too old"},
		{"spans rejected, no reason", "application/x-protobuf", answer(3, ""), "rejected 3 spans"},
		{"a warning, nothing rejected", "application/x-protobuf", answer(0, "slow down"), "rejected 0 spans: slow down"},
		{"full success", "application/x-protobuf", answer(0, ""), ""},
		{"empty answer", "application/x-protobuf", nil, ""},
		{"unreadable protobuf", "application/x-protobuf", []byte{0xff, 0xff}, "unreadable answer"},
		{"a JSON answer is not read", "application/json", []byte(`{"partialSuccess":{"rejectedSpans":"2"}}`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = w.Write(tc.body)
			}))
			defer srv.Close()
			e, _ := newTestExporter(t, Config{URL: srv.URL})
			err := e.ExportSpans(context.Background(), gatewaySpans(testRes))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Why: any 2xx is the collector's acceptance.
func TestExportAccepts2xx(t *testing.T) {
	c := newCollector(t, http.StatusAccepted, http.StatusNoContent)
	e, w := newTestExporter(t, Config{URL: c.srv.URL})
	for range 2 {
		if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil {
			t.Fatal(err)
		}
	}
	if c.attempts() != 2 || len(w.pauses) != 0 {
		t.Fatalf("%d attempts, pauses %v", c.attempts(), w.pauses)
	}
}

// Why: Shutdown must not wait out a stuck collector, and nothing is sent
// after it.
func TestExportShutdown(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	e, _ := newTestExporter(t, Config{URL: srv.URL, Timeout: time.Hour})
	done := make(chan error, 1)
	go func() { done <- e.ExportSpans(context.Background(), gatewaySpans(testRes)) }()
	<-arrived
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the export in flight during Shutdown succeeded")
	}
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); !errors.Is(err, ErrShutdown) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

// keepBodies is a RoundTripper that answers without reading the request
// body, as a collector answering early does, and keeps every body the
// transport was handed (the first and those from GetBody).
type keepBodies struct{ bodies []io.ReadCloser }

func (k *keepBodies) RoundTrip(r *http.Request) (*http.Response, error) {
	k.bodies = append(k.bodies, r.Body)
	again, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	k.bodies = append(k.bodies, again)
	return &http.Response{StatusCode: http.StatusRequestEntityTooLarge, Status: "413 Request Entity Too Large",
		Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// Why: a transport may still read a request body after RoundTrip has
// returned (net/http documents it), and the next export encodes into the
// same buffer. Every body handed out must refuse reads once the export
// has returned.
func TestExportBodiesEndWithTheExport(t *testing.T) {
	k := &keepBodies{}
	e, _ := newTestExporter(t, Config{URL: "http://collector.invalid/v1/traces", Client: &http.Client{Transport: k}})
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err == nil {
		t.Fatal("413 passed for success")
	}
	if len(k.bodies) != 2 {
		t.Fatalf("%d bodies", len(k.bodies))
	}
	for i, b := range k.bodies {
		if n, err := b.Read(make([]byte, 16)); n != 0 || err == nil {
			t.Errorf("body %d still reads after the export returned: %d bytes, %v", i, n, err)
		}
	}
}

// Why: after Shutdown the exporter holds no connection to the collector
// (and so no transport goroutine), while the collector is still up.
func TestShutdownClosesConnections(t *testing.T) {
	c := newCollector(t)
	before := goleak.IgnoreCurrent()
	e, err := New(Config{URL: c.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The collector's own connection goroutines are not the exporter's.
	if err := goleak.Find(before, goleak.IgnoreAnyFunction("net/http.(*conn).serve")); err != nil {
		t.Fatal(err)
	}
}

// Why: a certificate that does not verify will not verify on the next
// attempt either: fail the export at once instead of holding the batch
// processor for a minute.
func TestExportCertificateErrorIsFinal(t *testing.T) {
	untrusted := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
	untrusted.StartTLS()
	defer untrusted.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer plain.Close()
	for _, tc := range []struct {
		name, url string
		want      func(error) bool
	}{
		{"untrusted certificate", untrusted.URL, func(err error) bool {
			var verify *tls.CertificateVerificationError
			return errors.As(err, &verify)
		}},
		{"https to a plain HTTP port", "https://" + plain.Listener.Addr().String(), func(err error) bool {
			return errors.Is(err, http.ErrSchemeMismatch) // http.Client's word for a record reading "HTTP/"
		}},
	} {
		// The system roots do not know httptest's CA.
		e, w := newTestExporter(t, Config{URL: tc.url})
		err := e.ExportSpans(context.Background(), gatewaySpans(testRes))
		if !tc.want(err) || len(w.pauses) != 0 {
			t.Errorf("%s: err = %v after %d pauses, want that TLS failure, not retried", tc.name, err, len(w.pauses))
		}
	}
}

// Why: operators may set their own User-Agent through the headers, as with
// the SDK's exporter; the body's content type and encoding are not theirs
// to change.
func TestExportHeaderPrecedence(t *testing.T) {
	c := newCollector(t)
	e, _ := newTestExporter(t, Config{URL: c.srv.URL, UserAgent: "hopgate/1", Header: http.Header{
		"User-Agent": {"mine/2"}, "Content-Type": {"application/json"}, "Content-Encoding": {"br"}}})
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil {
		t.Fatal(err)
	}
	h := c.reqs[0].Header
	if h.Get("User-Agent") != "mine/2" || h.Get("Content-Type") != "application/x-protobuf" || h.Get("Content-Encoding") != "" {
		t.Fatalf("headers %v", h)
	}
}

// Why: a long error answer is drained (within a bound) so the connection
// is reused; reading only what is quoted would drop it every time.
func TestExportDrainsLongAnswers(t *testing.T) {
	var conns atomic.Int64
	calls := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls++
		if calls%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write(bytes.Repeat([]byte("x"), 100<<10))
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	e, _ := newTestExporter(t, Config{URL: srv.URL})
	for range 3 {
		if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 6 || conns.Load() != 1 {
		t.Fatalf("%d requests over %d connections, want 6 over 1", calls, conns.Load())
	}
}

// Why: one huge batch must not leave its buffer behind for the life of
// the process.
func TestExportDropsHugeBuffers(t *testing.T) {
	c := newCollector(t)
	e, _ := newTestExporter(t, Config{URL: c.srv.URL, Gzip: true})
	// Random letters (invalid UTF-8 would grow on the wire): gzip saves
	// about 40 % of them, so both the plain (~10 MiB) and the gzip buffer
	// (~6 MiB) are over the bound.
	payload := make([]byte, maxKeptBuffer/2)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range payload {
		payload[i] = 'a' + byte(rng.IntN(26))
	}
	stub := tracetest.SpanStub{Name: "big", Attributes: []attribute.KeyValue{attribute.String("payload", string(payload))}}
	big := tracetest.SpanStubs{stub, stub, stub, stub, stub}.Snapshots() // > maxKeptBuffer encoded
	if err := e.ExportSpans(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	if cap(e.buf) > maxKeptBuffer || e.zbuf.Cap() > maxKeptBuffer {
		t.Fatalf("kept buffers of %d and %d bytes", cap(e.buf), e.zbuf.Cap())
	}
	if err := e.ExportSpans(context.Background(), gatewaySpans(testRes)); err != nil || cap(e.buf) == 0 || e.zbuf.Cap() == 0 {
		t.Fatalf("a normal batch after it: %v, buffers %d and %d", err, cap(e.buf), e.zbuf.Cap())
	}
}

// Why: a bad endpoint is a startup error, not spans silently lost later.
func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "collector:4318", "ftp://collector/v1/traces", "http://", "http://[::1"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

// Why: a late read of a closed body must fail.
func TestGuardedReader(t *testing.T) {
	r := &guardedReader{b: []byte("abc")}
	p := make([]byte, 2)
	if n, err := r.Read(p); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	r.close()
	if n, err := r.Read(p); n != 0 || err == nil {
		t.Fatal("read after close", n, err)
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, &guardedReader{b: []byte("whole")}); err != nil || b.String() != "whole" {
		t.Fatal(b.String(), err)
	}
}

// Why: the schedule is the OTLP exporters' — 5 s doubling to a 30 s cap,
// ±50 % — and a Retry-After only lengthens a pause.
func TestBackoff(t *testing.T) {
	for attempt := range 10 {
		base := min(5*time.Second<<min(attempt, 3), 30*time.Second)
		for range 200 {
			if d := backoff(attempt, 0); d < base/2 || d >= base*3/2 {
				t.Fatalf("attempt %d: %v outside [%v, %v)", attempt, d, base/2, base*3/2)
			}
			if d := backoff(attempt, time.Hour); d != time.Hour {
				t.Fatalf("attempt %d with Retry-After 1h: %v", attempt, d)
			}
		}
	}
}

package otlpwire

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hopgate/hopgate/internal/retryafter"
	"github.com/hopgate/hopgate/internal/tlsfail"
)

// Config is where and how an Exporter sends. The zero value of every
// field but URL has a documented default.
type Config struct {
	// URL receives the POSTs, e.g. http://collector:4318/v1/traces.
	URL string
	// Header is added to every request (e.g. an API key); nil means none.
	Header http.Header
	// Timeout bounds each attempt; 0 means 10 s, the OTLP default.
	Timeout time.Duration
	// Gzip compresses request bodies.
	Gzip bool
	// TLS is used for https URLs; nil means the system roots.
	TLS *tls.Config
	// UserAgent is sent as User-Agent; empty means "hopgate".
	UserAgent string
	// Client sends the requests; nil means a client of its own with
	// Config's TLS, the environment's proxy, and keep-alive.
	Client *http.Client
	// Wait pauses between attempts; nil waits on a timer. Tests inject it.
	Wait func(ctx context.Context, d time.Duration) error
	// Now tells the time for the retry budget; nil means time.Now.
	Now func() time.Time
}

// Retry schedule, with the limits of the SDK's OTLP exporters: a base
// pause from 5 s, doubling (the SDK grows it by 1.5) up to 30 s, each pause
// drawn from ±50 % of its base (2.5 s to 45 s); no new attempt after 1 min,
// and sooner if the caller's context ends (the batch processor's export
// timeout, 30 s by default).
const (
	retryInitial    = 5 * time.Second
	retryMax        = 30 * time.Second
	retryMaxElapsed = time.Minute
	defaultTimeout  = 10 * time.Second
	maxResponseBody = 64 << 10 // read at most this much of an answer
)

// Exporter is an sdktrace.SpanExporter sending OTLP/HTTP protobuf
// (application/x-protobuf) to one collector URL.
type Exporter struct {
	cfg    Config
	client *http.Client
	wait   func(context.Context, time.Duration) error
	stop   context.Context // canceled by Shutdown: in-flight exports end
	cancel context.CancelFunc

	mu   sync.Mutex // one export at a time: enc and the buffers are reused
	enc  Encoder
	buf  []byte
	zbuf bytes.Buffer
	zw   *gzip.Writer
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// URL is where the exporter sends.
func (e *Exporter) URL() string { return e.cfg.URL }

// ErrShutdown is returned by ExportSpans after Shutdown.
var ErrShutdown = errors.New("otlpwire: exporter is shut down")

// New returns an Exporter. It checks the URL but connects to nothing:
// a collector that is not up yet is not an error until spans are sent.
func New(cfg Config) (*Exporter, error) {
	req, err := http.NewRequest(http.MethodPost, cfg.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("otlp endpoint %q: %w", cfg.URL, err)
	}
	if s := req.URL.Scheme; s != "http" && s != "https" || req.URL.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL with a host", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "hopgate"
	}
	e := &Exporter{cfg: cfg, client: cfg.Client, wait: cfg.Wait}
	if e.client == nil {
		e.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       cfg.TLS,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          10,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}}
	}
	if e.wait == nil {
		e.wait = waitTimer
	}
	if e.cfg.Now == nil {
		e.cfg.Now = time.Now
	}
	e.stop, e.cancel = context.WithCancel(context.Background())
	return e, nil
}

// ExportSpans encodes spans and sends them, retrying what the OTLP
// specification calls retryable (429, 502, 503, 504 and failures to
// connect or to get an answer) until ctx ends or a minute has passed.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	if e.stop.Err() != nil {
		return ErrShutdown
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.stop, cancel)
	defer stop()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop.Err() != nil { // Shut down while this export waited its turn
		return ErrShutdown
	}
	defer e.shrink()
	e.buf = e.enc.Append(e.buf[:0], spans)
	body := e.buf
	if e.cfg.Gzip {
		var err error
		if body, err = e.gzip(body); err != nil {
			return err
		}
	}

	start := e.cfg.Now()
	for attempt := 0; ; attempt++ {
		retry, after, err := e.send(ctx, body)
		if err == nil || !retry {
			return err
		}
		pause := backoff(attempt, after)
		if e.cfg.Now().Sub(start)+pause > retryMaxElapsed {
			return err
		}
		if werr := e.wait(ctx, pause); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

// maxKeptBuffer bounds the buffers kept between exports: a default batch
// of gateway spans is ~200 KB; a rare huge one is not kept.
const maxKeptBuffer = 4 << 20

func (e *Exporter) shrink() {
	if cap(e.buf) > maxKeptBuffer {
		e.buf = nil
	}
	if e.zbuf.Cap() > maxKeptBuffer {
		e.zbuf = bytes.Buffer{}
	}
}

func (e *Exporter) gzip(b []byte) ([]byte, error) {
	e.zbuf.Reset()
	if e.zw == nil {
		e.zw = gzip.NewWriter(&e.zbuf)
	} else {
		e.zw.Reset(&e.zbuf)
	}
	if _, err := e.zw.Write(b); err != nil {
		return nil, err
	}
	if err := e.zw.Close(); err != nil {
		return nil, err
	}
	return e.zbuf.Bytes(), nil
}

// send makes one attempt. It reports whether a failure may be retried and
// how long the collector asked to wait (0: not said).
func (e *Exporter) send(parent context.Context, body []byte) (retry bool, after time.Duration, err error) {
	ctx, cancel := context.WithTimeout(parent, e.cfg.Timeout)
	defer cancel()
	// The transport may still read a body after the answer has come (a
	// collector can answer before it has read everything): every reader
	// handed out is closed before the buffer is reused, so such a read
	// fails instead of racing with the next encode.
	var readersMu sync.Mutex
	var readers []*guardedReader
	newBody := func() (io.ReadCloser, error) {
		r := &guardedReader{b: body}
		readersMu.Lock()
		readers = append(readers, r)
		readersMu.Unlock()
		return r, nil
	}
	defer func() {
		readersMu.Lock()
		defer readersMu.Unlock()
		for _, r := range readers {
			r.close()
		}
	}()
	rd, _ := newBody()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, rd)
	if err != nil {
		return false, 0, err
	}
	req.ContentLength = int64(len(body))
	req.GetBody = newBody // redirects and HTTP/2 retries replay the body
	// A configured User-Agent wins, as with the SDK's exporter; the
	// content type and encoding describe the body and do not yield.
	req.Header.Set("User-Agent", e.cfg.UserAgent)
	for k, vs := range e.cfg.Header {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.cfg.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	} else {
		req.Header.Del("Content-Encoding")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// No answer (refused, reset, the attempt timed out): the
		// collector may be restarting. Retry unless the caller gave up or
		// TLS failed (certificates, an alert from the collector, TLS to a
		// plain port): configuration, which repeating cannot mend.
		return parent.Err() == nil && !tlsfail.Is(err), 0, fmt.Errorf("otlp export: %w", err)
	}
	defer func() {
		// Drain a little more so the connection can be reused; an answer
		// longer than that costs a new connection, not a stall.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4*maxResponseBody))
		resp.Body.Close()
	}()
	answer, rerr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, 0, partialSuccess(answer, resp.Header.Get("Content-Type"))
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		// Anything past the retry budget ends the retrying; a day is plenty.
		return true, retryafter.Parse(resp.Header.Get("Retry-After"), e.cfg.Now(), 24*time.Hour), statusError(resp, answer, rerr)
	default:
		return false, 0, statusError(resp, answer, rerr)
	}
}

// partialSuccess reports spans the collector accepted the request but
// rejected. An answer that is not protobuf is not checked.
func partialSuccess(answer []byte, contentType string) error {
	if len(answer) == 0 || contentType != "application/x-protobuf" {
		return nil
	}
	var r coltracepb.ExportTraceServiceResponse
	if err := proto.Unmarshal(answer, &r); err != nil {
		return fmt.Errorf("otlp export: unreadable answer: %w", err)
	}
	ps := r.GetPartialSuccess()
	if ps.GetRejectedSpans() == 0 && ps.GetErrorMessage() == "" {
		return nil
	}
	return fmt.Errorf("otlp export: collector rejected %d spans: %s", ps.GetRejectedSpans(), ps.GetErrorMessage())
}

func statusError(resp *http.Response, answer []byte, readErr error) error {
	msg := answer
	if len(msg) > 256 {
		msg = msg[:256]
	}
	if readErr != nil {
		return fmt.Errorf("otlp export: %s (answer unread: %w)", resp.Status, readErr)
	}
	if len(bytes.TrimSpace(msg)) == 0 {
		return fmt.Errorf("otlp export: %s", resp.Status)
	}
	return fmt.Errorf("otlp export: %s: %q", resp.Status, msg)
}

// backoff is the pause before attempt+1: 5 s doubling per attempt up to
// 30 s, each drawn from ±50 % so that many gateways do not retry in step,
// and never shorter than the collector's Retry-After. A Retry-After past
// the one-minute budget ends the retrying instead (ExportSpans), as in the
// SDK's exporter.
func backoff(attempt int, after time.Duration) time.Duration {
	d := retryInitial << min(attempt, 3)
	d = min(d, retryMax)
	return max(after, d/2+rand.N(d))
}

func waitTimer(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown ends in-flight exports and refuses new ones.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.cancel()
	e.mu.Lock() // wait for an export to notice
	defer e.mu.Unlock()
	if t, ok := e.client.Transport.(*http.Transport); ok && e.cfg.Client == nil {
		t.CloseIdleConnections()
	}
	return ctx.Err()
}

// guardedReader reads b until closed; a read after close fails. Read and
// close hold the same lock, so once close has returned no read is copying
// from b, and none will.
type guardedReader struct {
	mu     sync.Mutex
	b      []byte
	off    int
	closed bool
}

func (r *guardedReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, errors.New("otlpwire: read after the export ended")
	}
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (r *guardedReader) Close() error { r.close(); return nil }

func (r *guardedReader) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

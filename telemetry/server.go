package telemetry

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ServerHandler wraps one route of the main listener: each request is a
// trace whose root is a SERVER span with the name and the HTTP attributes
// otelhttp's handler gives it (v0.72, semantic conventions v1.43; see "Why
// the SERVER span is not otelhttp's" in doc.go): "{METHOD} {route}", the
// route being the pattern the ServeMux matched. public, read per request,
// says whether the endpoint is public: an incoming traceparent is then a
// link, not the parent (nil: never public).
func (t *Telemetry) ServerHandler(next http.Handler, public func() bool) http.Handler {
	return &serverHandler{next: next, tracer: t.Tracer, prop: t.Propagator, public: public, rec: t.server}
}

type serverHandler struct {
	next   http.Handler
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	public func() bool
	names  cowCache[nameKey, string] // span names by method and route
	rec    *serverRecorder           // non-nil: compact SERVER spans (serverspan.go)
}

// spanName is otelhttp's: the method (HTTP if not a known one) and the
// route, cached (routes come from the mux, methods are bounded by the
// fallback).
func (h *serverHandler) spanName(r *http.Request) string {
	m := r.Method
	if _, ok := methods[m]; !ok {
		m = strings.ToUpper(m)
		if _, ok := methods[m]; !ok {
			m = "HTTP"
		}
	}
	route := ""
	if i := strings.IndexByte(r.Pattern, '/'); i >= 0 {
		route = r.Pattern[i:]
	}
	if route == "" {
		return m
	}
	return h.names.get(nameKey{m, route}, maxCachedNames, func() string { return m + " " + route })
}

// Start options without a link, made once: a variadic call with a fresh
// slice would allocate it per request.
var (
	serverKind     = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	serverKindRoot = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithNewRoot()}
)

// ServeHTTP stays a small frame: an open stream parks its handler under
// it for minutes, and the runtime halves a goroutine's stack only while
// less than a quarter of it is in use. The span's start and end run in
// calls of their own.
func (h *serverHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.rec != nil {
		h.serveCompact(w, r)
		return
	}
	h.serveSDK(w, r)
}

// serveSDK serves r under an SDK SERVER span.
func (h *serverHandler) serveSDK(w http.ResponseWriter, r *http.Request) {
	ctx := h.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	opts := serverKind
	if h.public != nil && h.public() {
		opts = serverKindRoot
		// The client's span context, if any, is linked, not followed.
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
			opts = []trace.SpanStartOption{serverKindRoot[0], serverKindRoot[1], trace.WithLinks(trace.Link{SpanContext: sc})}
		}
	}
	ctx, span := h.tracer.Start(ctx, h.spanName(r), opts...)
	defer span.End()
	recording := span.IsRecording()
	if recording {
		buf := attrBufs.Get().(*[14]attribute.KeyValue)
		span.SetAttributes(appendRequestAttrs(buf[:0], r)...)
		clear(buf[:])
		attrBufs.Put(buf)
	}
	sw := newServerWriter(w, r)
	defer sw.restore(r)
	h.next.ServeHTTP(sw, r.WithContext(ctx))
	if !recording {
		return
	}
	var a [3]attribute.KeyValue
	span.SetAttributes(appendResponseAttrs(a[:0], sw)...)
	span.SetStatus(statusOf(sw.status))
}

// appendResponseAttrs appends otelhttp's response attributes.
func appendResponseAttrs(a []attribute.KeyValue, sw *serverWriter) []attribute.KeyValue {
	if sw.body.n > 0 {
		a = append(a, semconv.HTTPRequestBodySize(int(sw.body.n)))
	}
	if sw.written > 0 {
		a = append(a, semconv.HTTPResponseBodySize(int(sw.written)))
	}
	return append(a, semconv.HTTPResponseStatusCode(sw.status))
}

// statusOf is otelhttp's span status for an answer's status code: Error
// for a 5xx or an invalid code, Unset otherwise.
func statusOf(code int) (codes.Code, string) {
	switch {
	case code < 100 || code >= 600:
		return codes.Error, "Invalid HTTP status code " + strconv.Itoa(code)
	case code >= 500:
		return codes.Error, ""
	}
	return codes.Unset, ""
}

// attrBufs holds the request attributes while they are handed to the
// span, which copies them.
var attrBufs = sync.Pool{New: func() any { return new([14]attribute.KeyValue) }}

// appendRequestAttrs appends otelhttp's request attributes, in its order.
func appendRequestAttrs(a []attribute.KeyValue, r *http.Request) []attribute.KeyValue {
	host, port := splitHostPort(r.Host)
	https := r.TLS != nil
	a = append(a, semconv.ServerAddress(host), method(r.Method))
	if https {
		a = append(a, semconv.URLScheme("https"))
	} else {
		a = append(a, semconv.URLScheme("http"))
	}
	if (https && port > 0 && port != 443) || (!https && port > 0 && port != 80) {
		a = append(a, semconv.ServerPort(port))
	}
	if _, known := methods[r.Method]; !known && r.Method != "" {
		a = append(a, semconv.HTTPRequestMethodOriginal(r.Method))
	}
	peer, peerPort := splitHostPort(r.RemoteAddr)
	if peer != "" {
		a = append(a, semconv.NetworkPeerAddress(peer))
		if peerPort > 0 {
			a = append(a, semconv.NetworkPeerPort(peerPort))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		a = append(a, semconv.UserAgentOriginal(ua))
	}
	client := r.Header.Get("X-Forwarded-For")
	if i := strings.IndexByte(client, ','); i >= 0 {
		client = client[:i]
	}
	if client == "" {
		client = peer
	}
	if client != "" {
		a = append(a, semconv.ClientAddress(client))
	}
	if r.URL != nil && r.URL.Path != "" {
		a = append(a, semconv.URLPath(r.URL.Path))
	}
	proto, version, _ := strings.Cut(r.Proto, "/")
	switch proto {
	case "HTTP":
		proto = "http"
	case "QUIC":
		proto = "quic"
	case "SPDY":
		proto = "spdy"
	default:
		proto = strings.ToLower(proto)
	}
	if proto != "" && proto != "http" {
		a = append(a, semconv.NetworkProtocolName(proto))
	}
	if version != "" {
		a = append(a, semconv.NetworkProtocolVersion(version))
	}
	if i := strings.IndexByte(r.Pattern, '/'); i >= 0 {
		a = append(a, semconv.HTTPRoute(r.Pattern[i:]))
	}
	return a
}

var methods = map[string]attribute.KeyValue{
	http.MethodConnect: semconv.HTTPRequestMethodConnect,
	http.MethodDelete:  semconv.HTTPRequestMethodDelete,
	http.MethodGet:     semconv.HTTPRequestMethodGet,
	http.MethodHead:    semconv.HTTPRequestMethodHead,
	http.MethodOptions: semconv.HTTPRequestMethodOptions,
	http.MethodPatch:   semconv.HTTPRequestMethodPatch,
	http.MethodPost:    semconv.HTTPRequestMethodPost,
	http.MethodPut:     semconv.HTTPRequestMethodPut,
	http.MethodTrace:   semconv.HTTPRequestMethodTrace,
}

// method is http.request.method: a known method, in any case, or _OTHER.
func method(m string) attribute.KeyValue {
	if kv, ok := methods[m]; ok {
		return kv
	}
	if m != "" {
		if kv, ok := methods[strings.ToUpper(m)]; ok {
			return kv
		}
	}
	return semconv.HTTPRequestMethodOther
}

// splitHostPort splits "host:port", "[v6]:port", "host" or "[v6]"; port is
// -1 when absent or not a valid port.
func splitHostPort(hostport string) (host string, port int) {
	port = -1
	if strings.HasPrefix(hostport, "[") {
		end := strings.LastIndexByte(hostport, ']')
		if end < 0 {
			return "", port
		}
		if strings.LastIndexByte(hostport[end:], ':') < 0 {
			return hostport[1:end], port
		}
	} else if !strings.Contains(hostport, ":") {
		return hostport, port
	}
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return host, port
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return host, port
	}
	return host, int(n)
}

// newServerWriter wraps w, and r's body if it has one, in one allocation.
// restore must give r its body back when the handler returns: net/http
// checks the body's type to decide whether the connection can be reused.
func newServerWriter(w http.ResponseWriter, r *http.Request) *serverWriter {
	sw := &serverWriter{ResponseWriter: w, status: http.StatusOK}
	if r.Body != nil && r.Body != http.NoBody {
		sw.body.ReadCloser = r.Body
		r.Body = &sw.body
	}
	return sw
}

// restore gives r back the body newServerWriter wrapped.
func (sw *serverWriter) restore(r *http.Request) {
	if sw.body.ReadCloser != nil {
		r.Body = sw.body.ReadCloser
	}
}

// serverWriter records the status and the bytes of the answer, and counts
// the request body's bytes (body). It wraps the connection's writer for one
// request; Unwrap gives http.ResponseController the writer underneath.
type serverWriter struct {
	http.ResponseWriter
	status  int
	wrote   bool
	written int64
	body    countingBody
}

func (w *serverWriter) WriteHeader(code int) {
	if !w.wrote {
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			w.ResponseWriter.WriteHeader(code)
			return
		}
		w.wrote, w.status = true, code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *serverWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Flush flushes the writer underneath; before any header it commits a 200,
// as net/http does.
func (w *serverWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *serverWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the request body's bytes as the handler reads them.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

package dispatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/retryafter"
	"github.com/hopgate/hopgate/internal/tlsfail"
	"github.com/hopgate/hopgate/telemetry"
)

// hopResult is what one hop tells the chain walk.
type hopResult struct {
	class         classify.Class
	done          bool // a response has been written to the client
	label         string
	status        int
	retryAfter    time.Duration
	headerTimeout bool
	deadline      bool
	contextLength bool
	final         *upstreamReply // final upstream error, not yet written
	// stepRecorded: the hop already put its step on the failover path (an
	// interrupted stream records its cut before the resume hops' steps).
	stepRecorded bool
}

// upstreamReply is a buffered upstream answer (final errors).
type upstreamReply struct {
	status int
	header http.Header
	body   []byte
}

// hopSpan is the CLIENT span of one upstream attempt (a hop or a resume
// continuation) and what its end records.
type hopSpan struct {
	span  trace.Span
	ctx   context.Context // the span's context: the upstream request's
	ch    *config.Channel
	model string // the public model whose chain is walked
	// upstreamModel is gen_ai.request.model of the GenAI client metrics.
	upstreamModel string
	start         time.Time
	// status is the upstream response's status once headers arrived (0:
	// none), recorded at the end unless the result carries its own.
	status int
}

// startHop counts one attempt on entry's channel and starts its CLIENT span
// under parent, with every attribute known before the request is sent in
// one slice: the SDK copies attributes into the span at each call, so one
// call at start and one at end cost two copies instead of one per call.
func (c *call) startHop(parent context.Context, m *config.Model, entry config.Entry, extra ...attribute.KeyValue) hopSpan {
	ch := entry.Channel
	index := c.attempts
	c.attempts++
	c.hopChannel = ch.ID
	op := operationName(c.req.Operation)
	u := c.e.urlAttrs(ch.BaseURL, c.req.Path)
	attrs := make([]attribute.KeyValue, 0, 6+len(extra)+len(u))
	attrs = append(attrs,
		attribute.String(telemetry.AttrGenAIOperation, op),
		attribute.String(telemetry.AttrGenAIProvider, ch.Provider),
		attribute.String(telemetry.AttrGenAIRequestModel, entry.UpstreamModel),
		attribute.String(telemetry.AttrChannel, ch.ID),
		attribute.String(telemetry.AttrChannelRegion, ch.Region),
		attribute.Int(telemetry.AttrHopIndex, index),
	)
	attrs = append(append(attrs, extra...), u...)
	hctx, span := c.e.tel.Tracer.Start(parent, op+" "+entry.UpstreamModel,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	c.hopStart = c.e.clock.Now()
	return hopSpan{span: span, ctx: hctx, ch: ch, model: m.Name, upstreamModel: entry.UpstreamModel, start: c.hopStart}
}

// end records the hop's outcome and response status on its span, ends it,
// counts the hop, and returns the outcome.
func (h *hopSpan) end(c *call, res hopResult) string {
	outcome := hopOutcome(res)
	status := res.status
	if status == 0 {
		status = h.status
	}
	if status > 0 {
		h.span.SetAttributes(attribute.String(telemetry.AttrHopOutcome, outcome), attribute.Int(attrHTTPStatus, status))
	} else {
		h.span.SetAttributes(attribute.String(telemetry.AttrHopOutcome, outcome))
	}
	if res.class == classify.Retryable {
		h.span.SetStatus(codes.Error, res.label)
	}
	h.span.End()
	d := c.e.clock.Since(h.start)
	c.e.tel.Metrics.Hop(h.ctx, h.ch.ID, h.ch.Region, h.model, c.req.Operation, outcome, d)
	if res.class == classify.Retryable || res.class == classify.Final {
		// GenAI client metrics count every operation against a provider,
		// failed ones with error.type (the serving hop records its own,
		// with usage, in recordUsage).
		errType := res.label
		if errType == "" {
			errType = "_OTHER"
		}
		c.e.tel.Metrics.GenAI(h.ctx, operationName(c.req.Operation), h.ch.Provider, h.upstreamModel, "", errType, d, 0, 0)
	}
	return outcome
}

// attrHTTPStatus is the semconv key of the upstream response status.
const attrHTTPStatus = "http.response.status_code"

// hop sends the request once to one channel and handles the answer up to
// the end of the response (streamed or buffered).
func (c *call) hop(m *config.Model, entry config.Entry, try int) (res hopResult) {
	hopCtx, cancelHop := context.WithCancelCause(c.ctx)
	defer cancelHop(nil)
	var hs hopSpan
	c.openHop(&hs, hopCtx, m, entry, try)
	defer c.closeHop(&hs, &res)
	hctx, span := hs.ctx, hs.span

	resp, fail, ok := c.send(hopCtx, &hs, cancelHop, m, entry, reqbody.Options{
		Model:        entry.UpstreamModel,
		IncludeUsage: c.req.Stream && c.req.Events == ChatEvents && !c.req.Fields.IncludeUsage,
	})
	if !ok {
		return fail
	}
	defer resp.Body.Close()

	class := classify.Status(resp.StatusCode)
	if class != classify.Success {
		return c.upstreamError(hopCtx, span, resp, class)
	}
	mt := mediaType(resp.Header.Get("Content-Type"))
	if c.req.Stream && mt == "text/event-stream" {
		return c.stream(hopCtx, hctx, span, cancelHop, m, entry, resp)
	}
	if c.req.Binary && binaryBody(mt) {
		return c.passthrough(hopCtx, span, cancelHop, m, entry, resp)
	}
	if c.req.Stream && mt == "application/json" {
		// A 200 JSON answer to a streaming request is how some providers
		// report errors; treat it as a buffered body.
		return c.buffered(hopCtx, span, cancelHop, m, entry, resp)
	}
	return c.buffered(hopCtx, span, cancelHop, m, entry, resp)
}

// openHop starts the hop's span (see hop: its own call, so its locals are
// not part of hop's frame, which stays on the stack of an open stream).
//
//go:noinline
func (c *call) openHop(hs *hopSpan, hopCtx context.Context, m *config.Model, entry config.Entry, try int) {
	method := attribute.String("http.request.method", http.MethodPost)
	if try > 0 {
		*hs = c.startHop(hopCtx, m, entry, method, attribute.Int(telemetry.AttrHopRetry, try))
	} else {
		*hs = c.startHop(hopCtx, m, entry, method)
	}
}

// closeHop ends the hop's span and puts the hop on the failover path.
//
//go:noinline
func (c *call) closeHop(hs *hopSpan, res *hopResult) {
	outcome := hs.end(c, *res)
	// A hop cut by the chain deadline stays in the path ("a:deadline"):
	// on-call must see which channel was in flight when time ran out.
	if res.class != classify.Canceled && !res.stepRecorded {
		step := res.label
		if step == "" {
			step = outcome
		}
		c.steps = append(c.steps, telemetry.Step{Channel: hs.ch.ID, Result: step})
	}
	if res.class == classify.Retryable && !res.done {
		c.statuses = append(c.statuses, statusOrNone(res.status))
		c.failedOver = true
	}
}

// send builds the upstream request (the client body with only the fields of
// opts rewritten, the channel credential, traceparent) and waits for response
// headers under the L4 header timeout. ok is false when no response came;
// fail then says why.
func (c *call) send(hopCtx context.Context, hs *hopSpan, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, opts reqbody.Options) (resp *http.Response, fail hopResult, ok bool) {
	ch := entry.Channel
	hctx, span := hs.ctx, hs.span
	pol := m.Policy
	// Build the upstream request: the client body with only model rewritten.
	// One buffer per hop, not pooled: the transport may still be reading
	// the request body after response headers arrived.
	body := c.req.Body
	var err error
	switch {
	case !c.req.Raw:
		body, err = reqbody.Rewrite(make([]byte, 0, len(c.req.Body)+64+prefixLen(opts)), c.req.Body, c.req.Fields, opts)
	case c.req.Form.ModelPresent:
		// Multipart: only the model part's value changes, never the file.
		body, err = reqbody.RewriteMultipartModel(make([]byte, 0, len(c.req.Body)+len(opts.Model)), c.req.Body, c.req.Form, opts.Model)
	}
	if err != nil {
		// The body parsed at the front door; a rewrite failure is ours.
		span.RecordError(err)
		return nil, hopResult{class: classify.Retryable, label: "rewrite_error"}, false
	}
	u := ch.BaseURL + c.req.Path
	req, err := http.NewRequestWithContext(hctx, http.MethodPost, u, nil)
	if err != nil {
		span.RecordError(err)
		return nil, hopResult{class: classify.Retryable, label: "request_error"}, false
	}
	if len(body) > 0 {
		held := &heldBody{b: body}
		req.Body, req.GetBody, req.ContentLength = newUpstreamBody(body), held.get, int64(len(body))
		defer held.release()
	}
	ct := c.req.ContentType
	if ct == "" {
		ct = "application/json"
	}
	accept := "application/json"
	switch {
	case c.req.Stream:
		accept = "text/event-stream"
	case c.req.Binary:
		accept = "*/*" // audio in the requested format, or a JSON error
	}
	// One backing array for the header values instead of one per Set; each
	// value is capped at length 1, so an append elsewhere copies it.
	vals := [...]string{ct, accept, c.e.userAgent, ""}
	hv := vals[:]
	req.Header["Content-Type"] = hv[0:1:1]
	req.Header["Accept"] = hv[1:2:2]
	req.Header["User-Agent"] = hv[2:3:3]
	if ch.APIKey != "" {
		hv[3] = "Bearer " + ch.APIKey
		req.Header["Authorization"] = hv[3:4:4]
	}
	c.e.tel.Propagator.Inject(hctx, propagation.HeaderCarrier(req.Header))

	// L4: the header timeout is a timer on the wait for response headers
	// only; it never bounds the body (a long stream is not a hung upstream).
	_, await := c.e.tel.Tracer.Start(hctx, telemetry.SpanAwaitHeaders, trace.WithSpanKind(trace.SpanKindInternal))
	ht := c.e.clock.AfterFunc(pol.HeaderTimeout, func() { cancelHop(errHeaderTimeout) })
	resp, err = c.roundTrip(req)
	if !ht.Stop() && err == nil {
		// The timer fired as the headers arrived: the hop context is
		// already cancelled, so the body is unreadable. It timed out.
		_ = resp.Body.Close()
		resp, err = nil, errHeaderTimeout
	}
	if err != nil {
		res := c.transportFailure(hopCtx, err)
		if res.headerTimeout {
			await.SetAttributes(attribute.String(telemetry.AttrErrorType, telemetry.ErrTypeHeaderTimeout))
			await.SetStatus(codes.Error, "header timeout after "+pol.HeaderTimeout.String())
			c.e.tel.Metrics.HeaderTimeout(hctx, ch.ID, m.Name)
		} else if res.class == classify.Retryable {
			await.SetStatus(codes.Error, err.Error())
		}
		await.End()
		span.SetAttributes(attribute.String(telemetry.AttrErrorType, res.label))
		return nil, res, false
	}
	await.End()
	hs.status = resp.StatusCode
	return resp, hopResult{}, true
}

// smallBody is the largest request body sent as an in-memory reader. The
// transport writes such a body together with the headers in one write
// when both fit its 4 KiB write buffer (typical headers are ~500 bytes; a
// large forwarded baggage header can push it to two writes, as before);
// any other body type makes it flush the headers first, which costs a
// syscall and a packet per hop. The request keeps that reader, so an open
// stream keeps at most this much of its prompt (the rewrite buffer's
// capacity); larger bodies take several writes anyway and go through
// upstreamBody, which lets go of them.
const smallBody = 3 << 10

// newUpstreamBody returns the hop's request body for b.
func newUpstreamBody(b []byte) io.ReadCloser {
	if len(b) <= smallBody {
		return io.NopCloser(bytes.NewReader(b))
	}
	return &upstreamBody{b: b}
}

// upstreamBody is a hop's request body larger than smallBody; it lets go of
// its bytes at EOF: the transport keeps the request until the response
// body is closed, and an open stream must not keep a copy of a large
// prompt for its whole life.
// Close does nothing: the transport may call it while another goroutine
// still reads.
type upstreamBody struct{ b []byte }

func (u *upstreamBody) Read(p []byte) (int, error) {
	if len(u.b) == 0 {
		u.b = nil
		return 0, io.EOF
	}
	n := copy(p, u.b)
	if u.b = u.b[n:]; len(u.b) == 0 {
		u.b = nil
	}
	return n, nil
}

func (u *upstreamBody) Close() error { return nil }

// heldBody backs the request's GetBody (the transport replays the body
// when a reused connection fails before the request was written). The
// transport only calls it inside RoundTrip, so once send has its answer
// the bytes are released.
type heldBody struct{ b []byte }

var errBodyReleased = errors.New("request body already released")

func (h *heldBody) get() (io.ReadCloser, error) {
	if h.b == nil {
		return nil, errBodyReleased
	}
	return newUpstreamBody(h.b), nil
}

func (h *heldBody) release() { h.b = nil }

// roundTrip sends req on the engine's transport; errors read as
// http.Client's do (`Post "URL": cause`), which traces and logs show.
func (c *call) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.e.transport.RoundTrip(req)
	switch {
	case err != nil:
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return nil, &url.Error{Op: "Post", URL: redactedURL(req.URL), Err: err}
	case resp == nil:
		return nil, &url.Error{Op: "Post", URL: redactedURL(req.URL), Err: errNilResponse}
	}
	return resp, nil
}

var errNilResponse = errors.New("http: RoundTripper returned a nil *Response with a nil error")

// redactedURL is u with its password, if any, replaced by "***" (as
// http.Client reports URLs in errors).
func redactedURL(u *url.URL) string {
	if _, has := u.User.Password(); has {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// transportFailure classifies an error before response headers.
func (c *call) transportFailure(hopCtx context.Context, err error) hopResult {
	switch cause := context.Cause(hopCtx); {
	case cause == errHeaderTimeout:
		return hopResult{class: classify.Retryable, label: telemetry.ErrTypeHeaderTimeout, headerTimeout: true}
	case cause == errChainDeadline:
		return hopResult{class: classify.Retryable, label: "deadline", deadline: true}
	}
	if classify.Error(c.clientCtx, err) == classify.Canceled {
		return hopResult{class: classify.Canceled, label: telemetry.ErrTypeCanceled}
	}
	return hopResult{class: classify.Retryable, label: netLabel(err)}
}

// netLabel names a transport error for the failover path, by the error's
// type and errno, never its text.
func netLabel(err error) string {
	var (
		ne  net.Error
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case errors.As(err, &dns):
		return "dns"
	case tlsfail.Is(err):
		return "tls"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return telemetry.ErrTypeConnect
}

// upstreamError handles a non-2xx upstream answer.
func (c *call) upstreamError(hopCtx context.Context, span trace.Span, resp *http.Response, class classify.Class) hopResult {
	body, err := readBounded(resp.Body, DefaultMaxErrorBody, resp.ContentLength)
	res := hopResult{class: class, status: resp.StatusCode, label: strconv.Itoa(resp.StatusCode)}
	if err != nil && class == classify.Final {
		// A final answer we could not read completely is not an answer.
		if cr := c.transportFailure(hopCtx, err); cr.class != classify.Retryable {
			return cr
		}
	}
	if classify.RetryAfterStatus(resp.StatusCode) {
		res.retryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), c.e.clock.Now(), maxRetryAfterHeader)
		if res.retryAfter > 0 {
			span.SetAttributes(attribute.Float64(telemetry.AttrRetryAfter, res.retryAfter.Seconds()))
		}
	}
	if class == classify.Retryable {
		span.SetAttributes(attribute.String(telemetry.AttrErrorType, res.label))
		return res
	}
	code := gate.ErrorCode(body)
	res.contextLength = code == "context_length_exceeded"
	h := http.Header{}
	if ct := headerContentType(resp.Header); ct != "" {
		h.Set("Content-Type", ct)
	}
	res.final = &upstreamReply{status: resp.StatusCode, header: h, body: body}
	span.SetAttributes(attribute.String(telemetry.AttrErrorType, res.label))
	if res.contextLength {
		m := c.currentModel()
		if m != nil && m.ContextFallback != "" {
			return res // the walk moves to the context fallback
		}
	}
	if !c.writeFinal(res) {
		return c.lostCommit(hopCtx)
	}
	res.done = true
	return res
}

// currentModel is the model whose chain is being walked.
func (c *call) currentModel() *config.Model {
	if c.served != nil {
		return c.served
	}
	return c.req.Model
}

// writeFinal passes a final upstream answer through unchanged; false when
// the chain deadline claimed the reply first (nothing was written).
func (c *call) writeFinal(res hopResult) bool {
	if !c.commit() {
		return false
	}
	h := c.w.Header()
	for k, v := range res.final.header {
		h[k] = v
	}
	c.setHeadersCommitted(h, res.label)
	h.Set("Content-Length", strconv.Itoa(len(res.final.body)))
	c.w.WriteHeader(res.final.status)
	_, _ = c.w.Write(res.final.body)
	c.outcome = OutcomeFinalError
	c.status = res.final.status
	return true
}

// readBounded reads at most limit bytes; more is an error. size is the
// body's declared length (Content-Length, -1 if unknown): a body that says
// its length is read into one buffer of that size, not grown from 512 bytes
// by copying (io.ReadAll), up to maxPresize.
func readBounded(r io.Reader, limit, size int64) ([]byte, error) {
	n := int64(512)
	if size >= 0 {
		// +1: room for the read that reports EOF without growing.
		n = min(size, limit, maxPresize) + 1
	}
	b := make([]byte, 0, n)
	for {
		if int64(len(b)) > limit {
			return b[:limit], errBodyTooLarge
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		end := int64(cap(b))
		if end > limit+1 {
			end = limit + 1
		}
		k, err := r.Read(b[len(b):end])
		b = b[:len(b)+k]
		if err == io.EOF {
			if int64(len(b)) > limit {
				return b[:limit], errBodyTooLarge
			}
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// maxPresize bounds the buffer allocated up front from a declared length:
// a lying Content-Length costs at most this much before bytes arrive.
const maxPresize = 4 << 20

var errBodyTooLarge = errors.New("upstream body exceeds the limit")

// maxRetryAfterHeader bounds what one upstream Retry-After can ask for
// (retryafter.Parse); the breaker caps its hold-out lower still
// (breaker.MaxRetryAfter).
const maxRetryAfterHeader = time.Hour

func statusOrNone(s int) int {
	if s == 0 {
		return -1
	}
	return s
}

func hopOutcome(res hopResult) string {
	switch {
	case res.headerTimeout:
		return "header_timeout"
	case res.class == classify.Success:
		return "ok"
	case res.class == classify.Final:
		return "final"
	case res.class == classify.Canceled:
		return "canceled"
	default:
		return "retryable"
	}
}

func operationName(op string) string {
	switch op {
	case "completions":
		return telemetry.OperationTextCompl
	case "embeddings":
		return telemetry.OperationEmbedding
	case "images", "audio_speech", "audio_transcriptions":
		return telemetry.OperationGenerate
	case "responses":
		return telemetry.OperationChat
	}
	return telemetry.OperationChat
}

// urlAttrs returns the server.address, server.port and url.full attributes
// of the upstream URL base+path (none if it does not parse: the request
// then fails before it is sent). They are cached: the URLs come from the
// config, and parsing one per hop allocates.
func (e *Engine) urlAttrs(base, path string) []attribute.KeyValue {
	k := urlKey{base, path}
	if v, ok := e.urls.Load(k); ok {
		return v.([]attribute.KeyValue)
	}
	var attrs []attribute.KeyValue
	if u, err := url.Parse(base + path); err == nil {
		port := u.Port()
		if port == "" {
			port = "443"
			if u.Scheme == "http" {
				port = "80"
			}
		}
		p, _ := strconv.Atoi(port)
		attrs = []attribute.KeyValue{
			attribute.String("server.address", u.Hostname()),
			attribute.Int("server.port", p),
			attribute.String("url.full", u.Scheme+"://"+u.Host+u.Path),
		}
	}
	// Bounded like the metric label cache: a config reload may bring new
	// base URLs, but not without limit.
	if e.nurls.Load() < maxCachedURLs {
		if _, loaded := e.urls.LoadOrStore(k, attrs); !loaded {
			e.nurls.Add(1)
		}
	}
	return attrs
}

// urlKey is an upstream URL as the config gives it.
type urlKey struct{ base, path string }

const maxCachedURLs = 1024

// mediaType is the lower-cased media type without parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// RequestID is the trace id of the request's span: X-Request-Id.
func RequestID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Traceparent renders the W3C traceparent of the request's server span.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + flags
}

func prefixLen(o reqbody.Options) int {
	if o.AssistantPrefix == nil {
		return 0
	}
	return len(*o.AssistantPrefix) + 64
}

// headerContentType is the upstream's Content-Type as hopgate passes it
// on: unchanged when it is printable ASCII (nearly always), else re-encoded
// with RFC 2231 parameters, or cut to its media type: header values are
// ASCII (RFC 9110 §5.5), and a fetch client decodes other bytes as Latin-1.
func headerContentType(h http.Header) string {
	ct := h.Get("Content-Type")
	if asciiHeaderValue(ct) {
		return ct
	}
	if mt, params, err := mime.ParseMediaType(ct); err == nil {
		if s := mime.FormatMediaType(mt, params); s != "" && asciiHeaderValue(s) {
			return s
		}
	}
	if mt := mediaType(ct); asciiHeaderValue(mt) {
		return mt
	}
	return ""
}

// asciiHeaderValue reports whether every byte of v is printable ASCII or a tab.
func asciiHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
			return false
		}
	}
	return true
}

package dispatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gate"
	"github.com/hopgate/hopgate/dispatch/reqbody"
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

// hop sends the request once to one channel and handles the answer up to
// the end of the response (streamed or buffered).
func (c *call) hop(m *config.Model, entry config.Entry, try int) (res hopResult) {
	ch := entry.Channel
	index := c.attempts
	c.attempts++
	c.hopChannel = ch.ID
	start := c.e.clock.Now()

	hopCtx, cancelHop := context.WithCancelCause(c.ctx)
	defer cancelHop(nil)

	op := operationName(c.req.Operation)
	hctx, span := c.e.tel.Tracer.Start(hopCtx, op+" "+entry.UpstreamModel,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(telemetry.AttrGenAIOperation, op),
			attribute.String(telemetry.AttrGenAIProvider, ch.Provider),
			attribute.String(telemetry.AttrGenAIRequestModel, entry.UpstreamModel),
			attribute.String(telemetry.AttrChannel, ch.ID),
			attribute.String(telemetry.AttrChannelRegion, ch.Region),
			attribute.Int(telemetry.AttrHopIndex, index),
			attribute.String("http.request.method", http.MethodPost),
		))
	if try > 0 {
		span.SetAttributes(attribute.Int(telemetry.AttrHopRetry, try))
	}
	defer func() {
		outcome := hopOutcome(res)
		span.SetAttributes(attribute.String(telemetry.AttrHopOutcome, outcome))
		if res.status > 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", res.status))
		}
		if res.class == classify.Retryable {
			span.SetStatus(codes.Error, res.label)
		}
		span.End()
		c.e.tel.Metrics.Hop(hctx, ch.ID, ch.Region, m.Name, c.req.Operation, outcome, c.e.clock.Since(start))
		// A hop cut by the chain deadline stays in the path ("a:deadline"):
		// on-call must see which channel was in flight when time ran out.
		if res.class != classify.Canceled && !res.stepRecorded {
			step := res.label
			if step == "" {
				step = outcome
			}
			c.steps = append(c.steps, telemetry.Step{Channel: ch.ID, Result: step})
		}
		if res.class == classify.Retryable && !res.done {
			c.statuses = append(c.statuses, statusOrNone(res.status))
			c.failedOver = true
		}
	}()

	resp, fail, ok := c.send(hopCtx, hctx, span, cancelHop, m, entry, reqbody.Options{
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

// send builds the upstream request (the client body with only the fields of
// opts rewritten, the channel credential, traceparent) and waits for response
// headers under the L4 header timeout. ok is false when no response came;
// fail then says why.
func (c *call) send(hopCtx, hctx context.Context, span trace.Span, cancelHop context.CancelCauseFunc,
	m *config.Model, entry config.Entry, opts reqbody.Options) (resp *http.Response, fail hopResult, ok bool) {
	ch := entry.Channel
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
	req, err := http.NewRequestWithContext(hctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		span.RecordError(err)
		return nil, hopResult{class: classify.Retryable, label: "request_error"}, false
	}
	setURLAttrs(span, req.URL)
	ct := c.req.ContentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	switch {
	case c.req.Stream:
		req.Header.Set("Accept", "text/event-stream")
	case c.req.Binary:
		req.Header.Set("Accept", "*/*") // audio in the requested format, or a JSON error
	default:
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", c.e.userAgent)
	if ch.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+ch.APIKey)
	}
	c.e.tel.Propagator.Inject(hctx, propagation.HeaderCarrier(req.Header))

	// L4: the header timeout is a timer on the wait for response headers
	// only; it never bounds the body (a long stream is not a hung upstream).
	_, await := c.e.tel.Tracer.Start(hctx, telemetry.SpanAwaitHeaders, trace.WithSpanKind(trace.SpanKindInternal))
	ht := c.e.clock.AfterFunc(pol.HeaderTimeout, func() { cancelHop(errHeaderTimeout) })
	resp, err = c.e.client.Do(req)
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
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	return resp, hopResult{}, true
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

// netLabel names a transport error for the failover path.
func netLabel(err error) string {
	var ne net.Error
	s := err.Error()
	switch {
	case strings.Contains(s, "connection refused"):
		return "refused"
	case strings.Contains(s, "connection reset"), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case strings.Contains(s, "no such host"):
		return "dns"
	case strings.Contains(s, "tls:"), strings.Contains(s, "x509:"):
		return "tls"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return telemetry.ErrTypeConnect
}

// upstreamError handles a non-2xx upstream answer.
func (c *call) upstreamError(hopCtx context.Context, span trace.Span, resp *http.Response, class classify.Class) hopResult {
	body, err := readBounded(resp.Body, DefaultMaxErrorBody)
	res := hopResult{class: class, status: resp.StatusCode, label: strconv.Itoa(resp.StatusCode)}
	if err != nil && class == classify.Final {
		// A final answer we could not read completely is not an answer.
		if cr := c.transportFailure(hopCtx, err); cr.class != classify.Retryable {
			return cr
		}
	}
	if classify.RetryAfterStatus(resp.StatusCode) {
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), c.e.clock.Now())
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
	if ct := resp.Header.Get("Content-Type"); ct != "" {
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

// readBounded reads at most limit bytes; more is an error.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, err
	}
	if int64(len(b)) > limit {
		return b[:limit], errBodyTooLarge
	}
	return b, nil
}

var errBodyTooLarge = errors.New("upstream body exceeds the limit")

// parseRetryAfter reads delay-seconds or an HTTP date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > 3600 {
			n = 3600
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

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

func setURLAttrs(span trace.Span, u *url.URL) {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	p, _ := strconv.Atoi(port)
	span.SetAttributes(
		attribute.String("server.address", u.Hostname()),
		attribute.Int("server.port", p),
		attribute.String("url.full", u.Scheme+"://"+u.Host+u.Path),
	)
}

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

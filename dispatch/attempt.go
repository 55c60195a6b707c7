package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/earlywarning"
	"github.com/hopgate/hopgate/dispatch/overload"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/retryafter"
	"github.com/hopgate/hopgate/internal/tlsfail"
	"github.com/hopgate/hopgate/telemetry"
)

// attempt is one hop: one request to one channel, from sending it to the
// end of its answer or its failure. It owns the hop's context and cancel,
// its timers (L4 here, the gate's and the idle timer in stream.go), its
// span, the chain entry, the upstream response and what the upstream told
// about usage. Sending, the header wait, the gate, the pass after commit,
// buffering, passthrough and a mid-stream continuation are its methods;
// the walk (call) only sees the typed error it returns.
type attempt struct {
	c     *call
	m     *config.Model // the model whose chain is walked
	entry config.Entry
	ch    *config.Channel
	try   int    // same-channel retry number
	mode  string // continuation mode (resume.go); "" for a hop of the walk

	ctx    context.Context // the hop's: cancelled by its timers, carries its span
	cancel context.CancelCauseFunc
	span   telemetry.HopSpan
	start  time.Time
	l4     headerTimeout

	// up speaks the channel's provider family; upErr says why it could
	// not be built (a credential chain).
	up    *provider.Upstream
	upErr error
	dia   dialect // the client's dialect and the channel's family
	codec codec   // reads the answer's stream for the client

	status    int // the response status once headers arrived
	usage     gate.Usage
	respModel string
	malformed int
	// why a committed answer could not be completed (KindCut).
	why string
	// rejected: a continuation the channel refused by its shape (a 4xx to
	// a prefill, an answer that is not a stream): worth a replay.
	rejected bool
	// passing: a replayed continuation is past the delivered prefix.
	passing bool
	got     []byte // a replayed continuation's text so far
	// skipWS: whitespace a translated prefill lost, to skip once.
	skipWS int
	// ew is the hop as its channel's early warning sees it (demote.go);
	// it records nothing when early warning is off for the channel.
	ew earlywarning.Hop
}

// newAttempt counts one attempt on entry's channel and starts its span.
// Its context is the call's (the client's and the dispatch span), and the
// call's deadline and end cancel it (walkStop); a continuation's is the
// client's, which the chain deadline must not end.
func (c *call) newAttempt(m *config.Model, entry config.Entry, try int, mode string) *attempt {
	a := &attempt{c: c, m: m, entry: entry, ch: entry.Channel, try: try, mode: mode}
	a.up, a.upErr = c.e.upstreamFor(a.ch)
	parent := c.ctx
	if mode != "" {
		parent = c.span.Context(c.clientCtx)
	}
	ctx, cancel := context.WithCancelCause(parent)
	if mode == "" {
		c.stop.watch(cancel) // the chain deadline and the call's end reach it
	}
	hs := telemetry.HopStart{
		Operation: operationName(c.req.Operation), Provider: provider.GenAIName(a.ch.Provider), RequestModel: entry.UpstreamModel,
		Channel: a.ch.ID, ChannelRegion: a.ch.Region, Index: c.attempts, Retry: try,
		BaseURL: a.ch.BaseURL, Path: c.req.Path, Continuation: mode, Delivered: len(c.rw.delivered),
	}
	if a.up != nil && a.ch.Provider != config.ProviderOpenAI {
		// The URL names the model (or the API's own path): the span shows
		// the one the hop went to.
		hs.BaseURL, hs.Path = a.up.URL(a.upstreamRequest(nil)), ""
	}
	c.attempts++
	a.ctx, a.span = c.e.tel.Spans.StartHop(ctx, &hs)
	a.dia = dialect{req: c.req, requestID: c.requestID, m: m, entry: entry, up: a.up, span: a.span, now: c.e.clock.Now,
		cross: config.AnthropicFamily(a.ch.Provider) != (c.req.Events == MessagesEvents)}
	a.dia.speech = c.sp
	if a.dia.cross && a.dia.anthropicClient() && c.req.Stream && !c.req.CountTokens {
		a.dia.prompt = promptTokens(c)
	}
	a.cancel = cancel
	a.start = c.e.clock.Now()
	a.l4 = headerTimeout{next: c.e.transport, clock: c.e.clock, timeout: m.Policy.HeaderTimeout, cancel: cancel}
	// A continuation streams without passing the gate: it has no first
	// token to time, only headers and an outcome.
	if !c.req.CountTokens { // a count is not what early warning watches
		c.e.warnFor(a.ch).Begin(&a.ew, c.req.Stream && mode == "")
	}
	return a
}

// run sends the request and handles the answer up to its end (buffered or
// passed through), or up to the commit of a stream (errStreamOpen: the
// hop's context and the response stay open for Stream). nil: the answer
// reached the client.
func (a *attempt) run() (err *classify.HopError) {
	defer func() {
		if err != errStreamOpen {
			a.cancel(nil)
		}
	}()
	c := a.c
	if c.req.CountTokens && !config.AnthropicFamily(a.ch.Provider) {
		return countLocally(a)
	}
	resp, err := a.send(reqbody.Options{
		Model:        a.entry.UpstreamModel,
		IncludeUsage: c.req.Stream && c.req.Events == ChatEvents && !c.req.Fields.IncludeUsage,
	})
	if err != nil {
		return err
	}
	c.e.observeWindows(a.ch, resp.Header, c.e.clock.Now()) // every answer, failed ones too
	defer func() {
		if err != errStreamOpen {
			_ = resp.Body.Close()
		}
	}()
	if classify.Status(resp.StatusCode) != classify.Success {
		return a.upstreamError(resp)
	}
	mt := mediaType(resp.Header.Get("Content-Type"))
	a.codec = a.dia.newCodec()
	switch {
	case c.req.Stream && (mt == "text/event-stream" || a.up.EventStream() && mt == "application/vnd.amazon.eventstream"):
		return a.stream(resp)
	case c.req.Binary && binaryBody(mt):
		return a.passthrough(resp)
	case elevenLabsEntry(a.entry):
		return a.dia.notAudio(resp, c.e.budget)
	}
	// A 200 JSON answer to a streaming request is how some providers
	// report errors: it is read whole and classified like any body.
	return a.buffered(resp)
}

// end records the hop's fate: its span, the hop metrics, its step on the
// failover path.
func (a *attempt) end(err *classify.HopError) {
	c := a.c
	d := c.e.clock.Since(a.start)
	he := telemetry.HopEnd{Outcome: hopOutcome(err), Status: a.status}
	label := "ok"
	if err != nil {
		label = err.Label()
		if err.Status != 0 {
			he.Status = err.Status
		}
		cls := err.Class()
		he.Failed, he.Label = cls == classify.Retryable, label
		he.RetryAfter = err.RetryAfter
		switch {
		case cls == classify.Canceled:
		case err.Kind == classify.KindCut && a.mode == "":
			he.ErrorType = telemetry.ErrTypeStreamInterrupted
		default:
			he.ErrorType = label
		}
	} else {
		he.ResponseModel, he.Usage = a.respModel, a.usage.Present
		he.InputTokens, he.OutputTokens = a.usage.InputTokens, a.usage.OutputTokens
		he.Dropped = a.malformed
	}
	a.span.End(&he)
	if a.usage.Present && c.rw.answered {
		// The hop that served (or continued) the answer: its usage is
		// what the request is charged for.
		c.usage = Usage{InputTokens: a.usage.InputTokens, OutputTokens: a.usage.OutputTokens, Present: true}
	}
	a.ew.End(warnOutcome(err))
	op := operationName(c.req.Operation)
	c.e.tel.Metrics.Hop(a.ctx, a.ch.ID, a.ch.Region, a.m.Name, c.req.Operation, he.Outcome, d)
	switch {
	case err == nil:
		// Only the hop that served the answer reports usage and cost.
		if u := a.usage; u.Present {
			cost := (float64(u.InputTokens)*a.entry.Price.Input + float64(u.OutputTokens)*a.entry.Price.Output) / 1e6
			if cost > 0 {
				c.e.tel.Metrics.Cost(a.ctx, a.ch.ID, a.m.Name, cost)
			}
			// The failover premium: what this channel cost above the
			// model's cheapest entry for the same usage (hopgate's cost,
			// never the tenant's).
			cheap := a.m.Chain[0].Price
			if premium := cost - (float64(u.InputTokens)*cheap.Input+float64(u.OutputTokens)*cheap.Output)/1e6; premium > 0 {
				c.e.tel.Metrics.FailoverPremium(a.ctx, a.ch.ID, a.m.Name, premium)
			}
		}
		if len(c.demoted) > 0 {
			recordPremium(a)
		}
		c.e.tel.Metrics.GenAI(a.ctx, op, a.ch.Provider, a.entry.UpstreamModel, a.respModel, "", d, a.usage.InputTokens, a.usage.OutputTokens)
	case err.Class() == classify.Retryable || err.Class() == classify.Final:
		// GenAI client metrics count every operation against a provider,
		// failed ones with error.type.
		c.e.tel.Metrics.GenAI(a.ctx, op, a.ch.Provider, a.entry.UpstreamModel, "", label, d, 0, 0)
	}
	switch {
	case a.mode != "":
		// A continuation: "b:prefill_ok", "b:replay_diverged".
		c.steps = append(c.steps, telemetry.Step{Channel: a.ch.ID, Result: a.mode + "_" + label})
	case err != nil && err.Class() == classify.Canceled:
		// The client left: nothing to say about the channel.
	default:
		// A hop cut by the chain deadline stays in the path ("a:deadline"):
		// on-call must see which channel was in flight when time ran out.
		c.steps = append(c.steps, telemetry.Step{Channel: a.ch.ID, Result: label})
		if err != nil && err.Class() == classify.Retryable && !c.rw.written {
			c.statuses = append(c.statuses, statusOrNone(err.Status))
			c.failedOver = true
		}
	}
}

// send builds the upstream request (the client body with only the fields of
// opts rewritten, the channel credential, traceparent) and waits for its
// response headers under L4.
func (a *attempt) send(opts reqbody.Options) (*http.Response, *classify.HopError) {
	c := a.c
	if a.upErr != nil {
		return nil, a.transportError(fmt.Errorf("%w: %w", provider.ErrCredential, a.upErr))
	}
	r := a.upstreamRequest(nil)
	body, herr := a.dia.requestBody(opts, r)
	if herr != nil {
		return nil, herr
	}
	r.Body = body
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, a.up.URL(r), nil)
	if err != nil {
		a.span.Error(err)
		return nil, &classify.HopError{Kind: classify.KindRequest, Cause: err}
	}
	if len(body) > 0 {
		held := &heldBody{b: body}
		req.Body, req.GetBody, req.ContentLength = newUpstreamBody(body), held.get, int64(len(body))
		defer held.release()
	}
	if err := a.up.SetHeaders(a.ctx, req, r, body, c.e.clock.Now()); err != nil {
		return nil, a.transportError(err)
	}
	c.e.tel.Propagator.Inject(a.ctx, propagation.HeaderCarrier(req.Header))

	await := a.span.AwaitHeaders(a.ctx)
	resp, err := a.roundTrip(req)
	if err != nil {
		herr := a.transportError(err)
		switch {
		case herr.Kind == classify.KindHeaderTimeout:
			await.TimedOut(a.m.Policy.HeaderTimeout)
			c.e.tel.Metrics.HeaderTimeout(a.ctx, a.ch.ID, a.m.Name)
		case herr.Class() == classify.Retryable:
			await.Failed(err)
		default:
			await.Arrived()
		}
		return nil, herr
	}
	await.Arrived()
	a.ew.Headers()
	a.status = resp.StatusCode
	return resp, nil
}

// upstreamRequest describes the hop's request to its provider adapter.
func (a *attempt) upstreamRequest(body []byte) *provider.Request {
	c := a.c
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
	path := c.req.Path
	if c.req.Events == MessagesEvents {
		path = "/chat/completions" // an Anthropic client served by an OpenAI-family channel
	}
	r := &provider.Request{
		Path: path, Model: a.entry.UpstreamModel, Stream: c.req.Stream, Body: body,
		ContentType: ct, Accept: accept, UserAgent: c.e.userAgent,
		AnthropicVersion: c.req.AnthropicVersion, Beta: c.req.AnthropicBeta, CountTokens: c.req.CountTokens,
	}
	c.sp.fill(a.entry, r)
	return r
}

// roundTrip sends req through L4 to the engine's transport; errors read as
// http.Client's do (`Post "URL": cause`), which traces and logs show.
func (a *attempt) roundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.l4.RoundTrip(req)
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

// transportError classifies an error before response headers (a channel
// credential that could not be obtained included), or while reading a
// body, keeping it as the cause. The hop's context ending explains any of
// them first: a token refresh cut by the client's departure or the chain
// deadline says nothing about the channel's credential.
func (a *attempt) transportError(err error) *classify.HopError {
	switch cause := context.Cause(a.ctx); {
	case cause == errHeaderTimeout:
		return &classify.HopError{Kind: classify.KindHeaderTimeout, Cause: err}
	case cause == errChainDeadline:
		return &classify.HopError{Kind: classify.KindDeadline, Cause: err}
	}
	if classify.Error(a.c.clientCtx, err) == classify.Canceled {
		return &classify.HopError{Kind: classify.KindCanceled, Cause: err}
	}
	if errors.Is(err, provider.ErrCredential) {
		a.span.Error(err) // why: a refresh refused, a chain that finds nothing
		return &classify.HopError{Kind: classify.KindCredential, Cause: err}
	}
	return &classify.HopError{Kind: netKind(err), Cause: err}
}

// ctxEnded classifies a hop whose context ended while it read an answer
// (the client, the chain deadline, a timer); nil when it has not ended.
func (a *attempt) ctxEnded() *classify.HopError {
	if a.ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(a.ctx)
	switch {
	case cause == errChainDeadline:
		return &classify.HopError{Kind: classify.KindDeadline, Cause: cause}
	case a.c.clientCtx.Err() != nil:
		return &classify.HopError{Kind: classify.KindCanceled, Cause: cause}
	}
	return &classify.HopError{Kind: classify.KindStreamEOF, Cause: cause}
}

// netKind names a transport error by its type and errno, never its text.
func netKind(err error) classify.Kind {
	var (
		ne  net.Error
		dns *net.DNSError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return classify.KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return classify.KindReset
	case errors.As(err, &dns):
		return classify.KindDNS
	case tlsfail.Is(err):
		return classify.KindTLS
	case errors.As(err, &ne) && ne.Timeout():
		return classify.KindNetTimeout
	}
	return classify.KindConnect
}

// netLabel is netKind's label (the failover path's word for err).
func netLabel(err error) string { return netKind(err).String() }

// upstreamError handles a non-2xx upstream answer: a retryable one with its
// Retry-After, a final one with the body to pass on unchanged.
func (a *attempt) upstreamError(resp *http.Response) *classify.HopError {
	hold := overload.NewHold(a.c.e.budget)
	body, rerr := readBounded(resp.Body, DefaultMaxErrorBody, resp.ContentLength, &hold)
	// A final body is kept until the walk writes it; held bytes go back
	// now: error bodies are bounded (1 MiB) and short-lived.
	hold.Release()
	e := classify.NewStatus(resp.StatusCode)
	if a.ch.Provider == config.ProviderBedrock {
		// Bedrock's exception may say "another channel" where its status
		// reads final (a 400 for our account's quota).
		e = classify.NewBedrockStatus(resp.StatusCode, provider.AWSErrorType(resp.Header, body))
	}
	class := e.Class()
	if rerr != nil && class == classify.Final {
		if errors.Is(rerr, errBudget) {
			// The process cannot hold the answer to pass it on (DESIGN.md
			// §13): the hop fails as retryable, never as an empty body.
			return &classify.HopError{Kind: classify.KindBudget, Status: resp.StatusCode, Cause: rerr}
		}
		// A final answer we could not read completely is not an answer.
		if te := a.transportError(rerr); te.Class() != classify.Retryable {
			return te
		}
	}
	if classify.RetryAfterStatus(resp.StatusCode) {
		e.RetryAfter = retryafter.Parse(resp.Header.Get("Retry-After"), a.c.e.clock.Now(), maxRetryAfterHeader)
	}
	quoted := body
	if k := a.ch.APIKey; k != "" && bytes.Contains(body, []byte(k)) {
		// A provider may quote the credential it refused: redacted before
		// ErrorDetail cuts the message, so no part of it survives the cut.
		quoted = bytes.ReplaceAll(body, []byte(k), []byte("[redacted]"))
	}
	if detail := provider.ErrorDetail(resp.Header, quoted); detail != "" {
		e.Cause = errors.New(detail)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
			class != classify.Status(resp.StatusCode) {
			// Our credential was refused, or the provider's words made a
			// final status retryable: they go on the hop's span, so a
			// wrong SigV4 signature, an expired token or a quota at 400
			// is visible as such.
			a.span.Error(e.Cause)
		}
	}
	if class == classify.Final {
		if a.dia.contextLength(body) {
			e.Code = "context_length_exceeded"
		}
		e.Body, e.ContentType = a.dia.finalBody(resp.StatusCode, body), headerContentType(resp.Header)
		if a.dia.cross {
			e.ContentType = "application/json"
		}
	}
	return e
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

// hopOutcome is hopgate.hop.outcome and the hops metric's outcome label.
func hopOutcome(err *classify.HopError) string {
	switch {
	case err == nil:
		return telemetry.HopOK
	case err.Kind == classify.KindHeaderTimeout:
		return telemetry.HopHeaderTimeout
	}
	switch err.Class() {
	case classify.Final:
		return telemetry.HopFinal
	case classify.Canceled:
		return telemetry.HopCanceled
	}
	return telemetry.HopRetryable
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
	case config.OpRealtime:
		return telemetry.OperationRealtime
	}
	return telemetry.OperationChat
}

// mediaType is the lower-cased media type without parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
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

func prefixLen(o reqbody.Options) int {
	if o.AssistantPrefix == nil {
		return 0
	}
	return len(*o.AssistantPrefix) + 64
}

package dispatch

import (
	"errors"
	"net/http"
	"time"

	"github.com/hopgate/hopgate/dispatch/apierror"
	"github.com/hopgate/hopgate/dispatch/classify"
	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/gate"
	"github.com/hopgate/hopgate/internal/provider"
	"github.com/hopgate/hopgate/internal/reqbody"
	"github.com/hopgate/hopgate/internal/translate"
	"github.com/hopgate/hopgate/telemetry"
)

// dialect bridges the client's API (OpenAI, or Anthropic on /v1/messages)
// and the channel's provider family for one hop (DESIGN.md §8). Across
// families the request, the answer, every stream event and error bodies
// are translated; the same family in and out passes the client's bytes
// with only the model rewritten (the fast path).
type dialect struct {
	req       *Request
	requestID string
	m         *config.Model
	entry     config.Entry
	up        *provider.Upstream
	span      telemetry.HopSpan
	now       func() time.Time
	// cross: the channel's family is not the client's.
	cross bool
	// speech: the speech request, for an elevenlabs entry (speech.go).
	speech *speechCall
	// prompt: the request's input token count, for a translated Anthropic
	// stream's message_start (nil for every other hop).
	prompt *promptCount
	// replay: the hop's translate.ReplayKey when a Responses client asked
	// for reasoning.encrypted_content ("" otherwise).
	replay string
}

// anthropicClient reports a client speaking Anthropic's Messages API.
func (d *dialect) anthropicClient() bool { return d.req.Events == MessagesEvents }

// requestBody is the hop's request body in the channel's dialect: the
// client's body with only the fields of opts rewritten, translated when the
// channel's family is not the client's, adapted for Bedrock and Vertex. A
// request the channel's family cannot express is a client error (final).
func (d *dialect) requestBody(opts reqbody.Options, r *provider.Request) ([]byte, *classify.HopError) {
	c := d
	// One buffer per hop, not pooled: the transport may still be reading
	// the request body after response headers arrived.
	body := c.req.Body
	var err error
	switch {
	case elevenLabsEntry(d.entry):
		body, err = d.elevenLabsBody(d.speech)
	case c.req.Raw:
		if c.req.Form.ModelPresent {
			// Multipart: only the model part's value changes, never the file.
			body, err = reqbody.RewriteMultipartModel(make([]byte, 0, len(c.req.Body)+len(opts.Model)), c.req.Body, c.req.Form, opts.Model)
		}
	case !d.cross:
		if d.anthropicClient() {
			opts.IncludeUsage = false // stream_options is OpenAI's
		}
		body, err = reqbody.Rewrite(make([]byte, 0, len(c.req.Body)+64+prefixLen(opts)), c.req.Body, c.req.Fields, opts)
	default:
		if opts.AssistantPrefix != nil {
			// The continuation's prefix goes in before translation: an
			// assistant prefix is Anthropic's native prefill.
			body, err = reqbody.Rewrite(nil, c.req.Body, c.req.Fields, reqbody.Options{AssistantPrefix: opts.AssistantPrefix})
			if err != nil {
				break
			}
		}
		body, err = d.translateRequest(body)
	}
	if err != nil {
		var te *translate.Error
		if errors.As(err, &te) {
			e := &classify.HopError{Kind: classify.KindUnsupported, Status: te.Status, Cause: err, ContentType: "application/json"}
			e.Body = errorBody(d.req, d.requestID, apierror.InvalidRequest(te.Message, te.Param), te.Code)
			return nil, e
		}
		// The body parsed at the front door; a rewrite failure is ours.
		d.span.Error(err)
		return nil, &classify.HopError{Kind: classify.KindRewrite, Cause: err}
	}
	if !c.req.Raw && d.up.Anthropic() {
		var betas []string
		body, betas, err = d.up.Prepare(body, r)
		if err != nil {
			d.span.Error(err)
			return nil, &classify.HopError{Kind: classify.KindRewrite, Cause: err}
		}
		d.span.Dropped(nil, betas)
	}
	return body, nil
}

// translateRequest translates the client's body for the channel's family.
func (d *dialect) translateRequest(body []byte) ([]byte, error) {
	if d.anthropicClient() {
		tr, err := translate.MessagesToChat(body, translate.ToChatOptions{Model: d.entry.UpstreamModel})
		if err != nil {
			return nil, err
		}
		d.span.Dropped(tr.Dropped, nil)
		return tr.Body, nil
	}
	p := d.entry.Channel.Provider
	cloud := p == config.ProviderBedrock || p == config.ProviderVertex
	o := translate.ToMessagesOptions{Model: d.entry.UpstreamModel, MaxTokensDefault: int64(d.m.MaxTokensDefault), Base64ImagesOnly: cloud}
	if cloud {
		o.Model = "" // in the URL
	}
	if d.req.Events == ResponsesEvents {
		return d.translateResponses(body, o)
	}
	tr, err := translate.ChatToMessages(body, o)
	if err != nil {
		return nil, err
	}
	d.span.Dropped(tr.Dropped, nil)
	return tr.Body, nil
}

// errorBody renders hopgate's own error in req's client dialect.
func errorBody(req *Request, requestID string, e *apierror.Error, code string) []byte {
	if code != "" {
		e.Code = code
	}
	if req.anthropicErrors() {
		return e.AnthropicJSON(requestID)
	}
	return e.JSON(requestID)
}

// finalBody is a final upstream error body as the client reads it: in its
// own dialect (the status is kept).
func (d *dialect) finalBody(status int, body []byte) []byte {
	switch {
	case elevenLabsEntry(d.entry):
		return translate.ElevenLabsErrorToOpenAI(status, body)
	case !d.cross && d.anthropicClient() && d.entry.Channel.Provider != config.ProviderAnthropic:
		// Bedrock's and Vertex's own errors are not Anthropic's shape.
		return translate.CloudErrorToAnthropic(status, body)
	case !d.cross:
		return body
	case d.anthropicClient():
		return translate.OpenAIErrorToAnthropic(status, body)
	}
	return translate.AnthropicErrorToOpenAI(status, body)
}

// contextLength reports a final answer saying the prompt does not fit, in
// any family's words ("prompt is too long" on Anthropic's API and Bedrock).
func (d *dialect) contextLength(body []byte) bool {
	if gate.ErrorCode(body) == "context_length_exceeded" {
		return true
	}
	return d.up.Anthropic() && translate.ContextLengthExceeded(body)
}

// answerBody classifies a complete (non-streaming) 2xx body and returns what
// the client gets: the body itself, or its translation.
func (d *dialect) answerBody(resp *http.Response, b []byte) ([]byte, gate.Info, error) {
	switch {
	case d.req.CountTokens:
		return countAnswer(b)
	case d.cross && d.anthropicClient():
		return translate.ChatCompletionToMessage(b)
	case d.cross && d.req.Events == ResponsesEvents:
		return translate.MessageToResponse(b, d.now().Unix(), d.replay)
	case d.cross:
		return translate.MessageToChatCompletion(b, d.now().Unix())
	case d.up.Anthropic():
		// Anthropic's body as it is; its usage read as the translation reads
		// it (the whole prompt, cached tokens included), so a tenant is
		// charged alike whichever family served.
		_, info, err := translate.MessageToChatCompletion(b, 0)
		if errors.Is(err, translate.ErrMalformed) {
			return b, gate.Info{Kind: gate.Malformed}, nil
		}
		return b, info, nil
	case mediaType(resp.Header.Get("Content-Type")) == "application/json" || !d.req.Raw:
		return b, gate.InspectBody(b), nil
	}
	return b, gate.Info{}, nil
}

// interruptFrame is the in-band error that ends a committed stream which
// cannot be completed, in req's client dialect, with no end marker.
func interruptFrame(req *Request, requestID, msg string) []byte {
	if req.Events == MessagesEvents {
		return translate.AnthropicInterruptFrame(msg)
	}
	return apierror.StreamFrame(requestID, apierror.StreamInterrupted(msg))
}

// newCodec is the codec of an answer from a channel of the hop's family
// to the client.
func (d *dialect) newCodec() codec {
	anthropic := d.up.Anthropic()
	switch {
	case d.anthropicClient() && anthropic:
		return &messagesCodec{}
	case d.anthropicClient():
		return &toMessagesCodec{t: translate.NewChatToMessagesStream(), prompt: d.prompt}
	case anthropic && d.req.Events == ResponsesEvents:
		t := translate.NewMessagesToResponsesStream(d.now().Unix())
		t.SetReplay(d.replay)
		return &toResponsesCodec{t: t}
	case anthropic:
		return &toChatCodec{t: translate.NewMessagesToChatStream(translate.ChatStreamOptions{
			IncludeUsage: d.req.Fields.IncludeUsage, Created: d.now().Unix(),
		})}
	case d.req.Events == ResponsesEvents:
		return &responsesCodec{}
	}
	return &chatCodec{}
}

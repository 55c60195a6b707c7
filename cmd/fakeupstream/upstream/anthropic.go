package upstream

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// ThinkingText is the extended thinking of every answer to a request that
// enables it, streamed as one thinking_delta per word. Its signature is
// bound to Options.Name: a thinking block replayed to a fake of another
// name is a 400, as a real one replayed to another model or platform is.
const ThinkingText = "Let me think. "

// anthropicAnswer is the healthy answer to a Messages request, before it is
// framed as JSON, server-sent events or AWS event-stream messages.
type anthropicAnswer struct {
	id, model string
	thinking  []string // thinking_delta pieces; nil unless the request enabled thinking
	signature string
	text      []string // text_delta pieces, when the answer is text
	tool      *toolUse // the tool_use block, when the answer calls a tool
	stop      string
	stopSeq   *string
	usage     anthropicUsage
}

type toolUse struct {
	id, name string
	args     []string // input_json_delta pieces: {"q":"tok1 ... tokN "}
}

type anthropicUsage struct {
	InputTokens              int    `json:"input_tokens"`
	CacheCreationInputTokens int    `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int    `json:"cache_read_input_tokens"`
	OutputTokens             int    `json:"output_tokens"`
	ServiceTier              string `json:"service_tier,omitempty"`
}

// anthropicAnswer computes the answer: Token(1..n) as text (continuing an
// assistant prefill), or a tool call; cut short by max_tokens or a stop
// sequence the way the API cuts them.
func (ex *exchange) anthropicAnswer() (anthropicAnswer, error) {
	m, f := ex.msgs, ex.fault
	a := anthropicAnswer{
		id:    "msg_" + ex.s.opts.Name + "_" + itoa(ex.seq),
		model: ex.model,
		stop:  "end_turn",
	}
	if m.ThinkingEnabled() {
		a.thinking = strings.SplitAfter(ThinkingText, " ")
		a.thinking = a.thinking[:len(a.thinking)-1] // SplitAfter leaves a trailing ""
		a.signature = thinkingSignature(ThinkingText, ex.s.opts.Name)
	}
	pieces := ex.pieces()
	if f.ToolCalls {
		name := m.toolChoiceName()
		if name == "" {
			return a, errNoTools
		}
		a.tool = &toolUse{id: "toolu_" + ex.s.opts.Name + "_" + itoa(ex.seq), name: name, args: toolArgs(pieces)}
		a.stop = "tool_use"
	} else {
		if budget := m.MaxTokens - len(a.thinking); len(pieces) > budget {
			pieces, a.stop = pieces[:max(budget, 0)], "max_tokens"
		}
		if cut, seq, ok := stopAt(pieces, m.StopSequences); ok {
			pieces, a.stop, a.stopSeq = cut, "stop_sequence", &seq
		}
		a.text = pieces
	}
	if f.Stop != "" {
		a.stop = f.Stop
		if f.Stop == "stop_sequence" && a.stopSeq == nil {
			if len(m.StopSequences) == 0 {
				return a, errNoStopSq
			}
			a.stopSeq = &m.StopSequences[0]
		}
	}
	cached := min(m.cachedTokens(), ex.req.promptTokens())
	a.usage = anthropicUsage{InputTokens: ex.req.promptTokens() - cached, ServiceTier: "standard"}
	if f.CacheWrite {
		a.usage.CacheCreationInputTokens = cached
	} else {
		a.usage.CacheReadInputTokens = cached
	}
	a.usage.OutputTokens = len(a.thinking) + len(a.text)
	if a.tool != nil {
		a.usage.OutputTokens = len(a.thinking) + len(a.tool.args)
	}
	return a, nil
}

// toolChoiceName is the tool a tool-calls answer calls: the one tool_choice
// names, else the first client tool; "" when the request declares none.
func (m *MessagesRequest) toolChoiceName() string {
	var tc struct{ Type, Name string }
	if json.Unmarshal(m.ToolChoice, &tc) == nil && tc.Type == "tool" && tc.Name != "" {
		return tc.Name
	}
	for _, t := range m.Tools {
		if t.Type == "" || t.Type == "custom" {
			return t.Name
		}
	}
	return ""
}

// stopAt cuts the pieces before the earliest stop sequence in their text.
func stopAt(pieces, seqs []string) (cut []string, seq string, ok bool) {
	text := strings.Join(pieces, "")
	at := -1
	for _, s := range seqs {
		if i := strings.Index(text, s); s != "" && i >= 0 && (at < 0 || i < at) {
			at, seq = i, s
		}
	}
	if at < 0 {
		return pieces, "", false
	}
	for _, p := range pieces {
		if at <= 0 {
			break
		}
		if len(p) > at {
			p = p[:at]
		}
		cut = append(cut, p)
		at -= len(p)
	}
	return cut, seq, true
}

// block is one content block of a non-streamed message.
type block struct {
	Type      string          `json:"type"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	Text      *string         `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []block        `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

// blocks is the answer's content: thinking first, then text or tool_use.
// stream renders the blocks as content_block_start shows them (empty).
func (a anthropicAnswer) blocks(stream bool) []block {
	var out []block
	if a.thinking != nil {
		t, sig := strings.Join(a.thinking, ""), a.signature
		if stream {
			t, sig = "", ""
		}
		out = append(out, block{Type: "thinking", Thinking: &t, Signature: sig})
	}
	switch {
	case a.tool != nil:
		input := json.RawMessage(strings.Join(a.tool.args, ""))
		if stream {
			input = json.RawMessage("{}")
		}
		out = append(out, block{Type: "tool_use", ID: a.tool.id, Name: a.tool.name, Input: input})
	default:
		t := strings.Join(a.text, "")
		if stream {
			t = ""
		}
		out = append(out, block{Type: "text", Text: &t})
	}
	return out
}

func (a anthropicAnswer) message() anthropicMessage {
	stop := a.stop
	return anthropicMessage{
		ID: a.id, Type: "message", Role: "assistant", Model: a.model,
		Content: a.blocks(false), StopReason: &stop, StopSequence: a.stopSeq, Usage: a.usage,
	}
}

// anthropicFraming is how one dialect carries Anthropic stream events.
type anthropicFraming struct {
	enc         func(event string, payload []byte) []byte
	errFrame    func(event bool) []byte
	malformed   []byte
	endless     []byte
	endlessMax  int
	contentType string
	stopExtra   func() map[string]any // extra fields of message_stop (Bedrock's invocation metrics)
}

// plan lays the answer out as the API streams it: message_start (usage
// included), content_block_start, ping, the deltas (thinking, signature,
// then text or input_json), content_block_stop, message_delta (stop reason,
// usage with cache tokens), message_stop.
func (a anthropicAnswer) plan(fr anthropicFraming) streamPlan {
	ev := func(name string, fields map[string]any) []byte {
		fields["type"] = name
		return fr.enc(name, mustJSON(fields))
	}
	delta := func(index int, d map[string]any) []byte {
		return ev("content_block_delta", map[string]any{"index": index, "delta": d})
	}
	startUsage := a.usage
	startUsage.OutputTokens = 1 // as the API reports it before generating
	start := a.message()
	start.Content, start.StopReason, start.StopSequence, start.Usage = []block{}, nil, nil, startUsage
	blocks := a.blocks(true)
	last := len(blocks) - 1

	var main []string
	mainDelta := func(s string) map[string]any { return map[string]any{"type": "text_delta", "text": s} }
	if a.tool != nil {
		main = a.tool.args
		mainDelta = func(s string) map[string]any { return map[string]any{"type": "input_json_delta", "partial_json": s} }
	} else {
		main = a.text
	}
	nThink := 0
	if a.thinking != nil {
		nThink = len(a.thinking) + 2 // the deltas, the signature, the switch to the next block
	}
	content := func(i int) []byte {
		switch {
		case i < len(a.thinking):
			return delta(0, map[string]any{"type": "thinking_delta", "thinking": a.thinking[i]})
		case i == len(a.thinking) && nThink > 0:
			return delta(0, map[string]any{"type": "signature_delta", "signature": a.signature})
		case i == len(a.thinking)+1 && nThink > 0:
			return append(ev("content_block_stop", map[string]any{"index": 0}),
				ev("content_block_start", map[string]any{"index": last, "content_block": blocks[last]})...)
		}
		return delta(last, mainDelta(main[i-nThink]))
	}
	stopReason := a.stop
	stopFields := map[string]any{}
	if fr.stopExtra != nil {
		stopFields = fr.stopExtra()
	}
	return streamPlan{
		head: [][]byte{
			ev("message_start", map[string]any{"message": start}),
			ev("content_block_start", map[string]any{"index": 0, "content_block": blocks[0]}),
			ev("ping", map[string]any{}),
		},
		n:       nThink + len(main),
		content: content,
		closing: 1,
		tail: [][]byte{
			ev("content_block_stop", map[string]any{"index": last}),
			ev("message_delta", map[string]any{
				"delta": map[string]any{"stop_reason": stopReason, "stop_sequence": a.stopSeq},
				"usage": a.usage.delta(),
			}),
		},
		end:           ev("message_stop", stopFields),
		endless:       fr.endless,
		endlessMax:    fr.endlessMax,
		contentType:   fr.contentType,
		errFrame:      fr.errFrame,
		malformed:     fr.malformed,
		slowAfterHead: true, // message_start comes at once; the first delta is what is slow
	}
}

// delta is the usage of message_delta: cumulative, cache counts included.
func (u anthropicUsage) delta() map[string]int {
	return map[string]int{
		"input_tokens": u.InputTokens, "cache_creation_input_tokens": u.CacheCreationInputTokens,
		"cache_read_input_tokens": u.CacheReadInputTokens, "output_tokens": u.OutputTokens,
	}
}

// sseFraming is the Anthropic API's (and Vertex's) server-sent events.
func (ex *exchange) sseFraming() anthropicFraming {
	return anthropicFraming{
		enc: sseEvent,
		errFrame: func(bool) []byte {
			typ := ex.streamErrorType()
			return sseEvent("error", anthropicErrorJSON(typ, anthropicErrorMessage(typ), ""))
		},
		malformed: []byte("event: content_block_delta\ndata: {not json\n\n"),
		endless:   []byte(`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`),
	}
}

// serveMessages answers POST /v1/messages, Bedrock's invoke and Vertex's
// rawPredict: the same answer, framed per dialect.
func serveMessages(ex *exchange) {
	a, err := ex.anthropicAnswer()
	if err != nil {
		ex.clientError(http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	fr := ex.sseFraming()
	if ex.dialect == DialectBedrock {
		fr = ex.bedrockFraming(a)
	}
	if ex.req.Stream {
		ex.stream(a.plan(fr))
		return
	}
	if ex.dialect == DialectBedrock {
		h := ex.w.Header()
		h.Set("X-Amzn-Bedrock-Input-Token-Count", strconv.Itoa(a.usage.InputTokens))
		h.Set("X-Amzn-Bedrock-Output-Token-Count", strconv.Itoa(a.usage.OutputTokens))
		h.Set("X-Amzn-Bedrock-Invocation-Latency", "420")
	}
	ex.bodyEndless("application/json", mustJSON(a.message()),
		[]byte(`{"id":"`+a.id+`","type":"message","role":"assistant","content":[{"type":"text","text":"`))
}

// anthropicErrorTypes are the error.type values of the Anthropic API.
var anthropicErrorTypes = map[string]string{
	"invalid_request_error": "Invalid request.",
	"authentication_error":  "invalid x-api-key",
	"billing_error":         "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
	"permission_error":      "Your API key does not have permission to use the specified resource.",
	"not_found_error":       "The requested resource could not be found.",
	"request_too_large":     "Request exceeds the maximum allowed number of bytes.",
	"rate_limit_error":      "This request would exceed your organization's rate limit. Please try again later.",
	"timeout_error":         "Request timed out.",
	"conflict_error":        "Conflict with a concurrent request.",
	"api_error":             "Internal server error",
	"overloaded_error":      "Overloaded",
}

func anthropicErrorMessage(typ string) string {
	if m, ok := anthropicErrorTypes[typ]; ok {
		return m
	}
	return "fakeupstream: the model failed while generating"
}

// anthropicStatusTypes maps a status to the error.type the API sends with it.
var anthropicStatusTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
	403: "permission_error", 404: "not_found_error", 409: "conflict_error", 413: "request_too_large",
	429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error",
}

func anthropicStatusType(status int) string {
	if t, ok := anthropicStatusTypes[status]; ok {
		return t
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// anthropicErrorJSON is the API's error body; requestID "" leaves it out
// (in-stream errors carry none).
func anthropicErrorJSON(typ, msg, requestID string) []byte {
	type inner struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	return mustJSON(struct {
		Type      string `json:"type"`
		Error     inner  `json:"error"`
		RequestID string `json:"request_id,omitempty"`
	}{"error", inner{typ, msg}, requestID})
}

// anthropicStatus writes a status fault as the Anthropic API does: its
// error shape, x-should-retry on overload and rate limits, the rate-limit
// headers on 429.
func (ex *exchange) anthropicStatus(status int, msg string) {
	typ := anthropicStatusType(status)
	if msg == "" {
		msg = anthropicErrorMessage(typ)
	}
	h := ex.w.Header()
	if status == http.StatusTooManyRequests || status >= 500 {
		h.Set("X-Should-Retry", "true")
	}
	if status == http.StatusTooManyRequests {
		h.Set("Anthropic-Ratelimit-Requests-Limit", "50")
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
		h.Set("Anthropic-Ratelimit-Requests-Reset", ex.now.Add(ex.fault.RetryAfter).UTC().Format("2006-01-02T15:04:05Z"))
	}
	writeBody(ex.w, status, "application/json", anthropicErrorJSON(typ, msg, ex.requestID()))
}

// anthropicAuthorized requires the configured key, in x-api-key or as
// "Authorization: Bearer" (the API takes both; the Go SDK v2 sends the
// latter).
func (ex *exchange) anthropicAuthorized() bool {
	k := ex.r.Header.Get("X-Api-Key")
	if bearer, ok := strings.CutPrefix(ex.r.Header.Get("Authorization"), "Bearer "); ok && k == "" {
		k = bearer
	}
	switch {
	case k == "":
		ex.anthropicStatus(http.StatusUnauthorized, "x-api-key header is required")
	case k != ex.s.opts.AnthropicAPIKey:
		ex.anthropicStatus(http.StatusUnauthorized, "invalid x-api-key")
	default:
		return true
	}
	return false
}

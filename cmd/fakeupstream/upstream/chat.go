package upstream

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Token is the k-th (1-based) token of every healthy answer, as streamed in
// one content delta.
func Token(k int) string { return "tok" + strconv.Itoa(k) + " " }

// Answer is the full text of a healthy n-token answer: Token(1)..Token(n)
// concatenated, so a stream and its non-streaming twin carry the same text.
func Answer(n int) string {
	var b strings.Builder
	for k := 1; k <= n; k++ {
		b.WriteString(Token(k))
	}
	return b.String()
}

// pieces returns the content deltas of the answer. When the conversation
// ends with an assistant prefix that is a prefix of the answer (a
// mid-stream resume by prefill), only the continuation is produced.
func (ex *exchange) pieces() []string {
	n := ex.fault.Tokens
	out := make([]string, n)
	for k := range out {
		out[k] = Token(k + 1)
	}
	if ex.req.lastRole() != "assistant" || ex.fault.ToolCalls {
		return out
	}
	prefix := ex.req.Messages[len(ex.req.Messages)-1].Text
	if !strings.HasPrefix(Answer(n), prefix) {
		return out
	}
	for i, p := range out {
		if len(prefix) < len(p) { // the prefix ends inside (or before) token i
			out[i] = p[len(prefix):]
			return out[i:]
		}
		prefix = prefix[len(p):]
	}
	return nil
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (ex *exchange) usage(completion int) usage {
	p := ex.req.promptTokens()
	return usage{PromptTokens: p, CompletionTokens: completion, TotalTokens: p + completion}
}

type toolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	// ContentFilterResults is Azure's annotation (nil elsewhere).
	ContentFilterResults any `json:"content_filter_results,omitempty"`
}

type chatChunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
	// PromptFilterResults is Azure's prompt annotation (nil elsewhere).
	PromptFilterResults any `json:"prompt_filter_results,omitempty"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("fakeupstream: " + err.Error()) // only fixed, marshalable types reach here
	}
	return b
}

// toolArgs splits the tool call arguments {"q":"tok1 ... tokN "} into one
// fragment per token, so a cut leaves them unfinished JSON.
func toolArgs(pieces []string) []string {
	out := make([]string, len(pieces))
	copy(out, pieces)
	if len(out) == 0 {
		return []string{`{"q":""}`}
	}
	out[0] = `{"q":"` + out[0]
	out[len(out)-1] += `"}`
	return out
}

func serveChat(ex *exchange) {
	pieces := ex.pieces()
	id := "chatcmpl-" + ex.s.opts.Name + "-" + itoa(ex.seq)
	created := ex.now.Unix()
	fp := "fp_" + ex.s.opts.Name
	finish := "stop"
	if ex.fault.ToolCalls {
		pieces = toolArgs(pieces)
		finish = "tool_calls"
	}
	if ex.fault.Stop != "" {
		finish = ex.fault.Stop
	}
	azure := ex.dialect == DialectAzure
	var filters func() any // Azure's per-choice annotation
	if azure {
		filters = func() any { return azureChoiceFilterResults(finish == "content_filter") }
	}
	if !ex.req.Stream {
		text := strings.Join(pieces, "")
		msg := map[string]any{"role": "assistant", "content": text, "refusal": nil}
		if ex.fault.ToolCalls {
			msg["content"] = nil
			msg["tool_calls"] = []map[string]any{{
				"id": "call_1", "type": "function",
				"function": map[string]any{"name": "lookup", "arguments": text},
			}}
		}
		answer := map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": ex.model,
			"system_fingerprint": fp,
			"choices": []map[string]any{{
				"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish,
			}},
			"usage": ex.usage(len(pieces)),
		}
		if azure {
			answer["prompt_filter_results"] = azurePromptFilterResults()
			answer["choices"].([]map[string]any)[0]["content_filter_results"] = filters()
		}
		body := mustJSON(answer)
		ex.bodyEndless("application/json", body,
			[]byte(`{"id":"`+id+`","object":"chat.completion","model":`+string(mustJSON(ex.model))+`,"choices":[{"index":0,"message":{"role":"assistant","content":"`))
		return
	}
	var usageNull json.RawMessage
	if ex.req.IncludeUsage {
		usageNull = json.RawMessage("null") // as OpenAI does on every chunk but the last
	}
	chunk := func(d delta, finish *string) []byte {
		c := chunkChoice{Delta: d, FinishReason: finish}
		switch {
		case !azure:
		case d.Content != nil && *d.Content != "" || d.ToolCalls != nil || finish != nil && *finish == "content_filter":
			c.ContentFilterResults = filters()
		default: // role and finish chunks carry an empty annotation
			c.ContentFilterResults = struct{}{}
		}
		return sse(mustJSON(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: ex.model,
			SystemFingerprint: fp, Usage: usageNull,
			Choices: []chunkChoice{c},
		}))
	}
	empty := ""
	role := delta{Role: "assistant", Content: &empty}
	if ex.fault.ToolCalls {
		role.Content = nil
	}
	head := [][]byte{chunk(role, nil)}
	if azure { // Azure's first chunk: the prompt annotation alone, no choices
		head = append([][]byte{sse(mustJSON(chatChunk{Choices: []chunkChoice{}, PromptFilterResults: azurePromptFilterResults()}))}, head...)
	}
	p := streamPlan{
		head: head,
		n:    len(pieces),
		content: func(i int) []byte {
			if ex.fault.ToolCalls {
				tc := toolCall{Index: 0}
				if i == 0 {
					tc.ID, tc.Type, tc.Function.Name = "call_1", "function", "lookup"
				}
				tc.Function.Arguments = pieces[i]
				return chunk(delta{ToolCalls: []toolCall{tc}}, nil)
			}
			return chunk(delta{Content: &pieces[i]}, nil)
		},
		tail:    [][]byte{chunk(delta{}, &finish)},
		end:     frameDone,
		endless: []byte(`data: {"id":"` + id + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"`),
	}
	if ex.req.IncludeUsage {
		p.tail = append(p.tail, sse(mustJSON(chatChunk{
			ID: id, Object: "chat.completion.chunk", Created: created, Model: ex.model,
			SystemFingerprint: fp, Choices: []chunkChoice{},
			Usage: mustJSON(ex.usage(len(pieces))),
		})))
	}
	ex.stream(p)
}

// serveCompletions is the legacy text completion API: no role chunk.
func serveCompletions(ex *exchange) {
	pieces := ex.pieces()
	id := "cmpl-" + ex.s.opts.Name + "-" + itoa(ex.seq)
	created := ex.now.Unix()
	choice := func(text string, finish any) []map[string]any {
		return []map[string]any{{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}}
	}
	if !ex.req.Stream {
		ex.bodyEndless("application/json", mustJSON(map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": ex.model,
			"choices": choice(strings.Join(pieces, ""), "stop"),
			"usage":   ex.usage(len(pieces)),
		}), []byte(`{"id":"`+id+`","object":"text_completion","choices":[{"index":0,"text":"`))
		return
	}
	chunk := func(text string, finish any) []byte {
		return sse(mustJSON(map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": ex.model,
			"choices": choice(text, finish),
		}))
	}
	p := streamPlan{
		n:       len(pieces),
		content: func(i int) []byte { return chunk(pieces[i], nil) },
		tail:    [][]byte{chunk("", "stop")},
		end:     frameDone,
		endless: []byte(`data: {"id":"` + id + `","object":"text_completion","choices":[{"index":0,"text":"`),
	}
	if ex.req.IncludeUsage {
		p.tail = append(p.tail, sse(mustJSON(map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": ex.model,
			"choices": []any{}, "usage": ex.usage(len(pieces)),
		})))
	}
	ex.stream(p)
}

// serveResponses is the Responses API: typed events, no [DONE].
func serveResponses(ex *exchange) {
	pieces := ex.pieces()
	id := "resp_" + ex.s.opts.Name + "_" + itoa(ex.seq)
	msgID := "msg_" + ex.s.opts.Name + "_" + itoa(ex.seq)
	text := strings.Join(pieces, "")
	u := ex.usage(len(pieces))
	response := func(status string, output []any, withUsage bool) map[string]any {
		r := map[string]any{
			"id": id, "object": "response", "created_at": ex.now.Unix(), "status": status,
			"model": ex.model, "output": output,
		}
		if withUsage {
			r["usage"] = map[string]int{
				"input_tokens": u.PromptTokens, "output_tokens": u.CompletionTokens, "total_tokens": u.TotalTokens,
			}
		}
		return r
	}
	done := []any{map[string]any{
		"type": "message", "id": msgID, "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
	}}
	if !ex.req.Stream {
		ex.bodyEndless("application/json", mustJSON(response("completed", done, true)),
			[]byte(`{"id":"`+id+`","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"`))
		return
	}
	event := func(typ string, seq int, fields map[string]any) []byte {
		fields["type"], fields["sequence_number"] = typ, seq
		return sseEvent(typ, mustJSON(fields))
	}
	ex.stream(streamPlan{
		head: [][]byte{event("response.created", 0, map[string]any{"response": response("in_progress", []any{}, false)})},
		n:    len(pieces),
		content: func(i int) []byte {
			return event("response.output_text.delta", i+1, map[string]any{
				"item_id": msgID, "output_index": 0, "content_index": 0, "delta": pieces[i],
			})
		},
		tail: [][]byte{event("response.completed", len(pieces)+1, map[string]any{"response": response("completed", done, true)})},
		endless: []byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"" +
			msgID + "\",\"delta\":\""),
	})
}

package translate

import (
	"bytes"
	"encoding/json"
	"strings"
)

// An OpenAI Responses request (POST /v1/responses) as read for an
// Anthropic-family target (DESIGN.md §14).

// respItem is every input item shape read: a message (with or without
// "type"), a function call, a function call's output; anything else is
// named by its type.
type respItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	// EncryptedContent: a reasoning item's, hopgate's own (reasoning.go).
	EncryptedContent string `json:"encrypted_content"`
}

// respPart is every content part of an input message or a function
// call's output.
type respPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL string `json:"image_url"`
	FileID   string `json:"file_id"`
	FileData string `json:"file_data"`
	FileURL  string `json:"file_url"`
	Filename string `json:"filename"`
	Detail   string `json:"detail"`
}

type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      json.RawMessage `json:"strict"`
}

// anRespRequest is the Messages request of a Responses client: the chat
// translation's shape plus extended thinking.
type anRespRequest struct {
	anRequest
	Thinking *anThinking `json:"thinking,omitempty"`
	// The client's sampling, which thinking set aside.
	temperature, topP *float64
}

type anThinking struct {
	Type         string `json:"type"` // enabled
	BudgetTokens int64  `json:"budget_tokens"`
}

// ResponsesOptions says what the Anthropic-family target of a Responses
// request needs: the chat translation's options, and whether the upstream
// model takes extended thinking (ThinkingAllowed).
type ResponsesOptions struct {
	ToMessagesOptions
	Thinking bool
	// Replay is the hop's ReplayKey: reasoning items hopgate wrote for
	// this channel and model go back as their thinking blocks.
	Replay string
}

// nativeOnlyTools are the Responses API's built-in (hosted) tools: OpenAI
// runs them, and an Anthropic model has nothing to call.
func nativeOnlyTool(typ string) bool {
	switch typ {
	case "", "function":
		return false
	}
	return true
}

// nativeOnlyItem: input items that are the output of a hosted tool, or a
// reference to a stored item; only the family that ran or stored them can
// take them back.
func nativeOnlyItem(typ string) bool {
	switch typ {
	case "", "message", "function_call", "function_call_output", "reasoning":
		return false
	}
	return true
}

// ResponsesNativeOnly reports the first field of a Responses request that
// only the OpenAI family can serve — state kept by OpenAI
// (previous_response_id, conversation, a stored prompt, background, an
// item_reference or a file_id) or a hosted tool (web_search, file_search,
// code_interpreter, computer_use, …) — as the JSON path DESIGN §14's 400
// names, or "" when an Anthropic-family entry can serve it. store is not
// one: a translated answer is simply not stored (and says "store": false).
// It reads only what that decision needs; a body that is not a JSON
// object answers "" (the translation refuses it with its own error).
func ResponsesNativeOnly(body []byte) string {
	// Top-level keys are matched exactly, as the translation matches them
	// (encoding/json's struct decoding would also take "Background").
	top, err := decodeObject(body)
	if err != nil {
		return ""
	}
	var background *bool
	if json.Unmarshal(top["background"], &background) != nil {
		background = nil
	}
	if p := nativeOnlyTop(top["previous_response_id"], top["conversation"], top["prompt"], background); p != "" {
		return p
	}
	var tools []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(top["tools"], &tools) == nil {
		for i, t := range tools {
			if nativeOnlyTool(t.Type) {
				return idx("tools", i) + ".type"
			}
		}
	}
	if p := nativeOnlyChoice(top["tool_choice"]); p != "" {
		return p
	}
	var items []respItem
	if v := top["input"]; isNull(v) || bytes.TrimSpace(v)[0] != '[' || json.Unmarshal(v, &items) != nil {
		return ""
	}
	for i, it := range items {
		p := idx("input", i)
		var parts json.RawMessage
		switch {
		case nativeOnlyItem(it.Type):
			return p + ".type"
		case it.Type == "function_call_output":
			parts, p = it.Output, p+".output"
		case it.Role == "user" && (it.Type == "" || it.Type == "message"):
			parts, p = it.Content, p+".content"
		}
		if fp := nativeOnlyFile(parts, p); fp != "" {
			return fp
		}
	}
	return ""
}

// nativeOnlyFile: an input_image or input_file naming a file stored at
// OpenAI (file_id), as respUserBlock refuses it.
func nativeOnlyFile(v json.RawMessage, param string) string {
	var parts []respPart
	if isNull(v) || bytes.TrimSpace(v)[0] != '[' || json.Unmarshal(v, &parts) != nil {
		return ""
	}
	for j, p := range parts {
		if (p.Type == "input_image" || p.Type == "input_file") && p.FileID != "" {
			return idx(param, j) + ".file_id"
		}
	}
	return ""
}

func nativeOnlyTop(prev, conv, prompt json.RawMessage, background *bool) string {
	switch {
	case !isNull(prev) && string(bytes.TrimSpace(prev)) != `""`:
		return "previous_response_id"
	case !isNull(conv) && string(bytes.TrimSpace(conv)) != `""`:
		return "conversation"
	case !isNull(prompt):
		return "prompt"
	case background != nil && *background:
		return "background"
	}
	return ""
}

// nativeOnlyChoice: a tool_choice naming a hosted tool ({"type":
// "web_search_preview"}, {"type": "mcp", …}) or allowed_tools.
func nativeOnlyChoice(v json.RawMessage) string {
	if isNull(v) || bytes.TrimSpace(v)[0] != '{' {
		return ""
	}
	var o struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(v, &o) == nil && o.Type != "function" {
		return "tool_choice.type"
	}
	return ""
}

func nativeOnlyError(param string) *Error {
	e := unsupported(param, param+" is served only by OpenAI-family channels (state kept by OpenAI, or a tool OpenAI runs): this model's provider cannot serve it")
	e.native = true
	return e
}

// ThinkingAllowed reports whether an Anthropic model id takes extended
// thinking: every Claude model from 3.7 on does, the older ones (Claude 2,
// Instant, the Claude 3 and 3.5 families) refuse the field. The id may be
// a Bedrock one ("us.anthropic.claude-3-5-sonnet-20241022-v2:0") or a
// Vertex one ("claude-3-5-haiku@20241022").
func ThinkingAllowed(model string) bool {
	m := strings.ToLower(model)
	for _, old := range [...]string{"claude-2", "claude-instant", "claude-v2", "claude-3-haiku", "claude-3-sonnet", "claude-3-opus", "claude-3-5-"} {
		if strings.Contains(m, old) {
			return false
		}
	}
	return true
}

// Thinking budgets per reasoning.effort. Anthropic's minimum is 1024 and
// the budget must stay below max_tokens: a budget that does not fit is cut
// to half of max_tokens, and below the minimum thinking is left off.
var thinkingBudgets = map[string]int64{"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768}

const minThinkingBudget = 1024

// ResponsesToMessages translates an OpenAI Responses request into an
// Anthropic Messages request: instructions and system or developer input
// become "system", input messages and function calls become alternating
// turns (function_call → tool_use, function_call_output → tool_result),
// function tools and tool_choice carry over, text.format json_schema
// becomes output_config.format and reasoning becomes extended thinking
// where the model takes it. A feature only the OpenAI family can serve is
// refused (ResponsesNativeOnly's field, ErrUnsupported); fields that do not
// change the answer are dropped and named.
func ResponsesToMessages(body []byte, opt ResponsesOptions) (Request, error) {
	top, err := decodeObject(body)
	if err != nil {
		return Request{}, err
	}
	var (
		out      = anRespRequest{anRequest: anRequest{AnthropicVersion: opt.AnthropicVersion, Model: opt.Model}}
		res      Request
		drop     = dropped{}
		maxOut   *int64
		parallel *bool
		input    json.RawMessage
		instr    string
		choice   json.RawMessage
		textCfg  json.RawMessage
		reason   json.RawMessage
		tools    []respTool
	)
	var prev, conv, prompt json.RawMessage
	var background *bool
	for _, key := range sortedKeys(top) {
		v := top[key]
		if isNull(v) {
			continue
		}
		var e *Error
		switch key {
		case "model":
			e = field(key, v, &res.Model)
		case "input":
			input = v
		case "instructions":
			e = field(key, v, &instr)
		case "max_output_tokens":
			e = field(key, v, &maxOut)
		case "temperature":
			e = field(key, v, &out.Temperature)
		case "top_p":
			e = field(key, v, &out.TopP)
		case "stream":
			e = field(key, v, &res.Stream)
		case "tools":
			e = field(key, v, &tools)
		case "tool_choice":
			choice = v
		case "parallel_tool_calls":
			e = field(key, v, &parallel)
		case "text":
			textCfg = v
		case "reasoning":
			reason = v
		case "include":
			// Asks only for more in the answer: reasoning.encrypted_content
			// is the one an Anthropic model's answer can carry.
			res.EncryptedReasoning = wantsEncryptedReasoning(v)
			drop.add(key)
		case "previous_response_id":
			prev = v
		case "conversation":
			conv = v
		case "prompt":
			prompt = v
		case "background":
			e = field(key, v, &background)
		case "store":
			// Responses stores by default; a translated answer is not
			// stored, which changes nothing in it (it says "store": false).
			var s bool
			if e = field(key, v, &s); e == nil && s {
				drop.add(key)
			}
		default:
			// metadata, user, safety_identifier, prompt_cache_key,
			// service_tier, truncation, top_logprobs,
			// max_tool_calls, stream_options: nothing in the answer
			// depends on them for an Anthropic model.
			drop.add(key)
		}
		if e != nil {
			return Request{}, e
		}
	}
	if p := nativeOnlyTop(prev, conv, prompt, background); p != "" {
		return Request{}, nativeOnlyError(p)
	}
	out.Stream = res.Stream

	switch {
	case maxOut != nil:
		out.MaxTokens = *maxOut
	case opt.MaxTokensDefault > 0:
		out.MaxTokens = opt.MaxTokensDefault
	default:
		return Request{}, invalid(CodeMaxTokensRequired, "max_output_tokens",
			"max_output_tokens is required by this model's provider and the model has no max_tokens_default")
	}
	if out.MaxTokens < 1 {
		return Request{}, invalid(CodeInvalidRequest, "max_output_tokens", "max_output_tokens must be at least 1")
	}
	samplingToMessages(&out.anRequest, drop)
	if instr != "" {
		out.System = append(out.System, anBlock{Type: "text", Text: instr})
	}
	if err := convertResponsesInput(input, opt, &out.anRequest, drop); err != nil {
		return Request{}, err
	}
	if err := convertResponsesTools(tools, choice, parallel, &out.anRequest, drop); err != nil {
		return Request{}, err
	}
	if err := convertTextFormat(textCfg, &out.anRequest, drop); err != nil {
		return Request{}, err
	}
	convertReasoning(reason, opt.Thinking, &out, drop)
	if out.Thinking != nil && !thinkingContinues(out.Messages) {
		// The tool loop's assistant turn has no thinking block to replay
		// (the client did not keep encrypted_content, or another channel
		// wrote it): Anthropic refuses thinking on such a request, so the
		// loop goes on without it.
		thinkingOff(&out, drop)
	}
	if out.Thinking == nil && stripThinking(&out.anRequest) {
		drop.add("input[].reasoning")
	}
	res.IncludeUsage = res.Stream
	res.Body = marshal(out)
	res.Dropped = drop.list()
	return res, nil
}

// convertResponsesInput turns "input" (a string, or a list of items) into
// system blocks and alternating turns.
func convertResponsesInput(v json.RawMessage, ropt ResponsesOptions, out *anRequest, drop dropped) *Error {
	opt := ropt.ToMessagesOptions
	if isNull(v) {
		return invalid(CodeInvalidRequest, "input", "input is required")
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" {
			return invalid(CodeInvalidRequest, "input", "input must not be empty")
		}
		out.Messages = append(out.Messages, anMessage{Role: "user", Content: []anBlock{{Type: "text", Text: s}}})
		return nil
	}
	var items []respItem
	if err := json.Unmarshal(v, &items); err != nil {
		return invalid(CodeInvalidRequest, "input", "input must be a string or an array of input items")
	}
	for i, it := range items {
		p := idx("input", i)
		var blocks []anBlock
		role := "user"
		switch it.Type {
		case "", "message":
			parts, err := respParts(it.Content, p+".content")
			if err != nil {
				return err
			}
			switch it.Role {
			case "system", "developer":
				for j, part := range parts {
					if part.Type != "input_text" && part.Type != "text" {
						return invalid(CodeInvalidRequest, idx(p+".content", j), "system content must be text")
					}
					if part.Text != "" {
						out.System = append(out.System, anBlock{Type: "text", Text: part.Text})
					}
				}
				continue
			case "user":
				for j, part := range parts {
					b, err := respUserBlock(part, idx(p+".content", j), opt, drop)
					if err != nil {
						return err
					}
					if b != nil {
						blocks = append(blocks, *b)
					}
				}
			case "assistant":
				role = "assistant"
				for j, part := range parts {
					switch part.Type {
					case "output_text", "input_text", "text":
						if part.Text != "" {
							blocks = append(blocks, anBlock{Type: "text", Text: part.Text})
						}
					case "refusal":
						if part.Refusal != "" {
							blocks = append(blocks, anBlock{Type: "text", Text: part.Refusal})
						}
					default:
						return invalid(CodeInvalidRequest, idx(p+".content", j)+".type", "assistant content must be output_text or refusal")
					}
				}
			default:
				return invalid(CodeInvalidRequest, p+".role", "unknown role "+strconvQuote(it.Role))
			}
		case "function_call":
			role = "assistant"
			if it.CallID == "" || it.Name == "" {
				return invalid(CodeInvalidRequest, p, "a function_call item needs call_id and name")
			}
			in, err := toolArguments(it.Arguments, p+".arguments")
			if err != nil {
				return err
			}
			blocks = append(blocks, anBlock{Type: "tool_use", ID: it.CallID, Name: it.Name, Input: in})
		case "function_call_output":
			if it.CallID == "" {
				return invalid(CodeInvalidRequest, p+".call_id", "a function_call_output item needs call_id")
			}
			b := anBlock{Type: "tool_result", ToolUseID: it.CallID}
			content, err := respToolOutput(it.Output, p+".output", opt, drop)
			if err != nil {
				return err
			}
			if len(content) > 0 {
				b.Content = content
			}
			blocks = append(blocks, b)
		case "reasoning":
			// Only a thinking block written by this hop's channel and
			// model goes back; thinking never crosses (reasoning.go).
			t, sig, ok := decodeThinking(ropt.Replay, it.EncryptedContent)
			if !ok {
				drop.add("input[].reasoning")
				continue
			}
			role = "assistant"
			blocks = append(blocks, anBlock{Type: "thinking", Thinking: &t, Signature: sig})
		default:
			return nativeOnlyError(p + ".type")
		}
		addTurn(out, drop, "input", role, blocks)
	}
	return endTurns(out, drop, "input", "item")
}

// trimPrefill: a final assistant turn is a prefill, which Anthropic refuses
// when it ends in whitespace.
func trimPrefill(out *anRequest, drop dropped, name string) {
	last := &out.Messages[len(out.Messages)-1]
	if last.Role != "assistant" {
		return
	}
	b := &last.Content[len(last.Content)-1]
	if b.Type != "text" {
		return
	}
	if t := strings.TrimRight(b.Text, " \t\r\n"); t != b.Text {
		drop.add(name)
		b.Text = t
		if t == "" {
			last.Content = last.Content[:len(last.Content)-1]
			if len(last.Content) == 0 {
				out.Messages = out.Messages[:len(out.Messages)-1]
			}
		}
	}
}

// respParts reads a message's content: a string is one input_text part.
func respParts(v json.RawMessage, param string) ([]respPart, *Error) {
	return contentParts(v, param, func(s string) respPart { return respPart{Type: "input_text", Text: s} })
}

func respUserBlock(part respPart, param string, opt ToMessagesOptions, drop dropped) (*anBlock, *Error) {
	switch part.Type {
	case "input_text", "text":
		if part.Text == "" {
			return nil, nil
		}
		return &anBlock{Type: "text", Text: part.Text}, nil
	case "input_image":
		if part.FileID != "" {
			return nil, nativeOnlyError(param + ".file_id")
		}
		if part.ImageURL == "" {
			return nil, invalid(CodeInvalidRequest, param+".image_url", "an input_image needs image_url")
		}
		if part.Detail != "" && part.Detail != "auto" {
			drop.add("input[].content[].detail")
		}
		src, err := imageSource(part.ImageURL, opt.Base64ImagesOnly, param+".image_url")
		if err != nil {
			return nil, err
		}
		return &anBlock{Type: "image", Source: src}, nil
	case "input_file":
		switch {
		case part.FileID != "":
			return nil, nativeOnlyError(param + ".file_id")
		case part.FileData != "":
			mt, data, ok := parseDataURL(part.FileData)
			if !ok && strings.HasSuffix(strings.ToLower(part.Filename), ".pdf") {
				mt, data, ok = "application/pdf", part.FileData, true // bare base64, named as a PDF
			}
			if !ok || mt != "application/pdf" {
				return nil, unsupported(param+".file_data", "only PDF files (data:application/pdf;base64,…) can be translated")
			}
			return &anBlock{Type: "document", Source: &anSource{Type: "base64", MediaType: mt, Data: data}}, nil
		case part.FileURL != "":
			if opt.Base64ImagesOnly {
				return nil, invalid(CodeImageURLNotSupported, param+".file_url",
					"this model's provider accepts only inline files: send the file as file_data")
			}
			return &anBlock{Type: "document", Source: &anSource{Type: "url", URL: part.FileURL}}, nil
		}
		return nil, invalid(CodeInvalidRequest, param, "an input_file needs file_data or file_url")
	case "input_audio":
		return nil, unsupported(param, "audio input is not supported by Anthropic models")
	default:
		return nil, invalid(CodeInvalidRequest, param+".type", "unknown content part type "+strconvQuote(part.Type))
	}
}

// respToolOutput is a function_call_output's output as tool_result
// content: a string is one text block; a list of parts may hold images.
func respToolOutput(v json.RawMessage, param string, opt ToMessagesOptions, drop dropped) ([]anBlock, *Error) {
	parts, err := respParts(v, param)
	if err != nil {
		return nil, err
	}
	var out []anBlock
	for j, part := range parts {
		b, err := respUserBlock(part, idx(param, j), opt, drop)
		if err != nil {
			return nil, err
		}
		if b != nil {
			out = append(out, *b)
		}
	}
	return out, nil
}

func convertResponsesTools(tools []respTool, choice json.RawMessage, parallel *bool, out *anRequest, drop dropped) *Error {
	for i, t := range tools {
		p := idx("tools", i)
		if nativeOnlyTool(t.Type) {
			return nativeOnlyError(p + ".type")
		}
		if t.Name == "" {
			return invalid(CodeInvalidRequest, p+".name", "a function tool needs a name")
		}
		schema, err := toolSchema(t.Parameters, p+".parameters")
		if err != nil {
			return err
		}
		if !isNull(t.Strict) {
			drop.add("tools[].strict")
		}
		out.Tools = append(out.Tools, anTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if !isNull(choice) {
		if p := nativeOnlyChoice(choice); p != "" {
			return nativeOnlyError(p)
		}
		tc, err := respToolChoice(choice)
		if err != nil {
			return err
		}
		out.ToolChoice = tc
	}
	finishToolChoice(parallel, out, drop)
	return nil
}

// toolSchema is a function's parameters as Anthropic's input_schema.
func toolSchema(v json.RawMessage, param string) (json.RawMessage, *Error) {
	if isNull(v) {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil || bytes.TrimSpace(v)[0] != '{' {
		return nil, invalid(CodeInvalidRequest, param, "parameters must be a JSON Schema object")
	}
	// OpenAI takes {} (or a schema without "type") for a function
	// without parameters; Anthropic's input_schema is an object schema
	// with its type, as its SDKs always send it.
	top, err := decodeObject(b.Bytes())
	if err != nil {
		return nil, invalid(CodeInvalidRequest, param, "parameters must be a JSON Schema object")
	}
	if _, ok := top["type"]; !ok {
		if len(top) == 0 {
			return json.RawMessage(`{"type":"object","properties":{}}`), nil
		}
		return append([]byte(`{"type":"object",`), b.Bytes()[1:]...), nil
	}
	return b.Bytes(), nil
}

// respToolChoice: "auto", "none", "required", or {"type":"function",
// "name":…} (Responses names the function at the top level).
func respToolChoice(v json.RawMessage) (*anToolChoice, *Error) {
	if tc, ok, err := toolChoiceWord(v); ok {
		return tc, err
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(v, &o) != nil || o.Name == "" {
		return nil, invalid(CodeInvalidRequest, "tool_choice", "a function tool_choice needs a name")
	}
	return &anToolChoice{Type: "tool", Name: o.Name}, nil
}

// convertTextFormat: text.format json_schema → output_config.format;
// json_object has no Anthropic form (structured outputs need a schema),
// and returning prose to a client that parses JSON would change the
// answer. text.verbosity is dropped.
func convertTextFormat(v json.RawMessage, out *anRequest, drop dropped) *Error {
	if isNull(v) {
		return nil
	}
	var t struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
			Name   string          `json:"name"`
			Strict json.RawMessage `json:"strict"`
		} `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	}
	if json.Unmarshal(v, &t) != nil {
		return invalid(CodeInvalidRequest, "text", "text must be an object")
	}
	if !isNull(t.Verbosity) {
		drop.add("text.verbosity")
	}
	if t.Format == nil {
		return nil
	}
	switch t.Format.Type {
	case "", "text":
		return nil
	case "json_schema":
		var b bytes.Buffer
		if isNull(t.Format.Schema) || json.Compact(&b, t.Format.Schema) != nil || b.Bytes()[0] != '{' {
			return invalid(CodeInvalidRequest, "text.format.schema", "a json_schema text format needs a schema object")
		}
		out.OutputConfig = &anOutputConfig{Format: &anOutputFormat{Type: "json_schema", Schema: b.Bytes()}}
		return nil
	}
	return unsupported("text.format.type", "text.format "+strconvQuote(t.Format.Type)+" cannot be translated: use json_schema")
}

// convertReasoning: reasoning.effort → extended thinking with a budget,
// where the model takes it and the request allows it (a forced tool
// choice and a changed temperature or top_p do not go with thinking at
// Anthropic). Otherwise the answer is the same without the model's
// visible reasoning, and reasoning is named as dropped.
func convertReasoning(v json.RawMessage, allowed bool, out *anRespRequest, drop dropped) {
	if isNull(v) {
		return
	}
	var r struct {
		Effort  string          `json:"effort"`
		Summary json.RawMessage `json:"summary"`
	}
	if json.Unmarshal(v, &r) != nil {
		drop.add("reasoning")
		return
	}
	if !isNull(r.Summary) {
		drop.add("reasoning.summary")
	}
	budget, ok := thinkingBudgets[r.Effort]
	if r.Effort == "" || r.Effort == "none" || r.Effort == "minimal" {
		return // no thinking asked for
	}
	if !ok {
		budget = thinkingBudgets["medium"]
	}
	if budget >= out.MaxTokens {
		budget = out.MaxTokens / 2
	}
	forced := out.ToolChoice != nil && (out.ToolChoice.Type == "any" || out.ToolChoice.Type == "tool")
	if !allowed || budget < minThinkingBudget || forced {
		drop.add("reasoning")
		return
	}
	out.Thinking = &anThinking{Type: "enabled", BudgetTokens: budget}
	out.temperature, out.topP = out.Temperature, out.TopP
	if out.Temperature != nil {
		out.Temperature = nil
		drop.add("temperature")
	}
	if out.TopP != nil {
		out.TopP = nil
		drop.add("top_p")
	}
}

// thinkingOff undoes convertReasoning's thinking: reasoning is dropped,
// temperature and top_p are the client's again.
func thinkingOff(out *anRespRequest, drop dropped) {
	out.Thinking = nil
	drop.add("reasoning")
	if out.temperature != nil {
		out.Temperature = out.temperature
		drop.remove("temperature")
	}
	if out.topP != nil {
		out.TopP = out.topP
		drop.remove("top_p")
	}
}

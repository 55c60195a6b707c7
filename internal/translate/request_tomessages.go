package translate

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// ToMessagesOptions says what the Anthropic-family target needs.
type ToMessagesOptions struct {
	// Model is the upstream model sent as "model". Empty omits the field:
	// Bedrock and Vertex take the model in the URL.
	Model string
	// AnthropicVersion is the body's "anthropic_version":
	// "bedrock-2023-05-31" (Bedrock), "vertex-2023-10-16" (Vertex), or ""
	// for the direct API, which takes the version as a header.
	AnthropicVersion string
	// MaxTokensDefault is the model's configured max_tokens_default, sent
	// when the client gives no max_tokens. Anthropic requires the field;
	// with no default and none given the request is refused, never filled
	// with a silently small constant. 0 means none.
	MaxTokensDefault int64
	// Base64ImagesOnly: the target takes only base64 images (Bedrock,
	// Vertex); an image URL is then a client error, never a silent drop.
	Base64ImagesOnly bool
}

// Anthropic request shapes, in the field order the goldens show.
type anRequest struct {
	AnthropicVersion string          `json:"anthropic_version,omitempty"`
	Model            string          `json:"model,omitempty"`
	MaxTokens        int64           `json:"max_tokens"`
	System           []anBlock       `json:"system,omitempty"`
	Messages         []anMessage     `json:"messages"`
	StopSequences    []string        `json:"stop_sequences,omitempty"`
	Temperature      *float64        `json:"temperature,omitempty"`
	TopP             *float64        `json:"top_p,omitempty"`
	Stream           bool            `json:"stream,omitempty"`
	Tools            []anTool        `json:"tools,omitempty"`
	ToolChoice       *anToolChoice   `json:"tool_choice,omitempty"`
	Metadata         *anMetadata     `json:"metadata,omitempty"`
	OutputConfig     *anOutputConfig `json:"output_config,omitempty"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

// anBlock is every content block hopgate writes: text, image, document,
// tool_use, tool_result.
type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Source    *anSource       `json:"source,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   any             `json:"content,omitempty"` // tool_result: string or []anBlock
	IsError   bool            `json:"is_error,omitempty"`
	// A thinking block replayed to the channel that wrote it (reasoning.go).
	Thinking  *string `json:"thinking,omitempty"`
	Signature string  `json:"signature,omitempty"`
}

type anSource struct {
	Type      string `json:"type"` // base64 | url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anToolChoice struct {
	Type                   string `json:"type"` // auto | any | tool | none
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

type anMetadata struct {
	UserID string `json:"user_id"`
}

type anOutputConfig struct {
	Format *anOutputFormat `json:"format,omitempty"`
}

type anOutputFormat struct {
	Type   string          `json:"type"` // json_schema
	Schema json.RawMessage `json:"schema"`
}

// OpenAI request shapes as read.
type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Name         json.RawMessage `json:"name"`
	ToolCalls    []chatToolCall  `json:"tool_calls"`
	ToolCallID   string          `json:"tool_call_id"`
	Refusal      *string         `json:"refusal"`
	FunctionCall json.RawMessage `json:"function_call"`
	Audio        json.RawMessage `json:"audio"`
	// Reasoning of OpenAI-compatible servers (DeepSeek, vLLM, OpenRouter):
	// never sent to the other family.
	ReasoningContent json.RawMessage `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ReasoningDetails json.RawMessage `json:"reasoning_details"`
	ThinkingBlocks   json.RawMessage `json:"thinking_blocks"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
	File *struct {
		FileData string `json:"file_data"`
		FileID   string `json:"file_id"`
	} `json:"file"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      json.RawMessage `json:"strict"`
	} `json:"function"`
}

// ChatToMessages translates an OpenAI Chat Completions request into an
// Anthropic Messages request: system and developer messages become
// "system", turns are merged per role as Anthropic requires, tool results
// become tool_result blocks in a user turn, and thinking never crosses.
func ChatToMessages(body []byte, opt ToMessagesOptions) (Request, error) {
	top, err := decodeObject(body)
	if err != nil {
		return Request{}, err
	}
	var (
		out  = anRequest{AnthropicVersion: opt.AnthropicVersion, Model: opt.Model}
		res  Request
		drop = dropped{}
		msgs []chatMessage
	)
	var maxTokens, maxCompletion *int64
	var parallel *bool
	var toolChoice, responseFormat json.RawMessage
	var tools []chatTool
	for _, key := range sortedKeys(top) {
		v := top[key]
		if isNull(v) {
			continue
		}
		var e *Error
		switch key {
		case "model":
			e = field(key, v, &res.Model)
		case "messages":
			e = field(key, v, &msgs)
		case "max_tokens":
			e = field(key, v, &maxTokens)
		case "max_completion_tokens":
			e = field(key, v, &maxCompletion)
		case "temperature":
			e = field(key, v, &out.Temperature)
		case "top_p":
			e = field(key, v, &out.TopP)
		case "stop":
			e = stopSequences(v, &out.StopSequences)
		case "stream":
			e = field(key, v, &res.Stream)
		case "stream_options":
			var so struct {
				IncludeUsage bool `json:"include_usage"`
			}
			e = field(key, v, &so)
			res.IncludeUsage = so.IncludeUsage
		case "tools":
			e = field(key, v, &tools)
		case "tool_choice":
			toolChoice = v
		case "parallel_tool_calls":
			e = field(key, v, &parallel)
		case "user":
			var u string
			if e = field(key, v, &u); e == nil && u != "" {
				out.Metadata = &anMetadata{UserID: u}
			}
		case "response_format":
			responseFormat = v
		case "n":
			var n int64
			if e = field(key, v, &n); e == nil && n > 1 {
				e = unsupported(key, "n > 1 is not supported by Anthropic models")
			}
		case "modalities":
			var m []string
			if e = field(key, v, &m); e == nil {
				for _, s := range m {
					if s != "text" {
						e = unsupported(key, "only text output is supported by Anthropic models")
					}
				}
			}
		case "audio":
			e = unsupported(key, "audio output is not supported by Anthropic models")
		case "functions", "function_call":
			e = unsupported(key, "the legacy functions API is not translated: use tools and tool_choice")
		default:
			// seed, penalties, logit_bias, logprobs, service_tier, store,
			// metadata, reasoning_effort, prompt_cache_key, …: no
			// Anthropic equivalent, the answer keeps its meaning.
			drop.add(key)
		}
		if e != nil {
			return Request{}, e
		}
	}
	if !res.Stream {
		res.IncludeUsage = false
	}
	out.Stream = res.Stream

	switch {
	case maxCompletion != nil:
		out.MaxTokens = *maxCompletion
		if maxTokens != nil {
			drop.add("max_tokens") // max_completion_tokens wins, as at OpenAI
		}
	case maxTokens != nil:
		out.MaxTokens = *maxTokens
	case opt.MaxTokensDefault > 0:
		out.MaxTokens = opt.MaxTokensDefault
	default:
		return Request{}, invalid(CodeMaxTokensRequired, "max_tokens",
			"max_tokens is required by this model's provider and the model has no max_tokens_default")
	}
	if out.MaxTokens < 1 {
		return Request{}, invalid(CodeInvalidRequest, "max_tokens", "max_tokens must be at least 1")
	}
	samplingToMessages(&out, drop)

	if len(msgs) == 0 {
		return Request{}, invalid(CodeInvalidRequest, "messages", "messages must be a non-empty array")
	}
	if err := convertChatMessages(msgs, opt, &out, drop); err != nil {
		return Request{}, err
	}
	if err := convertChatTools(tools, toolChoice, parallel, &out, drop); err != nil {
		return Request{}, err
	}
	if err := convertResponseFormat(responseFormat, &out); err != nil {
		return Request{}, err
	}
	res.Body = marshal(out)
	res.Dropped = drop.list()
	return res, nil
}

// samplingToMessages fits OpenAI's temperature and top_p to Anthropic's.
func samplingToMessages(out *anRequest, drop dropped) {
	if out.Temperature != nil && *out.Temperature > 1 {
		// Anthropic's range is 0..1, OpenAI's 0..2: the most random
		// setting Anthropic has is the closest meaning.
		one := 1.0
		out.Temperature = &one
		drop.add("temperature>1")
	}
	if out.Temperature != nil && out.TopP != nil {
		// Recent Claude models refuse both at once; OpenAI advises one.
		out.TopP = nil
		drop.add("top_p")
	}
}

func stopSequences(v json.RawMessage, dst *[]string) *Error {
	var one string
	if json.Unmarshal(v, &one) == nil {
		if one != "" {
			*dst = []string{one}
		}
		return nil
	}
	var many []string
	if err := json.Unmarshal(v, &many); err != nil {
		return invalid(CodeInvalidRequest, "stop", "stop must be a string or an array of strings")
	}
	for _, s := range many {
		if s != "" {
			*dst = append(*dst, s)
		}
	}
	return nil
}

func convertChatMessages(msgs []chatMessage, opt ToMessagesOptions, out *anRequest, drop dropped) *Error {
	for i, m := range msgs {
		p := idx("messages", i)
		if !isNull(m.Name) {
			drop.add("messages[].name")
		}
		if !isNull(m.ReasoningContent) || !isNull(m.Reasoning) || !isNull(m.ReasoningDetails) || !isNull(m.ThinkingBlocks) {
			drop.add("messages[].reasoning") // thinking never crosses families
		}
		if !isNull(m.Audio) {
			drop.add("messages[].audio")
		}
		var blocks []anBlock
		role := m.Role
		switch m.Role {
		case "system", "developer":
			parts, err := chatParts(m.Content, p+".content")
			if err != nil {
				return err
			}
			for j, part := range parts {
				if part.Type != "text" {
					return invalid(CodeInvalidRequest, idx(p+".content", j), "system content must be text")
				}
				if part.Text != "" {
					out.System = append(out.System, anBlock{Type: "text", Text: part.Text})
				}
			}
			continue
		case "user":
			parts, err := chatParts(m.Content, p+".content")
			if err != nil {
				return err
			}
			for j, part := range parts {
				b, err := userBlock(part, idx(p+".content", j), opt, drop)
				if err != nil {
					return err
				}
				if b != nil {
					blocks = append(blocks, *b)
				}
			}
		case "assistant":
			if !isNull(m.FunctionCall) {
				return unsupported(p+".function_call", "the legacy functions API is not translated: use tool_calls")
			}
			parts, err := chatParts(m.Content, p+".content")
			if err != nil {
				return err
			}
			for j, part := range parts {
				switch part.Type {
				case "text":
					if part.Text != "" {
						blocks = append(blocks, anBlock{Type: "text", Text: part.Text})
					}
				case "refusal":
					if part.Refusal != "" {
						blocks = append(blocks, anBlock{Type: "text", Text: part.Refusal})
					}
				default:
					return invalid(CodeInvalidRequest, idx(p+".content", j), "assistant content must be text or refusal")
				}
			}
			if m.Refusal != nil && *m.Refusal != "" && len(parts) == 0 {
				blocks = append(blocks, anBlock{Type: "text", Text: *m.Refusal})
			}
			for j, tc := range m.ToolCalls {
				tp := idx(p+".tool_calls", j)
				if tc.Type != "" && tc.Type != "function" {
					return unsupported(tp+".type", "only function tool calls can be translated")
				}
				input, err := toolArguments(tc.Function.Arguments, tp+".function.arguments")
				if err != nil {
					return err
				}
				blocks = append(blocks, anBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: input})
			}
		case "tool":
			role = "user"
			parts, err := chatParts(m.Content, p+".content")
			if err != nil {
				return err
			}
			var text strings.Builder
			for j, part := range parts {
				if part.Type != "text" {
					return invalid(CodeInvalidRequest, idx(p+".content", j), "tool content must be text")
				}
				text.WriteString(part.Text)
			}
			b := anBlock{Type: "tool_result", ToolUseID: m.ToolCallID}
			if text.Len() > 0 {
				b.Content = []anBlock{{Type: "text", Text: text.String()}}
			}
			blocks = append(blocks, b)
		case "function":
			return unsupported(p+".role", "the legacy functions API is not translated: use tool messages")
		default:
			return invalid(CodeInvalidRequest, p+".role", "unknown role "+strconvQuote(m.Role))
		}
		addTurn(out, drop, "messages", role, blocks)
	}
	return endTurns(out, drop, "messages", "message")
}

// appendTurn adds a turn of role. Anthropic requires alternating roles:
// consecutive turns of one role (several tool results, a tool result then
// the user's text, a message then its function calls) are one turn;
// tool_result blocks stay first, as required.
// addTurn appends blocks as a turn of role, or drops an empty one
// (Anthropic refuses empty turns), listed under field: the one turn rule
// of both translations to Messages (chat messages, Responses input).
func addTurn(out *anRequest, drop dropped, field, role string, blocks []anBlock) {
	if len(blocks) == 0 {
		drop.add(field + "[].empty")
		return
	}
	appendTurn(out, role, blocks)
}

// endTurns checks that field gave at least one turn (of what items it
// holds), and trims a final prefill's trailing whitespace.
func endTurns(out *anRequest, drop dropped, field, item string) *Error {
	if len(out.Messages) == 0 {
		return invalid(CodeInvalidRequest, field, field+" must contain at least one user or assistant "+item+" with content")
	}
	trimPrefill(out, drop, field+"[].content.trailing_whitespace")
	return nil
}

func appendTurn(out *anRequest, role string, blocks []anBlock) {
	if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
		out.Messages[n-1].Content = append(out.Messages[n-1].Content, blocks...)
		return
	}
	out.Messages = append(out.Messages, anMessage{Role: role, Content: blocks})
}

// chatParts reads a content value: a string is one text part.
func chatParts(v json.RawMessage, param string) ([]chatPart, *Error) {
	return contentParts(v, param, func(s string) chatPart { return chatPart{Type: "text", Text: s} })
}

// contentParts reads a content value of either OpenAI API: null or "" is
// none, a string is one text part (text), else an array of parts.
func contentParts[P any](v json.RawMessage, param string, text func(string) P) ([]P, *Error) {
	if isNull(v) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []P{text(s)}, nil
	}
	var parts []P
	if err := json.Unmarshal(v, &parts); err != nil {
		return nil, invalid(CodeInvalidRequest, param, "content must be a string or an array of content parts")
	}
	return parts, nil
}

func userBlock(part chatPart, param string, opt ToMessagesOptions, drop dropped) (*anBlock, *Error) {
	switch part.Type {
	case "text":
		if part.Text == "" {
			return nil, nil
		}
		return &anBlock{Type: "text", Text: part.Text}, nil
	case "image_url":
		if part.ImageURL == nil || part.ImageURL.URL == "" {
			return nil, invalid(CodeInvalidRequest, param+".image_url", "image_url.url is required")
		}
		if part.ImageURL.Detail != "" {
			drop.add("messages[].content[].image_url.detail")
		}
		src, err := imageSource(part.ImageURL.URL, opt.Base64ImagesOnly, param+".image_url.url")
		if err != nil {
			return nil, err
		}
		return &anBlock{Type: "image", Source: src}, nil
	case "file":
		if part.File == nil || part.File.FileData == "" {
			return nil, unsupported(param+".file", "only inline file_data (a base64 PDF data URL) can be translated, not file_id")
		}
		mt, data, ok := parseDataURL(part.File.FileData)
		if !ok || mt != "application/pdf" {
			return nil, unsupported(param+".file.file_data", "only PDF files (data:application/pdf;base64,…) can be translated")
		}
		return &anBlock{Type: "document", Source: &anSource{Type: "base64", MediaType: mt, Data: data}}, nil
	case "input_audio":
		return nil, unsupported(param, "audio input is not supported by Anthropic models")
	default:
		return nil, invalid(CodeInvalidRequest, param+".type", "unknown content part type "+strconvQuote(part.Type))
	}
}

// imageMediaTypes are the image types Anthropic accepts.
var imageMediaTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

func imageSource(url string, base64Only bool, param string) (*anSource, *Error) {
	if strings.HasPrefix(url, "data:") {
		mt, data, ok := parseDataURL(url)
		if !ok {
			return nil, invalid(CodeInvalidRequest, param, "an image data URL must be data:<type>;base64,<data>")
		}
		if !imageMediaTypes[mt] {
			return nil, invalid(CodeInvalidRequest, param, "image type "+strconvQuote(mt)+" is not supported: use jpeg, png, gif or webp")
		}
		return &anSource{Type: "base64", MediaType: mt, Data: data}, nil
	}
	if !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
		return nil, invalid(CodeInvalidRequest, param, "an image must be an http(s) URL or a base64 data URL")
	}
	if base64Only {
		// Bedrock and Vertex take only inline images (DESIGN §8): dropping
		// the image would answer a different question.
		return nil, invalid(CodeImageURLNotSupported, param,
			"this model's provider accepts only base64 images: send the image as a data:image/…;base64 URL")
	}
	return &anSource{Type: "url", URL: url}, nil
}

// parseDataURL splits data:<media type>[;params];base64,<data>.
func parseDataURL(u string) (mediaType, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	if !found || data == "" {
		return "", "", false
	}
	params := strings.Split(meta, ";")
	if params[len(params)-1] != "base64" || len(params) < 2 {
		return "", "", false
	}
	return strings.ToLower(strings.TrimSpace(params[0])), data, true
}

// toolArguments turns a tool call's JSON-string arguments into Anthropic's
// input object.
func toolArguments(args, param string) (json.RawMessage, *Error) {
	t := strings.TrimSpace(args)
	if t == "" {
		return json.RawMessage("{}"), nil
	}
	if t[0] != '{' || !json.Valid([]byte(t)) {
		return nil, invalid(CodeInvalidRequest, param, "tool call arguments must be a JSON object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(t)); err != nil {
		return nil, invalid(CodeInvalidRequest, param, "tool call arguments must be a JSON object")
	}
	return b.Bytes(), nil
}

func convertChatTools(tools []chatTool, choice json.RawMessage, parallel *bool, out *anRequest, drop dropped) *Error {
	for i, t := range tools {
		p := idx("tools", i)
		if t.Type != "" && t.Type != "function" || t.Function == nil {
			return unsupported(p+".type", "only function tools can be translated")
		}
		if t.Function.Name == "" {
			return invalid(CodeInvalidRequest, p+".function.name", "a tool needs a name")
		}
		schema, err := toolSchema(t.Function.Parameters, p+".function.parameters")
		if err != nil {
			return err
		}
		if !isNull(t.Function.Strict) {
			drop.add("tools[].function.strict")
		}
		out.Tools = append(out.Tools, anTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	if !isNull(choice) {
		tc, err := toolChoiceToMessages(choice)
		if err != nil {
			return err
		}
		out.ToolChoice = tc
	}
	finishToolChoice(parallel, out, drop)
	return nil
}

// finishToolChoice applies parallel_tool_calls: false to the choice, and
// drops a choice without tools: Anthropic refuses one, and with no tools
// it means nothing.
func finishToolChoice(parallel *bool, out *anRequest, drop dropped) {
	if parallel != nil && !*parallel {
		if out.ToolChoice == nil {
			out.ToolChoice = &anToolChoice{Type: "auto"}
		}
		if out.ToolChoice.Type != "none" {
			out.ToolChoice.DisableParallelToolUse = true
		}
	}
	if len(out.Tools) == 0 && out.ToolChoice != nil {
		out.ToolChoice = nil
		drop.add("tool_choice")
	}
}

func toolChoiceToMessages(v json.RawMessage) (*anToolChoice, *Error) {
	if tc, ok, err := toolChoiceWord(v); ok {
		return tc, err
	}
	var o struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(v, &o) != nil {
		return nil, invalid(CodeInvalidRequest, "tool_choice", "tool_choice must be a string or an object")
	}
	if o.Type == "function" && o.Function.Name != "" {
		return &anToolChoice{Type: "tool", Name: o.Function.Name}, nil
	}
	return nil, unsupported("tool_choice", "tool_choice of type "+strconvQuote(o.Type)+" cannot be translated")
}

// toolChoiceWord reads a tool_choice given as a string (either OpenAI
// API): auto, none, or required (Anthropic's any); ok false when it is not
// a string.
func toolChoiceWord(v json.RawMessage) (_ *anToolChoice, ok bool, _ *Error) {
	var s string
	if json.Unmarshal(v, &s) != nil {
		return nil, false, nil
	}
	switch s {
	case "auto", "none":
		return &anToolChoice{Type: s}, true, nil
	case "required":
		return &anToolChoice{Type: "any"}, true, nil
	}
	return nil, true, invalid(CodeInvalidRequest, "tool_choice", "tool_choice must be auto, none, required or a named function")
}

func convertResponseFormat(v json.RawMessage, out *anRequest) *Error {
	if isNull(v) {
		return nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if json.Unmarshal(v, &rf) != nil {
		return invalid(CodeInvalidRequest, "response_format", "response_format must be an object")
	}
	switch rf.Type {
	case "", "text":
		return nil
	case "json_schema":
		var b bytes.Buffer
		if isNull(rf.JSONSchema.Schema) || json.Compact(&b, rf.JSONSchema.Schema) != nil || b.Bytes()[0] != '{' {
			return invalid(CodeInvalidRequest, "response_format.json_schema.schema", "a json_schema response format needs a schema object")
		}
		out.OutputConfig = &anOutputConfig{Format: &anOutputFormat{Type: "json_schema", Schema: b.Bytes()}}
		return nil
	default:
		// json_object has no Anthropic equivalent (structured outputs need a
		// schema); dropping it would return prose to a client that parses JSON.
		return unsupported("response_format.type", "response_format "+strconvQuote(rf.Type)+" cannot be translated: use json_schema")
	}
}

func strconvQuote(s string) string { return string(jsonscan.AppendQuote(nil, s)) }

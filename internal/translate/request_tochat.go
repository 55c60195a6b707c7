package translate

import (
	"bytes"
	"encoding/json"
	"strings"
)

// ToChatOptions says what the OpenAI-family target needs.
type ToChatOptions struct {
	// Model is the upstream model sent as "model"; empty keeps the client's.
	Model string
	// LegacyMaxTokens sends the limit as "max_tokens" instead of
	// "max_completion_tokens", for OpenAI-compatible servers that predate
	// it. OpenAI's reasoning models refuse "max_tokens".
	LegacyMaxTokens bool
}

// OpenAI request shapes as written.
type chatRequest struct {
	Model               string             `json:"model,omitempty"`
	Messages            []chatOutMessage   `json:"messages"`
	MaxCompletionTokens *int64             `json:"max_completion_tokens,omitempty"`
	MaxTokens           *int64             `json:"max_tokens,omitempty"`
	Stop                []string           `json:"stop,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	TopP                *float64           `json:"top_p,omitempty"`
	Stream              bool               `json:"stream,omitempty"`
	StreamOptions       *chatStreamOptions `json:"stream_options,omitempty"`
	Tools               []chatOutTool      `json:"tools,omitempty"`
	ToolChoice          any                `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls,omitempty"`
	User                string             `json:"user,omitempty"`
	ResponseFormat      *chatRespFormat    `json:"response_format,omitempty"`
}

type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatOutMessage struct {
	Role       string            `json:"role"`
	Content    any               `json:"content"` // string, []chatOutPart, or null beside tool_calls
	ToolCalls  []chatOutToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
}

type chatOutPart struct {
	Type     string         `json:"type"`
	Text     string         `json:"text,omitempty"`
	ImageURL *chatOutImage  `json:"image_url,omitempty"`
	File     *chatOutFileIn `json:"file,omitempty"`
}

type chatOutImage struct {
	URL string `json:"url"`
}

type chatOutFileIn struct {
	Filename string `json:"filename,omitempty"`
	FileData string `json:"file_data"`
}

type chatOutToolCall struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Function chatOutFunction `json:"function"`
}

type chatOutFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatOutTool struct {
	Type     string         `json:"type"`
	Function chatOutFuncDef `json:"function"`
}

type chatOutFuncDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

type chatNamedChoice struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

type chatRespFormat struct {
	Type       string `json:"type"`
	JSONSchema struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	} `json:"json_schema"`
}

// Anthropic request shapes as read.
type anInMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anInBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	Source       *anInSource     `json:"source"`
	Title        string          `json:"title"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	IsError      bool            `json:"is_error"`
	CacheControl json.RawMessage `json:"cache_control"`
	Citations    json.RawMessage `json:"citations"`
}

type anInSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
	URL       string `json:"url"`
}

type anInTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control"`
	Strict       json.RawMessage `json:"strict"`
}

// MessagesToChat translates an Anthropic Messages request (an Anthropic
// client served by an OpenAI-family channel) into a Chat Completions
// request. A streaming request always asks for usage: Anthropic clients get
// it in message_delta.
func MessagesToChat(body []byte, opt ToChatOptions) (Request, error) {
	top, err := decodeObject(body)
	if err != nil {
		return Request{}, err
	}
	var (
		out        chatRequest
		res        Request
		drop       = dropped{}
		msgs       []anInMessage
		tools      []anInTool
		system     json.RawMessage
		toolChoice json.RawMessage
		maxTokens  *int64
	)
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
		case "system":
			system = v
		case "max_tokens":
			e = field(key, v, &maxTokens)
		case "stop_sequences":
			e = field(key, v, &out.Stop)
			if e == nil && len(out.Stop) > 4 {
				e = unsupported(key, "OpenAI models take at most 4 stop sequences")
			}
		case "temperature":
			e = field(key, v, &out.Temperature)
		case "top_p":
			e = field(key, v, &out.TopP)
		case "stream":
			e = field(key, v, &res.Stream)
		case "tools":
			e = field(key, v, &tools)
		case "tool_choice":
			toolChoice = v
		case "metadata":
			var md struct {
				UserID string `json:"user_id"`
			}
			e = field(key, v, &md)
			out.User = md.UserID
		case "output_config":
			e = outputConfigToChat(v, &out, drop)
		case "mcp_servers", "container":
			e = unsupported(key, key+" is an Anthropic server-side feature that OpenAI models cannot serve")
		case "anthropic_version":
			// Bedrock/Vertex transport field, not a request feature.
		default:
			// top_k, thinking, service_tier, cache_control,
			// context_management, inference_geo, speed, …
			drop.add(key)
		}
		if e != nil {
			return Request{}, e
		}
	}
	if opt.Model != "" {
		out.Model = opt.Model
	} else {
		out.Model = res.Model
	}
	if maxTokens != nil {
		if opt.LegacyMaxTokens {
			out.MaxTokens = maxTokens
		} else {
			out.MaxCompletionTokens = maxTokens
		}
	}
	out.Stream = res.Stream
	if res.Stream {
		out.StreamOptions = &chatStreamOptions{IncludeUsage: true}
		res.IncludeUsage = true
	}
	if e := systemToChat(system, "system", &out, drop); e != nil {
		return Request{}, e
	}
	if len(msgs) == 0 {
		return Request{}, invalid(CodeInvalidRequest, "messages", "messages must be a non-empty array")
	}
	for i, m := range msgs {
		if e := messageToChat(m, idx("messages", i), &out, drop); e != nil {
			return Request{}, e
		}
	}
	if e := toolsToChat(tools, toolChoice, &out, drop); e != nil {
		return Request{}, e
	}
	res.Body = marshal(out)
	res.Dropped = drop.list()
	return res, nil
}

// systemToChat appends a system prompt (the top-level "system", or the
// content of a system-role message at param) as one chat system message.
func systemToChat(v json.RawMessage, param string, out *chatRequest, drop dropped) *Error {
	if isNull(v) {
		return nil
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		var blocks []anInBlock
		if json.Unmarshal(v, &blocks) != nil {
			return invalid(CodeInvalidRequest, param, param+" must be a string or an array of text blocks")
		}
		texts := make([]string, 0, len(blocks))
		for i, b := range blocks {
			if b.Type != "text" {
				return invalid(CodeInvalidRequest, idx(param, i), "system blocks must be text")
			}
			if param == "system" && !isNull(b.CacheControl) {
				drop.add("system[].cache_control") // a message's: messageToChat names them
			}
			if b.Text != "" {
				texts = append(texts, b.Text)
			}
		}
		s = strings.Join(texts, "\n\n")
	}
	if s != "" {
		out.Messages = append(out.Messages, chatOutMessage{Role: "system", Content: s})
	}
	return nil
}

// anContent reads a message content value: a string is one text block.
func anContent(v json.RawMessage, param string) ([]anInBlock, *Error) {
	if isNull(v) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		if s == "" {
			return nil, nil
		}
		return []anInBlock{{Type: "text", Text: s}}, nil
	}
	var blocks []anInBlock
	if json.Unmarshal(v, &blocks) != nil {
		return nil, invalid(CodeInvalidRequest, param, "content must be a string or an array of content blocks")
	}
	return blocks, nil
}

func messageToChat(m anInMessage, p string, out *chatRequest, drop dropped) *Error {
	blocks, err := anContent(m.Content, p+".content")
	if err != nil {
		return err
	}
	for _, b := range blocks {
		if !isNull(b.CacheControl) {
			drop.add("messages[].content[].cache_control")
		}
		if !isNull(b.Citations) {
			drop.add("messages[].content[].citations")
		}
	}
	switch m.Role {
	case "user":
		return userToChat(blocks, p, out, drop)
	case "system":
		// The Messages API takes system-role messages inside messages
		// (Claude Code sends them): a chat system message in place.
		n := len(out.Messages)
		if e := systemToChat(m.Content, p+".content", out, drop); e != nil {
			return e
		}
		if len(out.Messages) == n {
			drop.add("messages[].empty")
		}
		return nil
	case "assistant":
		msg := chatOutMessage{Role: "assistant"}
		var text strings.Builder
		for j, b := range blocks {
			bp := idx(p+".content", j)
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				args := "{}"
				if !isNull(b.Input) {
					var c bytes.Buffer
					if json.Compact(&c, b.Input) != nil {
						return invalid(CodeInvalidRequest, bp+".input", "tool_use input must be a JSON object")
					}
					args = c.String()
				}
				msg.ToolCalls = append(msg.ToolCalls, chatOutToolCall{ID: b.ID, Type: "function",
					Function: chatOutFunction{Name: b.Name, Arguments: args}})
			case "thinking", "redacted_thinking":
				drop.add("messages[].content[].thinking") // never replayed to another family
			default:
				return unsupported(bp+".type", "assistant block "+strconvQuote(b.Type)+" cannot be translated")
			}
		}
		if text.Len() > 0 {
			msg.Content = text.String()
		}
		if msg.Content == nil && len(msg.ToolCalls) == 0 {
			drop.add("messages[].empty")
			return nil
		}
		out.Messages = append(out.Messages, msg)
		return nil
	default:
		return invalid(CodeInvalidRequest, p+".role", "role must be user, assistant or system")
	}
}

// userToChat: tool results become tool messages, which OpenAI wants right
// after the assistant's tool calls, so they come before the turn's other
// content.
func userToChat(blocks []anInBlock, p string, out *chatRequest, drop dropped) *Error {
	var parts []chatOutPart
	var moved []chatOutPart // images from tool results
	for j, b := range blocks {
		bp := idx(p+".content", j)
		switch b.Type {
		case "text":
			if b.Text != "" {
				parts = append(parts, chatOutPart{Type: "text", Text: b.Text})
			}
		case "image", "document":
			part, e := sourceToChat(b, bp)
			if e != nil {
				return e
			}
			parts = append(parts, part)
		case "tool_result":
			if b.IsError {
				drop.add("messages[].content[].is_error")
			}
			inner, e := anContent(b.Content, bp+".content")
			if e != nil {
				return e
			}
			var text strings.Builder
			for k, ib := range inner {
				switch ib.Type {
				case "text":
					text.WriteString(ib.Text)
				case "image", "document":
					// OpenAI tool messages carry text only: the image
					// follows in a user message instead of being lost.
					part, e := sourceToChat(ib, idx(bp+".content", k))
					if e != nil {
						return e
					}
					moved = append(moved, part)
					drop.add("messages[].content[].content[].image")
				default:
					return unsupported(idx(bp+".content", k)+".type", "tool result block "+strconvQuote(ib.Type)+" cannot be translated")
				}
			}
			out.Messages = append(out.Messages, chatOutMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text.String()})
		default:
			return unsupported(bp+".type", "user block "+strconvQuote(b.Type)+" cannot be translated")
		}
	}
	parts = append(moved, parts...)
	switch {
	case len(parts) == 0:
		if len(blocks) == 0 {
			drop.add("messages[].empty")
		}
	case len(parts) == 1 && parts[0].Type == "text":
		out.Messages = append(out.Messages, chatOutMessage{Role: "user", Content: parts[0].Text})
	default:
		out.Messages = append(out.Messages, chatOutMessage{Role: "user", Content: parts})
	}
	return nil
}

func sourceToChat(b anInBlock, p string) (chatOutPart, *Error) {
	s := b.Source
	if s == nil {
		return chatOutPart{}, invalid(CodeInvalidRequest, p+".source", b.Type+" needs a source")
	}
	switch {
	case b.Type == "image" && s.Type == "url" && s.URL != "":
		return chatOutPart{Type: "image_url", ImageURL: &chatOutImage{URL: s.URL}}, nil
	case b.Type == "image" && s.Type == "base64" && s.Data != "":
		return chatOutPart{Type: "image_url", ImageURL: &chatOutImage{URL: "data:" + s.MediaType + ";base64," + s.Data}}, nil
	case b.Type == "document" && s.Type == "base64" && s.MediaType == "application/pdf" && s.Data != "":
		return chatOutPart{Type: "file", File: &chatOutFileIn{Filename: b.Title, FileData: "data:application/pdf;base64," + s.Data}}, nil
	}
	return chatOutPart{}, unsupported(p+".source", b.Type+" source "+strconvQuote(s.Type)+" cannot be translated")
}

func toolsToChat(tools []anInTool, choice json.RawMessage, out *chatRequest, drop dropped) *Error {
	for i, t := range tools {
		p := idx("tools", i)
		if t.Type != "" && t.Type != "custom" {
			return unsupported(p+".type", "Anthropic server tool "+strconvQuote(t.Type)+" cannot be served by an OpenAI model")
		}
		if t.Name == "" {
			return invalid(CodeInvalidRequest, p+".name", "a tool needs a name")
		}
		if !isNull(t.CacheControl) {
			drop.add("tools[].cache_control")
		}
		if !isNull(t.Strict) {
			drop.add("tools[].strict")
		}
		schema := json.RawMessage(`{"type":"object","properties":{}}`)
		if !isNull(t.InputSchema) {
			var b bytes.Buffer
			if json.Compact(&b, t.InputSchema) != nil {
				return invalid(CodeInvalidRequest, p+".input_schema", "input_schema must be a JSON Schema object")
			}
			schema = b.Bytes()
		}
		out.Tools = append(out.Tools, chatOutTool{Type: "function",
			Function: chatOutFuncDef{Name: t.Name, Description: t.Description, Parameters: schema}})
	}
	if isNull(choice) {
		return nil
	}
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if json.Unmarshal(choice, &tc) != nil {
		return invalid(CodeInvalidRequest, "tool_choice", "tool_choice must be an object")
	}
	switch tc.Type {
	case "auto":
		out.ToolChoice = "auto"
	case "any":
		out.ToolChoice = "required"
	case "none":
		out.ToolChoice = "none"
	case "tool":
		if tc.Name == "" {
			return invalid(CodeInvalidRequest, "tool_choice.name", "tool_choice of type tool needs a name")
		}
		n := chatNamedChoice{Type: "function"}
		n.Function.Name = tc.Name
		out.ToolChoice = n
	default:
		return invalid(CodeInvalidRequest, "tool_choice.type", "tool_choice type must be auto, any, tool or none")
	}
	if len(out.Tools) == 0 {
		// OpenAI refuses tool_choice and parallel_tool_calls without tools.
		out.ToolChoice = nil
		drop.add("tool_choice")
		return nil
	}
	if tc.DisableParallelToolUse {
		f := false
		out.ParallelToolCalls = &f
	}
	return nil
}

func outputConfigToChat(v json.RawMessage, out *chatRequest, drop dropped) *Error {
	var oc struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
		Effort json.RawMessage `json:"effort"`
	}
	if json.Unmarshal(v, &oc) != nil {
		return invalid(CodeInvalidRequest, "output_config", "output_config must be an object")
	}
	if !isNull(oc.Effort) {
		drop.add("output_config.effort")
	}
	if oc.Format == nil {
		return nil
	}
	if oc.Format.Type != "json_schema" || isNull(oc.Format.Schema) {
		return unsupported("output_config.format", "only a json_schema output format can be translated")
	}
	var b bytes.Buffer
	if json.Compact(&b, oc.Format.Schema) != nil {
		return invalid(CodeInvalidRequest, "output_config.format.schema", "schema must be a JSON Schema object")
	}
	rf := &chatRespFormat{Type: "json_schema"}
	rf.JSONSchema.Name, rf.JSONSchema.Schema, rf.JSONSchema.Strict = "response", b.Bytes(), true
	out.ResponseFormat = rf
	return nil
}

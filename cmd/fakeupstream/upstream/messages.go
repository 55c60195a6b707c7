package upstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MessagesRequest is an Anthropic Messages request body as the fake decoded
// it (the anthropic, bedrock and vertex dialects). The request log keeps it
// (Request.Anthropic) so a gateway test can check that a translated request
// arrived intact: system prompt, images, tool results, stop sequences,
// max_tokens. A string system prompt, message content or tool_result content
// is normalized to one text block.
type MessagesRequest struct {
	Model            string // "" on Bedrock and Vertex, where the model is in the URL
	AnthropicVersion string // the body field (Bedrock, Vertex); the header is in Request.Header
	AnthropicBeta    []string
	MaxTokens        int // 0 when absent
	System           []ContentBlock
	Messages         []Turn
	StopSequences    []string
	Stream           bool
	Temperature      *float64
	TopP             *float64
	TopK             *int
	Tools            []Tool
	ToolChoice       json.RawMessage
	Thinking         *Thinking
	Metadata         json.RawMessage
	Keys             []string // every top-level key of the body, sorted
}

// Turn is one message of a Messages request.
type Turn struct {
	Role    string
	Content []ContentBlock
}

// ContentBlock is one block of a message, a system prompt or a tool result.
// Only the fields of its Type are set.
type ContentBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`        // text
	Source       *Source         `json:"source,omitempty"`      // image, document
	ID           string          `json:"id,omitempty"`          // tool_use
	Name         string          `json:"name,omitempty"`        // tool_use
	Input        json.RawMessage `json:"input,omitempty"`       // tool_use
	ToolUseID    string          `json:"tool_use_id,omitempty"` // tool_result
	Content      []ContentBlock  `json:"-"`                     // tool_result
	IsError      bool            `json:"is_error,omitempty"`    // tool_result
	Thinking     string          `json:"thinking,omitempty"`    // thinking
	Signature    string          `json:"signature,omitempty"`   // thinking
	Data         string          `json:"data,omitempty"`        // redacted_thinking
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// Source is where an image or document block's bytes are.
type Source struct {
	Type      string `json:"type"` // base64 | url | text
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Tool is one tool declared by a Messages request.
type Tool struct {
	Type         string          `json:"type,omitempty"` // "" or "custom" for client tools
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// Thinking is the extended-thinking request ({"type":"enabled","budget_tokens":N}).
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

// Blocks returns every block of type typ in the messages, tool_result
// contents included, in order.
func (m *MessagesRequest) Blocks(typ string) []ContentBlock {
	var out []ContentBlock
	var walk func([]ContentBlock)
	walk = func(bs []ContentBlock) {
		for _, b := range bs {
			if b.Type == typ {
				out = append(out, b)
			}
			walk(b.Content)
		}
	}
	for _, t := range m.Messages {
		walk(t.Content)
	}
	return out
}

// SystemText is the text of the system prompt's text blocks, concatenated.
func (m *MessagesRequest) SystemText() string {
	var b strings.Builder
	for _, blk := range m.System {
		b.WriteString(blk.Text)
	}
	return b.String()
}

// ThinkingEnabled reports whether the request asks for extended thinking.
func (m *MessagesRequest) ThinkingEnabled() bool {
	return m.Thinking != nil && m.Thinking.Type == "enabled"
}

// blockWire is a content block as sent: content may be a string or blocks.
type blockWire struct {
	ContentBlock
	Content json.RawMessage `json:"content"`
}

type messagesWire struct {
	Model            string          `json:"model"`
	AnthropicVersion string          `json:"anthropic_version"`
	AnthropicBeta    []string        `json:"anthropic_beta"`
	MaxTokens        int             `json:"max_tokens"`
	System           json.RawMessage `json:"system"`
	Messages         []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Tools         []Tool          `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      *Thinking       `json:"thinking"`
	Metadata      json.RawMessage `json:"metadata"`
}

// maxBlockDepth bounds tool_result nesting: the body is untrusted.
const maxBlockDepth = 4

// parseMessagesRequest decodes an Anthropic Messages request body. It fails
// only on bytes that are not a JSON object of the right field types; what
// the API would refuse (a missing max_tokens, a system role in messages, ...)
// is judged later, per dialect.
func parseMessagesRequest(body []byte) (*MessagesRequest, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %v", err)
	}
	var w messagesWire
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("request body: %v", err)
	}
	m := &MessagesRequest{
		Model: w.Model, AnthropicVersion: w.AnthropicVersion, AnthropicBeta: w.AnthropicBeta,
		MaxTokens: w.MaxTokens, StopSequences: w.StopSequences, Stream: w.Stream,
		Temperature: w.Temperature, TopP: w.TopP, TopK: w.TopK, Tools: w.Tools,
		ToolChoice: w.ToolChoice, Thinking: w.Thinking, Metadata: w.Metadata,
	}
	for k := range keys {
		m.Keys = append(m.Keys, k)
	}
	slices.Sort(m.Keys)
	var err error
	if m.System, err = parseBlocks(w.System, 0); err != nil {
		return nil, fmt.Errorf("system: %v", err)
	}
	for i, t := range w.Messages {
		blocks, err := parseBlocks(t.Content, 0)
		if err != nil {
			return nil, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		m.Messages = append(m.Messages, Turn{Role: t.Role, Content: blocks})
	}
	return m, nil
}

// parseBlocks reads a content value: absent, a string (one text block) or a
// list of blocks.
func parseBlocks(raw json.RawMessage, depth int) ([]ContentBlock, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []ContentBlock{{Type: "text", Text: s}}, nil
	}
	if depth >= maxBlockDepth {
		return nil, errors.New("content nested too deep")
	}
	var list []blockWire
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("expected a string or a list of content blocks")
	}
	out := make([]ContentBlock, len(list))
	for i, bw := range list {
		out[i] = bw.ContentBlock
		inner, err := parseBlocks(bw.Content, depth+1)
		if err != nil {
			return nil, fmt.Errorf("%d.content: %v", i, err)
		}
		out[i].Content = inner
	}
	return out, nil
}

// The anthropic_version each cloud requires in the body.
const (
	BedrockAnthropicVersion = "bedrock-2023-05-31"
	VertexAnthropicVersion  = "vertex-2023-10-16"
)

var (
	toolNameRE  = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)
	imageTypes  = []string{"image/jpeg", "image/png", "image/gif", "image/webp"}
	blockTypes  = []string{"text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking", "search_result", "server_tool_use", "web_search_tool_result"}
	errNoTools  = errors.New("fakeupstream: tool-calls needs at least one tool in the request")
	errNoStopSq = errors.New("fakeupstream: stop=stop_sequence needs stop_sequences in the request")
)

// check returns what the API says about a request it refuses, "" when it
// accepts it. The messages are the API's own where they are known, because
// they are what a gateway's tests and its users see. signer is the name
// thinking signatures must have been made with (Options.Name).
func (m *MessagesRequest) check(d Dialect, signer string) string {
	has := func(k string) bool { _, ok := slices.BinarySearch(m.Keys, k); return ok }
	switch d {
	case DialectBedrock:
		switch {
		case !has("anthropic_version"):
			return "Malformed input request: #: required key [anthropic_version] not found, please reformat your input and try again."
		case m.AnthropicVersion != BedrockAnthropicVersion:
			return "Malformed input request: #/anthropic_version: " + m.AnthropicVersion + " is not a valid enum value, please reformat your input and try again."
		case has("model"):
			return "Malformed input request: #: extraneous key [model] is not permitted, please reformat your input and try again."
		case has("stream"):
			return "Malformed input request: #: extraneous key [stream] is not permitted, please reformat your input and try again."
		case !has("max_tokens"):
			return "Malformed input request: #: required key [max_tokens] not found, please reformat your input and try again."
		}
	case DialectVertex:
		switch {
		case !has("anthropic_version"):
			return "anthropic_version: Field required"
		case m.AnthropicVersion != VertexAnthropicVersion:
			return "anthropic_version: Input should be '" + VertexAnthropicVersion + "'"
		case has("model"):
			return "model: Extra inputs are not permitted"
		}
	default:
		if m.Model == "" {
			return "model: Field required"
		}
	}
	if !has("max_tokens") {
		return "max_tokens: Field required"
	}
	if m.MaxTokens < 1 {
		return "max_tokens: Input should be greater than or equal to 1"
	}
	if len(m.Messages) == 0 {
		return "messages: Field required"
	}
	if m.ThinkingEnabled() {
		if m.Thinking.BudgetTokens < 1024 {
			return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
		}
		if m.MaxTokens <= m.Thinking.BudgetTokens {
			return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
		}
	}
	for i, t := range m.Tools {
		if t.Type != "" && t.Type != "custom" {
			continue // server tools (web_search_...) carry no schema
		}
		if !toolNameRE.MatchString(t.Name) {
			return fmt.Sprintf("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", i)
		}
		if len(t.InputSchema) == 0 {
			return fmt.Sprintf("tools.%d.custom.input_schema: Field required", i)
		}
	}
	for i, t := range m.Messages {
		// The API (and anthropic-sdk-go v2's MessageParam) takes
		// system-role messages of text blocks inside messages.
		if t.Role != "user" && t.Role != "assistant" && t.Role != "system" {
			return fmt.Sprintf("messages: Unexpected role %q. The Messages API accepts a top-level `system` parameter, not %q as an input message role.", t.Role, t.Role)
		}
		if t.Role == "system" {
			for j, b := range t.Content {
				if b.Type != "text" {
					return fmt.Sprintf("messages.%d.content.%d: system messages take text blocks only", i, j)
				}
			}
		}
		for j, b := range t.Content {
			at := fmt.Sprintf("messages.%d.content.%d", i, j)
			if msg := checkBlock(d, b, at); msg != "" {
				return msg
			}
			// A thinking block is only valid where it was produced: one
			// replayed to another channel after a failover is refused.
			if b.Type == "thinking" && b.Signature != thinkingSignature(b.Thinking, signer) {
				return at + ": Invalid `signature` in `thinking` block"
			}
		}
		if msg := m.checkToolPairs(i); msg != "" {
			return msg
		}
	}
	if m.ThinkingEnabled() {
		if i, typ := m.unthoughtToolTurn(); i >= 0 {
			return fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. "+
				"When `thinking` is enabled, a final `assistant` message must start with a thinking block "+
				"(preceeding the lastmost set of `tool_use` and `tool_result` blocks). "+
				"We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`.", i, typ)
		}
	}
	if last := m.Messages[len(m.Messages)-1]; last.Role == "assistant" && len(last.Content) > 0 {
		if b := last.Content[len(last.Content)-1]; b.Type == "text" && strings.TrimRight(b.Text, " \t\r\n") != b.Text {
			return "messages: final assistant content cannot end with trailing whitespace"
		}
	}
	return ""
}

func checkBlock(d Dialect, b ContentBlock, at string) string {
	if !slices.Contains(blockTypes, b.Type) {
		return fmt.Sprintf("%s.type: Input tag '%s' found using 'type' does not match any of the expected tags: '%s'", at, b.Type, strings.Join(blockTypes, "', '"))
	}
	switch b.Type {
	case "text":
		if b.Text == "" {
			return "messages: text content blocks must be non-empty"
		}
	case "image":
		src := b.Source
		switch {
		case src == nil:
			return at + ".image.source: Field required"
		case src.Type == "url" && (d == DialectBedrock || d == DialectVertex):
			// Bedrock and Vertex take base64 images only (DESIGN §8).
			return at + ".image.source: URL image sources are not supported on " + string(d) + "; send the image as base64"
		case src.Type == "url":
			if !strings.HasPrefix(src.URL, "https://") && !strings.HasPrefix(src.URL, "http://") {
				return at + ".image.source.url: Input should be a valid URL"
			}
		case src.Type == "base64":
			if !slices.Contains(imageTypes, src.MediaType) {
				return fmt.Sprintf("%s.image.source.base64.media_type: Input should be '%s'", at, strings.Join(imageTypes, "', '"))
			}
			if _, err := base64.StdEncoding.DecodeString(src.Data); err != nil || src.Data == "" {
				return at + ".image.source.base64.data: The image data is not valid base64"
			}
		default:
			return fmt.Sprintf("%s.image.source.type: Input tag '%s' found using 'type' does not match any of the expected tags: 'base64', 'url'", at, src.Type)
		}
	case "tool_use":
		if b.ID == "" || b.Name == "" {
			return at + ".tool_use: id and name are required"
		}
	case "tool_result":
		if b.ToolUseID == "" {
			return at + ".tool_result.tool_use_id: Field required"
		}
		for k, inner := range b.Content {
			if msg := checkBlock(d, inner, fmt.Sprintf("%s.content.%d", at, k)); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// checkToolPairs enforces the API's pairing of tool_use and tool_result
// blocks around message i: a translated conversation that loses a tool
// call id fails here as it would upstream.
func (m *MessagesRequest) checkToolPairs(i int) string {
	t := m.Messages[i]
	var uses []string
	if i > 0 {
		for _, b := range m.Messages[i-1].Content {
			if b.Type == "tool_use" {
				uses = append(uses, b.ID)
			}
		}
	}
	var results []string
	for j, b := range t.Content {
		if b.Type != "tool_result" {
			continue
		}
		if t.Role != "user" || !slices.Contains(uses, b.ToolUseID) {
			return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
		}
		results = append(results, b.ToolUseID)
	}
	var missing []string
	for _, id := range uses {
		if !slices.Contains(results, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
	}
	return ""
}

// parsedFromMessages is what the shared answer logic needs from a Messages
// request: turns as text (prefill), prompt size, stream.
func parsedFromMessages(m *MessagesRequest) parsed {
	p := parsed{Model: m.Model, Stream: m.Stream}
	if sys := m.SystemText(); sys != "" {
		p.Inputs = append(p.Inputs, sys)
	}
	for _, t := range m.Messages {
		var text strings.Builder
		for _, b := range t.Content {
			text.WriteString(blockText(b))
		}
		p.Messages = append(p.Messages, message{Role: t.Role, Text: text.String()})
	}
	return p
}

// blockText is the text a block contributes to the prompt.
func blockText(b ContentBlock) string {
	switch b.Type {
	case "text":
		return b.Text
	case "tool_use":
		return string(b.Input)
	case "tool_result":
		var s strings.Builder
		for _, in := range b.Content {
			s.WriteString(blockText(in))
			s.WriteString(" ")
		}
		return s.String()
	}
	return ""
}

// cachedTokens counts the prompt words in blocks and tools marked with
// cache_control: the part of the prompt a warm cache serves.
func (m *MessagesRequest) cachedTokens() int {
	n := 0
	for _, b := range m.System {
		if len(b.CacheControl) > 0 {
			n += len(strings.Fields(b.Text))
		}
	}
	for _, t := range m.Messages {
		for _, b := range t.Content {
			if len(b.CacheControl) > 0 {
				n += len(strings.Fields(blockText(b)))
			}
		}
	}
	for _, t := range m.Tools {
		if len(t.CacheControl) > 0 {
			n += len(strings.Fields(t.Description)) + 1
		}
	}
	return n
}

// thinkingSignature is the signature a fake named signer gives thinking.
func thinkingSignature(thinking, signer string) string {
	sum := sha256.Sum256([]byte(thinking + "\x00" + signer))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// DefaultCloudBetas are the anthropic-beta values the bedrock and vertex
// dialects accept when Options.CloudBetas is nil. Like the clouds, they
// refuse any other beta; the list is plausible, not either cloud's exact
// one: set Options.CloudBetas to what a test's allow-list expects.
var DefaultCloudBetas = []string{
	"computer-use-2024-10-22", "computer-use-2025-01-24", "context-1m-2025-08-07",
	"context-management-2025-06-27", "fine-grained-tool-streaming-2025-05-14",
	"interleaved-thinking-2025-05-14", "output-128k-2025-02-19", "token-efficient-tools-2025-02-19",
}

// unknownBetas returns the betas not in allowed.
func unknownBetas(betas, allowed []string) []string {
	var out []string
	for _, b := range betas {
		if !slices.Contains(allowed, b) {
			out = append(out, b)
		}
	}
	return out
}

// headerBetas splits anthropic-beta header values ("a,b", repeated).
func headerBetas(h []string) []string {
	var out []string
	for _, v := range h {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out = append(out, b)
			}
		}
	}
	return out
}

// unthoughtToolTurn is, with thinking on, the assistant message the API
// refuses and its first block's type: in a request that ends in a tool
// loop (its last message is tool results only), the first assistant
// message since the user last spoke must start with the thinking block
// the model wrote; -1 when there is none to refuse.
func (m *MessagesRequest) unthoughtToolTurn() (int, string) {
	results := func(c []ContentBlock) bool {
		for _, b := range c {
			if b.Type != "tool_result" {
				return false
			}
		}
		return len(c) > 0
	}
	n := len(m.Messages)
	if n == 0 || m.Messages[n-1].Role != "user" || !results(m.Messages[n-1].Content) {
		return -1, ""
	}
	first := -1
	for i := n - 1; i >= 0; i-- {
		t := &m.Messages[i]
		if t.Role == "assistant" {
			first = i
		} else if !results(t.Content) {
			break
		}
	}
	if first < 0 {
		return -1, ""
	}
	c := m.Messages[first].Content
	if len(c) > 0 && (c[0].Type == "thinking" || c[0].Type == "redacted_thinking") {
		return -1, ""
	}
	typ := ""
	if len(c) > 0 {
		typ = c[0].Type
	}
	return first, typ
}

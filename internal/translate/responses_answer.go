package translate

import (
	"bytes"
	"encoding/json"

	"github.com/hopgate/hopgate/internal/gate"
)

// MessageToResponse translates an Anthropic message (a non-streaming
// /v1/messages answer) into an OpenAI Responses object: text blocks become
// message items, tool_use blocks function_call items, thinking a
// reasoning item with its text as the summary and, when replay is the
// hop's ReplayKey (the client asked for reasoning.encrypted_content), the
// block for replay as its encrypted_content (reasoning.go); max_tokens
// makes the response incomplete. created is the caller's clock (Unix
// seconds). The Info classifies the body for the gate as
// MessageToChatCompletion does.
func MessageToResponse(body []byte, created int64, replay string) ([]byte, gate.Info, error) {
	var m anMessageIn
	if err := json.Unmarshal(body, &m); err != nil || bytes.TrimSpace(body)[0] != '{' {
		return nil, gate.Info{Kind: gate.Malformed}, ErrMalformed
	}
	if m.Type == "error" || m.Error != nil {
		info := gate.Info{Kind: gate.Error, Model: m.Model}
		if m.Error != nil {
			info.ErrorMessage = truncateMessage(m.Error.Message)
		}
		return nil, info, nil
	}
	base := responseBase(m.ID)
	items := make([]respItemOut, 0, len(m.Content))
	info := gate.Info{Kind: gate.Content, FinishReason: true, Model: m.Model}
	for _, b := range m.Content {
		it := respItemOut{done: true}
		switch b.Type {
		case "text":
			it.kind, it.text = blockText, []byte(b.Text)
		case "thinking":
			it.kind, it.text = blockThinking, []byte(b.Thinking)
			it.enc = encodeThinking(replay, it.text, []byte(b.Signature))
		case "tool_use":
			it.kind, it.callID, it.name, it.text = blockTool, b.ID, b.Name, []byte(compactArgs(b.Input))
			info.ToolCalls = true
		default:
			continue // redacted thinking, server tool blocks: no Responses form
		}
		it.id = itemID(it.kind, base, len(items))
		items = append(items, it)
	}
	h := respHead{id: "resp_" + base, model: m.Model, created: created}
	h.status, h.reason = respStatus(m.StopReason)
	if m.Usage != nil {
		h.usage = m.Usage
		info.Usage = m.Usage.info()
	}
	return appendResponse(nil, &h, items), info, nil
}

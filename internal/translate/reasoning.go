package translate

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// Thinking across a Responses tool loop (DESIGN.md §14). With extended
// thinking on, Anthropic refuses a request whose assistant turn in a tool
// loop does not start with the thinking block the model wrote, signature
// and all, and a Responses client (Codex, store: false) can only hand it
// back as a reasoning item's encrypted_content. So a reasoning item
// translated from a thinking block carries, when the client asked for
// include: ["reasoning.encrypted_content"], the block's text and signature
// in an opaque string bound to where the signature is valid (the channel
// and the upstream model: ReplayKey); a later request to the same channel
// and model replays it as the thinking block. It is not encryption: the
// text is the item's summary already, and the signature is Anthropic's
// own, which Anthropic checks; a tampered string is a block Anthropic
// refuses. Replayed to another channel or model (after a failover) it is
// dropped like any reasoning item: thinking does not cross.

// ReplayKey is where a thinking block's signature is valid: the channel
// and the upstream model that wrote it.
func ReplayKey(channel, upstreamModel string) string {
	return channel + "\x00" + upstreamModel
}

// thinkingPrefix starts every encrypted_content hopgate writes.
const thinkingPrefix = "hopgate.thinking.v1."

type thinkingReplay struct {
	Key       string `json:"k"` // keyTag of the ReplayKey
	Thinking  string `json:"t"`
	Signature string `json:"s"`
}

// keyTag names a ReplayKey without spelling out channel ids.
func keyTag(key string) string {
	sum := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// encodeThinking is the encrypted_content of a thinking block written at
// key; "" when the block has no signature (nothing to replay).
func encodeThinking(key string, thinking, signature []byte) string {
	if key == "" || len(signature) == 0 {
		return ""
	}
	b, _ := json.Marshal(thinkingReplay{Key: keyTag(key), Thinking: string(thinking), Signature: string(signature)})
	return thinkingPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// decodeThinking is the thinking block of an encrypted_content, when
// hopgate wrote it at key.
func decodeThinking(key, enc string) (thinking, signature string, ok bool) {
	rest, found := strings.CutPrefix(enc, thinkingPrefix)
	if key == "" || !found {
		return "", "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return "", "", false
	}
	var r thinkingReplay
	if json.Unmarshal(b, &r) != nil || r.Key != keyTag(key) || r.Signature == "" {
		return "", "", false
	}
	return r.Thinking, r.Signature, true
}

// wantsEncryptedReasoning reports a Responses request's include holding
// reasoning.encrypted_content.
func wantsEncryptedReasoning(v json.RawMessage) bool {
	var include []string
	if json.Unmarshal(v, &include) != nil {
		return false
	}
	for _, s := range include {
		if s == "reasoning.encrypted_content" {
			return true
		}
	}
	return false
}

// thinkingContinues reports whether msgs can go to Anthropic with thinking
// on: when they end in a tool loop (the last message is tool results
// only), the first assistant message since the user last spoke must start
// with a thinking block.
func thinkingContinues(msgs []anMessage) bool {
	n := len(msgs)
	if n == 0 || msgs[n-1].Role != "user" || !toolResultsOnly(msgs[n-1].Content) {
		return true
	}
	first := -1
	for i := n - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role == "assistant" {
			first = i
		} else if m.Role == "user" && !toolResultsOnly(m.Content) {
			break
		}
	}
	if first < 0 {
		return true
	}
	c := msgs[first].Content
	return len(c) > 0 && (c[0].Type == "thinking" || c[0].Type == "redacted_thinking")
}

func toolResultsOnly(blocks []anBlock) bool {
	for _, b := range blocks {
		if b.Type != "tool_result" {
			return false
		}
	}
	return len(blocks) > 0
}

// stripThinking takes the replayed thinking blocks out of msgs (thinking
// is off for this request), and the turns they leave empty.
func stripThinking(out *anRequest) (stripped bool) {
	msgs := out.Messages[:0]
	for _, m := range out.Messages {
		blocks := m.Content[:0]
		for _, b := range m.Content {
			if b.Type == "thinking" {
				stripped = true
				continue
			}
			blocks = append(blocks, b)
		}
		m.Content = blocks
		if len(blocks) > 0 {
			msgs = append(msgs, m)
		}
	}
	out.Messages = msgs
	// Two turns of one role may now touch: merge them.
	merged := out.Messages[:0]
	for _, m := range out.Messages {
		if n := len(merged); n > 0 && merged[n-1].Role == m.Role {
			merged[n-1].Content = append(merged[n-1].Content, m.Content...)
			continue
		}
		merged = append(merged, m)
	}
	out.Messages = merged
	return stripped
}

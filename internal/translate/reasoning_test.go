package translate

import (
	"encoding/json"
	"testing"
)

// TestThinkingReplayKey: a replayed block decodes only at the key that
// wrote it, and nothing else decodes: OpenAI's own encrypted_content, a
// damaged string, one without a signature.
func TestThinkingReplayKey(t *testing.T) {
	key := ReplayKey("an", "claude-sonnet-4-5")
	enc := encodeThinking(key, []byte("Let me think. \"quoted\"\n"), []byte("sig"))
	if th, sig, ok := decodeThinking(key, enc); !ok || th != "Let me think. \"quoted\"\n" || sig != "sig" {
		t.Fatalf("round trip: %q %q %v", th, sig, ok)
	}
	for name, k := range map[string]string{
		"another channel": ReplayKey("an2", "claude-sonnet-4-5"),
		"another model":   ReplayKey("an", "claude-opus-4-1"),
		"no key":          "",
	} {
		if _, _, ok := decodeThinking(k, enc); ok {
			t.Errorf("%s decodes the block", name)
		}
	}
	for _, bad := range []string{"gAAAAABo", "", thinkingPrefix, thinkingPrefix + "!!", enc[:len(enc)-3],
		thinkingPrefix + "eyJrIjoieCJ9"} {
		if _, _, ok := decodeThinking(key, bad); ok {
			t.Errorf("%q decodes", bad)
		}
	}
	if encodeThinking(key, []byte("t"), nil) != "" || encodeThinking("", []byte("t"), []byte("s")) != "" {
		t.Error("a block without a signature, or no key, has something to replay")
	}
}

// TestThinkingContinues: Anthropic's rule for thinking in a tool loop —
// the first assistant message since the user last spoke starts with a
// thinking block — and only in a tool loop.
func TestThinkingContinues(t *testing.T) {
	th := "x"
	user := anMessage{Role: "user", Content: []anBlock{{Type: "text", Text: "hi"}}}
	results := anMessage{Role: "user", Content: []anBlock{{Type: "tool_result", ToolUseID: "a"}}}
	thought := anMessage{Role: "assistant", Content: []anBlock{{Type: "thinking", Thinking: &th, Signature: "s"}, {Type: "tool_use", ID: "a"}}}
	bare := anMessage{Role: "assistant", Content: []anBlock{{Type: "tool_use", ID: "a"}}}
	text := anMessage{Role: "assistant", Content: []anBlock{{Type: "text", Text: "ok"}}}
	for _, tc := range []struct {
		name string
		msgs []anMessage
		want bool
	}{
		{"a first turn", []anMessage{user}, true},
		{"a loop with its thinking", []anMessage{user, thought, results}, true},
		{"a loop without it", []anMessage{user, bare, results}, false},
		{"the loop's later steps carry no thinking", []anMessage{user, thought, results, bare, results}, true},
		{"a later loop without it", []anMessage{user, thought, results, text, user, bare, results}, false},
		{"a new user turn after a loop", []anMessage{user, bare, results, text, user}, true},
		{"an answer whose text came first", []anMessage{user, text, results}, false},
	} {
		if got := thinkingContinues(tc.msgs); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestThinkingReplayStreamAndBody: with a replay key, the reasoning item
// of an answer and of a stream (its output_item.done and
// response.completed) carries the thinking block as the model wrote it,
// signature included; without one, none.
func TestThinkingReplayStreamAndBody(t *testing.T) {
	key := ReplayKey("an", "claude-sonnet-4-5-20250929")
	check := func(where string, raw json.RawMessage, wantText string) {
		t.Helper()
		var it struct {
			Type    string `json:"type"`
			Enc     string `json:"encrypted_content"`
			Summary []struct {
				Text string `json:"text"`
			} `json:"summary"`
		}
		if err := json.Unmarshal(raw, &it); err != nil || it.Type != "reasoning" {
			t.Fatalf("%s: %s", where, raw)
		}
		th, sig, ok := decodeThinking(key, it.Enc)
		if !ok || th != wantText || sig == "" || len(it.Summary) != 1 || it.Summary[0].Text != th {
			t.Fatalf("%s: encrypted_content %q decodes to %q %q %v", where, it.Enc, th, sig, ok)
		}
	}
	body := readFile(t, "response_tochat/thinking_cache.json")
	var msg struct {
		Content []struct{ Thinking, Signature string } `json:"content"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	out, _, err := MessageToResponse(body, created, key)
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	check("answer", resp.Output[0], msg.Content[0].Thinking)
	if _, sig, _ := decodeThinking(key, encodeThinking(key, nil, []byte(msg.Content[0].Signature))); sig != msg.Content[0].Signature {
		t.Fatal("the signature changed")
	}

	s := NewMessagesToResponsesStream(created)
	s.SetReplay(key)
	_, sout := transcribe(t, s, sseEvents(t, readFile(t, "stream_tochat/thinking_cache.sse")))
	var thinking string
	var seen int
	for _, ev := range responsesEvents(t, sout) {
		switch ev.Type {
		case "response.reasoning_summary_text.done":
			thinking = ev.Text
		case "response.output_item.done":
			if ev.Item.Type == "reasoning" {
				check("output_item.done", json.RawMessage(ev.Item.RawJSON()), thinking)
				seen++
			}
		case "response.completed":
			check("response.completed", json.RawMessage(ev.Response.Output[0].RawJSON()), thinking)
			seen++
		}
	}
	if seen != 2 {
		t.Fatalf("%d reasoning items carried the block", seen)
	}

	plain := NewMessagesToResponsesStream(created)
	_, pout := transcribe(t, plain, sseEvents(t, readFile(t, "stream_tochat/thinking_cache.sse")))
	for _, ev := range responsesEvents(t, pout) {
		if ev.Item.EncryptedContent != "" {
			t.Fatalf("%s carries encrypted_content without a replay key", ev.Type)
		}
	}
}

// TestToolSchemaType: a function without parameters ({} or a schema
// without "type", which OpenAI takes) reaches Anthropic as an object
// schema with its type; a schema with one is passed as it is.
func TestToolSchemaType(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                                 `{"type":"object","properties":{}}`,
		` { } `:                              `{"type":"object","properties":{}}`,
		`{"properties": {"q": {}}}`:          `{"type":"object","properties":{"q":{}}}`,
		`{"type":"object","required":["q"]}`: `{"type":"object","required":["q"]}`,
	} {
		got, err := toolSchema(json.RawMessage(in), "tools[0].parameters")
		if err != nil || string(got) != want {
			t.Errorf("%s: %s, %v; want %s", in, got, err, want)
		}
	}
}

package translate

import (
	"testing"
)

// The translating path's cost per upstream event: a text delta is most of
// any stream.
func BenchmarkMessagesToChatStreamTextDelta(b *testing.B) {
	s := NewMessagesToChatStream(ChatStreamOptions{Created: created})
	s.Event(nil, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_01H1pwRRkQxKbUGKi785gT4M","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":397,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}}`))
	s.Event(nil, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the current weather in"}}`)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf, _ = s.Event(buf[:0], "content_block_delta", data)
	}
}

func BenchmarkMessagesToChatStreamToolArgs(b *testing.B) {
	s := NewMessagesToChatStream(ChatStreamOptions{Created: created})
	s.Event(nil, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}`))
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"S"}}`)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = s.Event(buf[:0], "content_block_delta", data)
	}
}

func BenchmarkChatToMessagesStreamTextDelta(b *testing.B) {
	s := NewChatToMessagesStream()
	s.Event(nil, "", []byte(`{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}`))
	data := []byte(`{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_fc9f1d7035","choices":[{"index":0,"delta":{"content":" the current weather in"},"logprobs":null,"finish_reason":null}]}`)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf, _ = s.Event(buf[:0], "", data)
	}
}

// A whole recorded stream (the SDK cassette: text, a tool call in nine
// pieces, finish), per stream.
func BenchmarkMessagesToChatStreamCassette(b *testing.B) {
	benchStream(b, sseEvents(b, readFileB(b, "stream_tochat/tool_use.sse")), toChat)
}

func BenchmarkChatToMessagesRequest(b *testing.B) {
	body := readFileB(b, "request_tomessages/tools_roundtrip.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChatToMessages(body, ToMessagesOptions{Model: "claude"}); err != nil {
			b.Fatal(err)
		}
	}
}

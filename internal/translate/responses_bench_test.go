package translate

import "testing"

// The Responses translations beside the chat ones (bench_test.go): the
// same upstream bytes, the other client API.

func BenchmarkMessagesToResponsesStreamTextDelta(b *testing.B) {
	s := NewMessagesToResponsesStream(created)
	s.Event(nil, "message_start", []byte(`{"type":"message_start","message":{"id":"msg_01H1pwRRkQxKbUGKi785gT4M","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":397,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}}`))
	s.Event(nil, "content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the current weather in"}}`)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf, _ = s.Event(buf[:0], "content_block_delta", data)
		s.items[0].text = s.items[0].text[:0] // the answer so far, kept for response.output: not what is measured
	}
}

func BenchmarkMessagesToResponsesStreamCassette(b *testing.B) {
	events := sseEvents(b, readFileB(b, "stream_tochat/tool_use.sse"))
	buf := make([]byte, 0, 8192)
	b.ReportAllocs()
	for b.Loop() {
		s := NewMessagesToResponsesStream(created)
		buf = buf[:0]
		for _, f := range events {
			buf, _ = s.Event(buf, f.Event, f.Data)
		}
	}
	b.ReportMetric(float64(len(events)), "events/op")
}

func BenchmarkResponsesToMessagesRequest(b *testing.B) {
	body := readFileB(b, "request_toresponses/tools_roundtrip.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ResponsesToMessages(body, ResponsesOptions{ToMessagesOptions: ToMessagesOptions{Model: "claude"}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessageToChatCompletion(b *testing.B) {
	body := readFileB(b, "response_tochat/tool_use.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := MessageToChatCompletion(body, created); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMessageToResponse(b *testing.B) {
	body := readFileB(b, "response_tochat/tool_use.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := MessageToResponse(body, created); err != nil {
			b.Fatal(err)
		}
	}
}

package translate

import (
	"fmt"
	"testing"

	"github.com/hopgate/hopgate/internal/sse"
)

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
		s.seq = 50                            // a stream's, not the loop's millions (eight digits to format)
	}
}

func BenchmarkMessagesToResponsesStreamCassette(b *testing.B) {
	benchStream(b, sseEvents(b, readFileB(b, "stream_tochat/tool_use.sse")), toResponses)
}

// The two translations of one upstream stream, per stream, in one run:
// the SDK cassette (text, and a tool call whose arguments come in 11
// deltas), a thinking answer with cache reads, and the stream of make
// bench's stream-50-frames (50 short text deltas).
func BenchmarkStreamCassettes(b *testing.B) {
	for _, c := range []struct {
		name   string
		events []sse.Frame
	}{
		{"tool_use", sseEvents(b, readFileB(b, "stream_tochat/tool_use.sse"))},
		{"thinking_cache", sseEvents(b, readFileB(b, "stream_tochat/thinking_cache.sse"))},
		{"text_50", textStream(50)},
	} {
		b.Run(c.name+"/chat", func(b *testing.B) { benchStream(b, c.events, toChat) })
		b.Run(c.name+"/responses", func(b *testing.B) { benchStream(b, c.events, toResponses) })
	}
}

func toChat() transcoder {
	return NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: true, Created: created})
}

func toResponses() transcoder { return NewMessagesToResponsesStream(created) }

// benchStream translates the events with a new transcoder per op; out-B/op
// is what the client receives.
func benchStream(b *testing.B, events []sse.Frame, newTranscoder func() transcoder) {
	buf := make([]byte, 0, 16384)
	b.ReportAllocs()
	for b.Loop() {
		s := newTranscoder()
		buf = buf[:0]
		for _, f := range events {
			buf, _ = s.Event(buf, f.Event, f.Data)
		}
	}
	b.ReportMetric(float64(len(events)), "events/op")
	b.ReportMetric(float64(len(buf)), "out-B/op")
}

// textStream is the Anthropic stream cmd/hopbench's fast upstream sends
// (anthropicEvents): message_start, a text block of n deltas ("tok1 ", …)
// and a ping, the stop and message_delta with usage.
func textStream(n int) []sse.Frame {
	ev := func(name, data string) sse.Frame { return sse.Frame{Event: name, Data: []byte(data), HasData: true} }
	out := []sse.Frame{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench",`+
			`"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":24,"cache_creation_input_tokens":0,`+
			`"cache_read_input_tokens":0,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type":"ping"}`),
	}
	for i := 1; i <= n; i++ {
		out = append(out, ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok%d "}}`, i)))
	}
	return append(out,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},`+
			`"usage":{"input_tokens":24,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":%d}}`, 2*n)),
		ev("message_stop", `{"type":"message_stop"}`))
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
		if _, _, err := MessageToResponse(body, created, ""); err != nil {
			b.Fatal(err)
		}
	}
}

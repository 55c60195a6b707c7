package translate

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/hopgate/hopgate/internal/gate"
)

// The fast path reads every event exactly as the general one does: the
// same frames out and the same classification, whatever the bytes. Two
// transcoders, one never taking the fast path, are fed the same events.
func FuzzFastDelta(f *testing.F) {
	seedFrames(f, "stream_tochat", "tool_use", "thinking_cache", "bedrock_no_tool_args", "overloaded_mid_stream")
	head := "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\n"
	for _, d := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"index":0,"delta":{"text":"a\"b\\u00e9\n","type":"text_delta"},"type":"content_block_delta"}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
		`{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"wrong block"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`,
		`{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"out of range"}}`,
		`{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"negative"}}`,
		`{"type":"content_block_delta","index":1.0,"delta":{"type":"text_delta","text":"float"}}`,
		`{"type":"content_block_delta","index":00,"delta":{"type":"text_delta","text":"leading zero"}}`,
		`{"Type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"case"}}`,
		`{"type":"content_block_delta","type":"message_stop","index":0,"delta":{"type":"text_delta","text":"twice"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a","text":"b"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","citations":[]}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}`,
		"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"\xff\xfe bad utf-8\"}}",
		`{"type":"content_block_delta","index":0,"delta":{"type":"text\u005fdelta","text":"escaped type"}}`,
		`{"type":"content_block_delta","index":0,"delta":null}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"trailing"}} x`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"unterminated"}`,
		` {"type" : "content_block_delta" , "index" : 0 , "delta" : { "type" : "text_delta" , "text" : "spaced" } } `,
	} {
		f.Add([]byte(head + "event: content_block_delta\ndata: " + d + "\n\n"))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast := NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: true, Created: created})
		slow := NewMessagesToChatStream(ChatStreamOptions{IncludeUsage: true, Created: created})
		slow.slow = true
		sameTranscoding(t, fast, slow, raw)
	})
}

// sameTranscoding feeds the frames of raw to both transcoders, one event
// at a time: the same frames out and the same classification.
func sameTranscoding(t *testing.T, fast, slow transcoder, raw []byte) {
	t.Helper()
	for _, fr := range sseEvents(t, raw) {
		fo, fi := fast.Event(nil, fr.Event, fr.Data)
		so, si := slow.Event(nil, fr.Event, fr.Data)
		if !bytes.Equal(fo, so) {
			t.Fatalf("event %q %q:\nfast %q\nslow %q", fr.Event, fr.Data, fo, so)
		}
		if !sameInfo(fi, si) {
			t.Fatalf("event %q %q:\nfast %+v\nslow %+v", fr.Event, fr.Data, fi, si)
		}
	}
}

func sameInfo(a, b gate.Info) bool {
	if !bytes.Equal(a.Text, b.Text) {
		return false
	}
	a.Text, b.Text = nil, nil
	return reflect.DeepEqual(a, b)
}

// The fast path is taken for the common deltas (else the benchmark
// measures the general path and FuzzFastDelta compares it with itself).
func TestFastDeltaIsTaken(t *testing.T) {
	for _, d := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"S"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"é\u00e9"}}`,
	} {
		if _, _, ok := readFastDelta([]byte(d), nil); !ok {
			t.Errorf("not read by the fast path: %s", d)
		}
	}
	d, _, _ := readFastDelta([]byte(`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"a\nb\u00e9"}}`), nil)
	if d.index != 12 || string(d.typ) != "text_delta" || string(d.text) != "a\nbé" {
		t.Errorf("read %+v (text %q)", d, d.text)
	}
}

// The chunk memo answers exactly as decoding does: two transcoders, one
// never taking the fast path, fed the same frames.
func FuzzFastChunk(f *testing.F) {
	seedFrames(f, "stream_tomessages", "text_usage", "tool_calls", "error_mid_stream", "refusal")
	const c = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt","choices":[{"index":0,"delta":{"content":%s},"logprobs":null,"finish_reason":null}]}` + "\n\n"
	for _, frames := range [][]string{
		{`"Hello"`, `" world"`, `"\u00e9\n"`, `""`, `"again"`},
		{`"a"`, `"\ud83d"`, "\"\xff\"", `"b"`},
	} {
		var raw []byte
		for _, t := range frames {
			raw = fmt.Appendf(raw, c, t)
		}
		f.Add(raw)
	}
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}],\"choiceſ\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}],\"choiceſ\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\",\"Content\":\"x\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\",\"Content\":\"x\"}}]}\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\nevent: x\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"c\"}}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"d\"}}]}\n\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, slow := NewChatToMessagesStream(), NewChatToMessagesStream()
		slow.slow = true
		sameTranscoding(t, fast, slow, raw)
		fo, fd := fast.End(nil)
		so, sd := slow.End(nil)
		if !bytes.Equal(fo, so) || fd != sd {
			t.Fatalf("End: fast %q %v, slow %q %v", fo, fd, so, sd)
		}
	})
}

// The memo is used: a stream of text chunks is read by sameText after
// its first (else the benchmark measures decoding, and FuzzFastChunk
// compares decoding with itself).
func TestFastChunkIsTaken(t *testing.T) {
	s := NewChatToMessagesStream()
	chunk := func(text string) []byte {
		return fmt.Appendf(nil, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt","choices":[{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":null}]}`, text)
	}
	s.Event(nil, "", chunk("first"))
	if got, ok := s.sameText("", chunk("sec\"ond")); !ok || string(got) != "sec\"ond" {
		t.Fatalf("sameText = %q, %v", got, ok)
	}
}

package translate

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/sse"
)

// fastEventSeeds are the shapes readFastEvent must read as encoding/json
// does, and the ones it must leave to it.
var fastEventSeeds = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":0},"output_tokens":1,"service_tier":"standard"}}}`,
	`{"type":"message_start","message":{"id":"msg_\u00e9\"","model":"cl\\aude","content":[ ],"usage":{"input_tokens":null,"output_tokens_details":{"thinking_tokens":4}}}}`,
	`{"type":"message_start","message":{"id":"msg_1","content":[{"type":"text","text":"x"}]}}`,
	`{"type":"message_start","message":{"id":"msg_1","error":{"type":"e","message":"m"}}}`,
	`{"type":"message_start","message":null}`,
	`{"type":"message_start","message":{"id":1}}`,
	`{"type":"message_start","message":{"ID":"upper"}}`,
	`{"type":"message_start","message":{"id":"a","id":"b"}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":1.5}}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":12345678901}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}              }`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"a": [1, {"b":null}]}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","input":null}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","input":"{}"}}`,
	`{"type":"content_block_start","index":-3,"content_block":{"type":"redacted_thinking","data":"x"}}`,
	`{"type":"content_block_start","index":"0","content_block":{"type":"text"}}`,
	`{"type":"content_block_stop","index":1         }`,
	`{"type":"content_block_stop","index":00}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"x"}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":397,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":89}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":91,"output_tokens_details":{"thinking_tokens":60,"other":1}}}`,
	`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":null,"output_tokens_details":null}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1,"output_tokens":2}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens_details":{"thinking_tokens":"1"}}}`,
	`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":310,"outputTokenCount":48}}`,
	`{"type": "ping"}`,
	`{"type":"message_stop"} x`,
	`{"type":"message_stop"`,
	`{"type":"message_stop","type":"ping"}`,
	`{"type":"message_delta","delta":{"type":"a"},"delta":{"stop_reason":"end_turn"}}`,
	`{"type":"message_start","message":{"usage":{"input_tokens":1}},"message":{"id":"m"}}`,
	`{"typ\u0065":"ping"}`,
	"{\"type\":\"ping\",\"typeſ\":1,\"\xff\":2}",
	"{\"type\":\"text\xff\xfe\"}",
	`{"type":"ping","index":1,"Index":2}`,
	`{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}`,
	`[]`,
	``,
	`null`,
}

// Whatever the bytes, an event readFastEvent reads is the event
// json.Unmarshal decodes, field for field (else the fast path would
// translate some upstream event differently from the general one).
func FuzzFastEvent(f *testing.F) {
	for _, s := range fastEventSeeds {
		f.Add([]byte(s))
	}
	for _, name := range []string{"tool_use", "thinking_cache", "bedrock_no_tool_args", "after_tool_result"} {
		for _, fr := range sseEvents(f, readFileB(f, "stream_tochat/"+name+".sse")) {
			f.Add(fr.Data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast anEvent
		var st eventStore
		if !readFastEvent(data, &fast, &st) {
			return
		}
		var slow anEvent
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("read %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q:\nfast %s\nslow %s", data, dumpEvent(fast), dumpEvent(slow))
		}
	})
}

func dumpEvent(ev anEvent) string {
	b, _ := json.Marshal(ev)
	return string(b)
}

// Every event of the recorded streams that is not a text delta is read by
// readFastEvent (else the benchmarks measure encoding/json and
// FuzzFastEvent tests nothing the streams send); errors are left to the
// general path.
func TestFastEventIsTaken(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "stream_tochat", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	more, _ := filepath.Glob(filepath.Join("testdata", "stream_toresponses", "*.sse"))
	n := 0
	for _, path := range append(files, more...) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, fr := range sseEvents(t, raw) {
			if _, _, ok := readFastDelta(fr.Data, nil); ok || fr.Event == "error" {
				continue
			}
			var ev anEvent
			var st eventStore
			if !readFastEvent(fr.Data, &ev, &st) {
				t.Errorf("%s: not read by the fast path: %s", filepath.Base(path), fr.Data)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d events tried", n)
	}
	var ev anEvent
	var st eventStore
	if !readFastEvent([]byte(`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":7}}`), &ev, &st) ||
		ev.Type != "message_delta" || ev.Delta.StopReason != "max_tokens" || *ev.Usage.OutputTokens != 7 || ev.Usage.InputTokens != nil {
		t.Fatalf("read %s", dumpEvent(ev))
	}
}

// The fast paths translate every event as the general path does: the
// same Responses events out and the same classification. Two transcoders,
// one never taking a fast path, are fed the same events.
func FuzzFastResponsesStream(f *testing.F) {
	seedFrames(f, "stream_tochat", "tool_use", "thinking_cache", "bedrock_no_tool_args", "overloaded_mid_stream", "after_tool_result")
	seedFrames(f, "stream_toresponses", "max_tokens")
	for _, s := range fastEventSeeds {
		if !strings.HasPrefix(s, `{"type":"message_start"`) {
			s = `{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":1}}}` + "\n\ndata: " + s
		}
		f.Add([]byte("data: " + s + "\n\n"))
	}
	// The delta memo: a delta, then others with the same bytes around a
	// text that is, or only seems to be, one string literal.
	const text0 = "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
	delta := func(lit string) string {
		return "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":" + lit + "}}  \n\n"
	}
	f.Add([]byte(text0 + delta(`"a"`) + delta(`"b\"c"`) + delta(`"x","text":"y"`) + delta(`"\u00e9\ud83d"`) + delta("\"\xff\"") + delta(`""`) + delta(`"z"`)))
	f.Add([]byte(text0 + delta(`"a"`) + delta(`"b"},"index":1,"delta":{"c":"`) + delta(`"d" `) + delta(`5`) + delta(`"e`)))
	f.Add([]byte(text0 + delta(`"a"`) +
		"data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"f\"]]\n\n"))
	f.Add([]byte(text0 + "data: {\"index\":0,\"delta\":{\"text\":\"a\",\"type\":\"text_delta\"},\"type\":\"content_block_delta\"}\n\n" +
		"data: {\"index\":0,\"delta\":{\"text\":\"b\",\"type\":\"text_delta\"},\"type\":\"content_block_delta\"}\t\r\n\n" +
		"data: {\"index\":0,\"delta\":{\"text\":\"c\",\"type\":\"thinking_delta\"},\"type\":\"content_block_delta\"}\n\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		fast, slow := NewMessagesToResponsesStream(created), NewMessagesToResponsesStream(created)
		slow.slow = true
		sameTranscoding(t, fast, slow, raw)
		fo := fast.Interrupt(nil, "cut")
		so := slow.Interrupt(nil, "cut")
		if !bytes.Equal(fo, so) {
			t.Fatalf("Interrupt:\nfast %q\nslow %q", fo, so)
		}
	})
}

// The delta memo reads the deltas that follow the first of a block (else
// the benchmarks measure readFastDelta, and FuzzFastResponsesStream
// compares it with itself): all but the first of make bench's 50, and of
// the SDK cassette's once compacted as the API sends it (the cassette pads
// each event with a different run of spaces before its last brace, which
// the memo does not read: 1 of its 14).
func TestDeltaMemoIsTaken(t *testing.T) {
	padded := sseEvents(t, readFile(t, "stream_tochat/tool_use.sse"))
	var compact []sse.Frame
	for _, fr := range padded {
		var b bytes.Buffer
		if err := json.Compact(&b, fr.Data); err != nil {
			t.Fatal(err)
		}
		compact = append(compact, sse.Frame{Event: fr.Event, Data: b.Bytes(), HasData: true})
	}
	for _, c := range []struct {
		name   string
		events []sse.Frame
		want   int
	}{
		{"text_50", textStream(50), 49},
		{"text_50 with trailing whitespace", trailingWS(textStream(50)), 49},
		{"tool_use compacted", compact, 4 + 10}, // 5 text deltas, 11 of the arguments
		{"tool_use", padded, 1},
	} {
		var m deltaMemo
		hits := 0
		for _, fr := range c.events {
			if _, _, text, _, ok := m.read(fr.Data, nil); ok {
				d, _, _ := readFastDelta(fr.Data, nil)
				if !bytes.Equal(text, d.text) {
					t.Fatalf("%s: memo read %q from %s, readFastDelta %q", c.name, text, fr.Data, d.text)
				}
				hits++
			} else if d, _, ok := readFastDelta(fr.Data, nil); ok {
				m.learn(fr.Data, d)
			}
		}
		if hits != c.want {
			t.Errorf("%s: the memo read %d deltas, want %d", c.name, hits, c.want)
		}
	}
}

// trailingWS gives every event's data a different run of trailing
// whitespace.
func trailingWS(events []sse.Frame) []sse.Frame {
	out := make([]sse.Frame, len(events))
	for i, fr := range events {
		fr.Data = append(bytes.Clone(fr.Data), " \t\r\n"[:i%4]...)
		out[i] = fr
	}
	return out
}

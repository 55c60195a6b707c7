package rtevent

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Event
		bad      bool
	}{
		// why: the gate's commit is session.created, whatever else the event carries.
		{name: "session created", in: `{"type":"session.created","event_id":"e1","session":{"id":"s","type":"realtime"}}`,
			want: Event{Type: TypeSessionCreated}},
		// why: the type may come after the payload; keys are unordered.
		{name: "type last", in: `{"session":{"type":"x"},"type":"session.created"}`, want: Event{Type: TypeSessionCreated}},
		// why: an error event before commit discards the hop; its code goes on the span.
		{name: "error", in: `{"type":"error","error":{"type":"server_error","code":"overloaded","message":"try \"later\""}}`,
			want: Event{Type: TypeError, ErrorCode: "overloaded", ErrorMessage: `try "later"`}},
		// why: the ledger charges each response.done by its id with its usage.
		{name: "response done", in: `{"type":"response.done","response":{"id":"resp_1","status":"completed","usage":{"total_tokens":30,"input_tokens":10,"output_tokens":20}}}`,
			want: Event{Type: TypeResponseDone, ResponseID: "resp_1", InputTokens: 10, OutputTokens: 20, Usage: true}},
		// why: a response.done without usage is not charged as zero tokens by mistake.
		{name: "response done no usage", in: `{"type":"response.done","response":{"id":"r"}}`,
			want: Event{Type: TypeResponseDone, ResponseID: "r"}},
		// why: a negative or fractional count is not trusted.
		{name: "odd counts", in: `{"type":"response.done","response":{"id":"r","usage":{"input_tokens":-3,"output_tokens":1.5}}}`,
			want: Event{Type: TypeResponseDone, ResponseID: "r", Usage: true}},
		// why: an escaped type is still the type.
		{name: "escaped type", in: `{"type":"session\u002ecreated"}`, want: Event{Type: TypeSessionCreated}},
		// why: other events are read for their type only.
		{name: "audio delta", in: `{"type":"response.output_audio.delta","delta":"AAAA","error":{"code":"x"}}`,
			want: Event{Type: "response.output_audio.delta"}},
		{name: "no type", in: `{"event_id":"e"}`, bad: true},
		{name: "type not a string", in: `{"type":1}`, bad: true},
		{name: "empty type", in: `{"type":""}`, bad: true},
		{name: "not an object", in: `["type"]`, bad: true},
		{name: "trailing bytes", in: `{"type":"error"} x`, bad: true},
		{name: "truncated", in: `{"type":"error"`, bad: true},
		{name: "empty", in: ``, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.bad {
				if err == nil {
					t.Fatalf("Parse(%s) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%s) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzParse: events come from the network (clients and upstreams); Parse
// must never panic, and must agree with encoding/json on what has a type.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"type":"session.created"}`, `{"type":"error","error":{"code":"c","message":"m"}}`,
		`{"type":"response.done","response":{"id":"r","usage":{"input_tokens":1,"output_tokens":2}}}`,
		`{"type":1}`, `[]`, ``, `{"type":"a\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Parse(b)
		// The reference: encoding/json's reading of the exact key "type"
		// (a map, not a struct: struct fields match keys case-insensitively).
		var probe map[string]json.RawMessage
		var refType string
		refOK := json.Unmarshal(b, &probe) == nil && json.Unmarshal(probe["type"], &refType) == nil && refType != ""
		if err == nil && !refOK {
			t.Fatalf("Parse accepted %q (type %q), encoding/json does not", b, ev.Type)
		}
		if err == nil && utf8.ValidString(ev.Type) && ev.Type != refType {
			t.Fatalf("Parse(%q).Type = %q, encoding/json says %q", b, ev.Type, refType)
		}
	})
}

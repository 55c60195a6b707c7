package gate

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/sse"
)

// The oracles below restate, with encoding/json, what InspectBody and
// ErrorCode promise; the fuzz targets hold the hand-written scanners to
// them. Duplicate member names follow encoding/json (and JavaScript's
// JSON.parse): the last one wins.

// member is one member of a JSON object, in document order.
type member struct {
	key string
	raw json.RawMessage
}

// members decodes the members of the object raw in order (encoding/json's
// maps lose the order, and usage's aliases depend on it). ok is false when
// raw is not an object.
func members(raw []byte) ([]member, bool) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(raw, &probe) != nil || probe == nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, false
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		out = append(out, member{key: tok.(string), raw: v})
	}
	return out, true
}

// last is the value of the last member named key (nil if none).
func last(ms []member, key string) json.RawMessage {
	var v json.RawMessage
	for _, m := range ms {
		if m.key == key {
			v = m.raw
		}
	}
	return v
}

// jsonString decodes raw when it is a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// oracleTruncate cuts s to maxErrorMessage bytes, backing off to the start
// of a UTF-8 sequence.
func oracleTruncate(s string) string {
	if len(s) <= maxErrorMessage {
		return s
	}
	n := maxErrorMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// oracleMessage is an "error" value's message: the string itself, or an
// object's "message" when that is a string.
func oracleMessage(raw json.RawMessage) string {
	if s, ok := jsonString(raw); ok {
		return oracleTruncate(s)
	}
	ms, ok := members(raw)
	if !ok {
		return ""
	}
	s, _ := jsonString(last(ms, "message"))
	return oracleTruncate(s)
}

var tokenCount = regexp.MustCompile(`^[0-9]{1,18}$`)

// oracleUsage reads prompt/input and completion/output token counts:
// non-negative integers of at most 18 digits, the last valid one winning.
func oracleUsage(raw json.RawMessage) Usage {
	var u Usage
	ms, ok := members(raw)
	if !ok {
		return u
	}
	for _, m := range ms {
		if !tokenCount.Match(m.raw) {
			continue
		}
		n, err := strconv.ParseInt(string(m.raw), 10, 64)
		if err != nil {
			continue
		}
		switch m.key {
		case "prompt_tokens", "input_tokens":
			u.InputTokens, u.Present = n, true
		case "completion_tokens", "output_tokens":
			u.OutputTokens, u.Present = n, true
		}
	}
	return u
}

// oracleBody is InspectBody's contract: not an object → Malformed; an
// "error" that is an object or a string → Error with its message; else
// Content with usage. Model is "model" when it is a string.
func oracleBody(body []byte) Info {
	ms, ok := members(body)
	if !ok {
		return Info{Kind: Malformed}
	}
	model, _ := jsonString(last(ms, "model"))
	if e := last(ms, "error"); len(e) > 0 && (e[0] == '{' || e[0] == '"') {
		return Info{Kind: Error, Model: model, ErrorMessage: oracleMessage(e)}
	}
	info := Info{Kind: Content, Model: model}
	if u := last(ms, "usage"); len(u) > 0 && u[0] == '{' {
		info.Usage = oracleUsage(u)
	}
	return info
}

// oracleErrorCode is ErrorCode's contract: error.code, else error.type; a
// non-empty string as decoded, a number as written.
func oracleErrorCode(body []byte) string {
	ms, ok := members(body)
	if !ok {
		return ""
	}
	em, ok := members(last(ms, "error"))
	if !ok {
		return ""
	}
	for _, key := range []string{"code", "type"} {
		v := last(em, key)
		if s, ok := jsonString(v); ok && s != "" {
			return s
		}
		if len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9') {
			return string(v)
		}
	}
	return ""
}

func bodySeeds(f *testing.F) {
	for _, s := range []string{
		`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
		`{"id":"resp_1","object":"response","model":"gpt-4.1","usage":{"input_tokens":5,"output_tokens":7}}`,
		`{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		`{"error":{"message":"The response was filtered","type":null,"param":"prompt","code":"content_filter","status":400}}`,
		`{"error":{"message":"x","type":"invalid_request_error","code":null}}`,
		`{"error":{"code":429,"message":"x"}}`,
		`{"error":"upstream overloaded","model":"m"}`,
		`{"error":null,"model":"m","usage":{"prompt_tokens":1,"input_tokens":2,"completion_tokens":-1}}`,
		`{"\u0065rror":{"c\u006fde":"\u00e9t\u00e9"},"model":"\ud83d\ude00"}`,
		`{"error":{"message":"a","message":"b","code":"x","code":""}}`,
		`{"usage":{"prompt_tokens":1e3,"completion_tokens":1234567890123456789}}`,
		`{"model":"caf` + "\xe9" + `"}`,
		` [1,2] `, `<html>502</html>`, `{"a":1}x`, `{}`, ``,
	} {
		f.Add(s)
	}
}

// FuzzInspectBody holds InspectBody to oracleBody on any bytes.
func FuzzInspectBody(f *testing.F) {
	bodySeeds(f)
	f.Fuzz(func(t *testing.T, d string) {
		got, want := InspectBody([]byte(d)), oracleBody([]byte(d))
		if !equal(got, want) {
			t.Fatalf("InspectBody(%q)\n got %+v\nwant %+v", d, got, want)
		}
	})
}

// FuzzErrorCode holds ErrorCode to oracleErrorCode on any bytes.
func FuzzErrorCode(f *testing.F) {
	bodySeeds(f)
	f.Fuzz(func(t *testing.T, d string) {
		if got, want := ErrorCode([]byte(d)), oracleErrorCode([]byte(d)); got != want {
			t.Fatalf("ErrorCode(%q) = %q, want %q", d, got, want)
		}
	})
}

// oracleResponses is InspectResponses' contract. The event type is the
// `event:` line, or the payload's "type" when the line is absent.
func oracleResponses(f sse.Frame) Info {
	if !f.HasData {
		if f.Event == "error" {
			return Info{Kind: Error}
		}
		return Info{Kind: Hold}
	}
	if strings.TrimSpace(string(f.Data)) == "[DONE]" {
		return Info{Kind: Done}
	}
	ms, ok := members(f.Data)
	if !ok {
		if f.Event == "error" {
			return Info{Kind: Error}
		}
		return Info{Kind: Malformed}
	}
	ev := f.Event
	if ev == "" {
		ev, _ = jsonString(last(ms, "type"))
	}
	var info Info
	var respErr json.RawMessage
	if r, ok := members(last(ms, "response")); ok {
		info.Model, _ = jsonString(last(r, "model"))
		if u := last(r, "usage"); len(u) > 0 && u[0] == '{' {
			info.Usage = oracleUsage(u)
		}
		respErr = last(r, "error")
	}
	errVal := last(ms, "error")
	isErr := len(errVal) > 0 && (errVal[0] == '{' || errVal[0] == '"')
	delta, deltaOK := jsonString(last(ms, "delta"))
	switch {
	case ev == "error":
		info.Kind = Error
		if isErr {
			info.ErrorMessage = oracleMessage(errVal)
		} else {
			s, _ := jsonString(last(ms, "message"))
			info.ErrorMessage = oracleTruncate(s)
		}
	case ev == "response.failed":
		info.Kind = Error
		info.ErrorMessage = oracleMessage(respErr)
	case ev == "response.completed", ev == "response.incomplete":
		info.Kind, info.FinishReason = Finish, true
	case isErr:
		info.Kind = Error
		info.ErrorMessage = oracleMessage(errVal)
	case len(ev) > len(".delta") && strings.HasSuffix(ev, ".delta") && deltaOK && delta != "":
		info.Kind = Content
		switch ev {
		case "response.output_text.delta":
			info.Text = []byte(delta)
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			info.ToolCalls = true
		}
	default:
		info.Kind = Hold
	}
	return info
}

// FuzzInspectResponses holds InspectResponses to oracleResponses.
func FuzzInspectResponses(f *testing.F) {
	for _, tc := range responsesCases {
		f.Add(string(tc.frame.Data), tc.frame.Event, tc.frame.HasData)
		f.Add(string(tc.frame.Data), "", tc.frame.HasData) // a proxy dropped the event lines
	}
	f.Add(`{"type":"response.output_text.d\u0065lta","delta":"h\u00e9"}`, "", true)
	f.Add(`{"type":"error","message":"a","message":"b","error":null}`, "", true)
	f.Add(`{"type":"response.failed","response":{"error":"quota","model":"m","usage":{"input_tokens":3}}}`, "", true)
	f.Add(`{"type":".delta","delta":"x"}`, "", true)
	// Duplicate members: the last wins whatever its type.
	f.Add(`{"type":"response.completed","type":1}`, "", true)
	f.Add(`{"type":"response.completed","response":{"usage":{"input_tokens":3},"usage":null}}`, "", true)
	f.Add(`{"type":"error","error":"a","error":null,"message":"m"}`, "", true)
	f.Add(`not json`, "error", true)
	f.Add(``, "error", false)
	f.Fuzz(func(t *testing.T, d, ev string, hasData bool) {
		fr := sse.Frame{Data: []byte(d), HasData: hasData, Event: ev}
		if got, want := InspectResponses(fr), oracleResponses(fr); !equal(got, want) {
			t.Fatalf("InspectResponses(event %q, data %q, hasData %v)\n got %+v\nwant %+v", ev, d, hasData, got, want)
		}
	})
}

// A chat `event: error` frame reads its members like every body: of
// duplicate "error" members the last wins, so a trailing null leaves the
// top-level message.
func TestChatErrorEventLastMemberWins(t *testing.T) {
	got := InspectChat(event("error", `{"error":"a","error":null,"message":"m"}`))
	if got.Kind != Error || got.ErrorMessage != "m" {
		t.Fatalf("got %v %q, want error %q", got.Kind, got.ErrorMessage, "m")
	}
}

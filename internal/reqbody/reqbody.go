package reqbody

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/hopgate/hopgate/internal/jsonscan"
)

// Errors returned by Parse. Their messages are written for a client 400.
var (
	ErrInvalidJSON  = errors.New("request body is not valid JSON")
	ErrNotObject    = errors.New("request body must be a JSON object")
	ErrDuplicateKey = errors.New("request body has an ambiguous top-level key")
	ErrInvalidField = errors.New("request body has a field of the wrong type")
	// ErrNoMessages is returned when an assistant prefix is requested but the
	// body has no top-level "messages" array.
	ErrNoMessages = errors.New(`request body has no "messages" array`)
)

// Fields are the routing fields of a request body plus the byte offsets the
// rewriters need. They describe one body: pass them only with that body.
type Fields struct {
	Model        string
	ModelPresent bool
	Stream       bool
	IncludeUsage bool // stream_options.include_usage == true
	// MaxTokens is the largest of max_tokens, max_completion_tokens and
	// max_output_tokens (Responses) present as integers; MaxTokensPresent
	// says whether any was. The wallet sizes a reservation from it, so an
	// upstream must read the same value: these keys are routing keys too.
	MaxTokens        int64
	MaxTokensPresent bool

	bodyLen  int
	objStart int  // index of the top-level '{'
	objEnd   int  // index of the top-level '}'
	members  int  // top-level members
	model    span // value of "model"
	opts     span // value of "stream_options" (object or null)
	optsN    int  // members of stream_options
	usage    span // value of stream_options.include_usage
	messages span // value of "messages"
}

// span is a byte range; the zero span means absent (a member value never
// starts at offset 0).
type span struct{ s, e int }

func (s span) set() bool { return s.e > s.s }

// routing keys: each may appear at most once, in exactly this spelling.
const (
	keyNone = iota
	keyModel
	keyStream
	keyStreamOptions
	keyMessages
	keyMaxTokens
	keyMaxCompletionTokens
	keyMaxOutputTokens
)

var routingKeys = [...]string{keyModel: "model", keyStream: "stream", keyStreamOptions: "stream_options", keyMessages: "messages",
	keyMaxTokens: "max_tokens", keyMaxCompletionTokens: "max_completion_tokens", keyMaxOutputTokens: "max_output_tokens"}

// Parse validates body (json.Valid grammar, a single top-level object) and
// returns its routing fields. Only top-level keys are read; "model" inside
// messages or tools is never matched.
//
// A routing key that appears twice, or in another ASCII case ("Model"), is
// rejected with ErrDuplicateKey: JSON decoders disagree on which duplicate
// wins, and Go's encoding/json matches keys case-insensitively, so the
// upstream could read a different model or stream flag than the gateway.
func Parse(body []byte) (Fields, error) {
	f := Fields{bodyLen: len(body)}
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) {
		return f, ErrInvalidJSON
	}
	if body[i] != '{' {
		if jsonscan.Valid(body) {
			return f, ErrNotObject
		}
		return f, ErrInvalidJSON
	}
	f.objStart = i
	var seen [len(routingKeys)]bool
	obj := jsonscan.Members(body, i)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		k := routingKey(key, esc)
		if k == keyNone {
			continue
		}
		if seen[k] || !jsonscan.KeyIs(key, esc, routingKeys[k], false) {
			return f, fmt.Errorf("%w: %q (keys must appear once, in lower case)", ErrDuplicateKey, routingKeys[k])
		}
		seen[k] = true
		switch k {
		case keyModel:
			if body[vs] != '"' {
				return f, fmt.Errorf(`%w: "model" must be a string`, ErrInvalidField)
			}
			if raw := body[vs+1 : ve-1]; bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
				f.Model = string(raw)
			} else {
				f.Model = string(jsonscan.Unquote(nil, raw))
			}
			f.ModelPresent = true
			f.model = span{vs, ve}
		case keyStream:
			v, ok := boolOrNull(body[vs:ve])
			if !ok {
				return f, fmt.Errorf(`%w: "stream" must be a boolean`, ErrInvalidField)
			}
			f.Stream = v
		case keyStreamOptions:
			f.opts = span{vs, ve}
			if err := f.parseStreamOptions(body, vs); err != nil {
				return f, err
			}
		case keyMessages:
			f.messages = span{vs, ve}
		case keyMaxTokens, keyMaxCompletionTokens, keyMaxOutputTokens:
			n, present, ok := tokenCount(body[vs:ve])
			if !ok {
				return f, fmt.Errorf("%w: %q must be a non-negative integer", ErrInvalidField, routingKeys[k])
			}
			if present {
				f.MaxTokens, f.MaxTokensPresent = max(f.MaxTokens, n), true
			}
		}
	}
	if obj.Err() {
		return f, ErrInvalidJSON
	}
	if jsonscan.SkipWS(body, obj.End()) != len(body) {
		return f, ErrInvalidJSON
	}
	f.objEnd = obj.End() - 1
	f.members = obj.Len()
	return f, nil
}

func (f *Fields) parseStreamOptions(body []byte, at int) error {
	switch body[at] {
	case 'n':
		return nil
	case '{':
	default:
		return fmt.Errorf(`%w: "stream_options" must be an object`, ErrInvalidField)
	}
	obj := jsonscan.Members(body, at)
	for {
		key, esc, vs, ve, ok := obj.Next()
		if !ok {
			break
		}
		if !jsonscan.KeyIs(key, esc, "include_usage", true) {
			continue
		}
		if f.usage.set() || !jsonscan.KeyIs(key, esc, "include_usage", false) {
			return fmt.Errorf(`%w: "stream_options.include_usage" (keys must appear once, in lower case)`, ErrDuplicateKey)
		}
		v, ok := boolOrNull(body[vs:ve])
		if !ok {
			return fmt.Errorf(`%w: "stream_options.include_usage" must be a boolean`, ErrInvalidField)
		}
		f.IncludeUsage = v
		f.usage = span{vs, ve}
	}
	f.optsN = obj.Len()
	return nil // syntax errors surface from the top-level iteration
}

func routingKey(key []byte, esc bool) int {
	// Fast reject on length: unescaped keys must have the exact length.
	if !esc {
		switch len(key) {
		case 5, 6, 8, 10, 14, 17, 21:
		default:
			return keyNone
		}
	}
	for k := keyModel; k < len(routingKeys); k++ {
		if jsonscan.KeyIs(key, esc, routingKeys[k], true) {
			return k
		}
	}
	return keyNone
}

// maxTokenCount bounds a token limit: far beyond any model's, and small
// enough that a price times it stays far from int64 overflow.
const maxTokenCount = 1 << 40

// tokenCount reads a token limit: a non-negative JSON integer (an integral
// number such as 1e3 or 100.0 is one too, as providers read it), or null
// for none. Limits above maxTokenCount are clamped to it.
func tokenCount(v []byte) (n int64, present, ok bool) {
	if string(v) == "null" {
		return 0, false, true
	}
	if len(v) == 0 || v[0] < '0' || v[0] > '9' {
		return 0, false, false
	}
	if i := bytes.IndexAny(v, ".eE"); i < 0 {
		if len(v) > 13 { // more digits than maxTokenCount has
			return maxTokenCount, true, true
		}
		for _, c := range v {
			n = n*10 + int64(c-'0')
		}
		return min(n, maxTokenCount), true, true
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) {
		return 0, false, false
	}
	return int64(min(f, maxTokenCount)), true, true
}

func boolOrNull(v []byte) (value, ok bool) {
	switch string(v) {
	case "true":
		return true, true
	case "false", "null":
		return false, true
	}
	return false, false
}

// Options says what Rewrite changes.
type Options struct {
	// Model replaces the top-level model value ("" leaves it). If the body has
	// no model key, one is inserted first in the object.
	Model string
	// IncludeUsage ensures stream_options.include_usage is true. It is
	// ignored when the request does not stream: OpenAI rejects
	// stream_options on non-streaming requests with a 400.
	IncludeUsage bool
	// AssistantPrefix, when set, appends {"role":"assistant","content":…} to
	// the top-level messages array (prefill for mid-stream resume).
	AssistantPrefix *string
}

type edit struct {
	at, end int // replaced range body[at:end]; at == end inserts
	kind    uint8
}

const (
	editModelReplace = iota
	editModelInsert
	editUsageTrue     // replace include_usage value with true
	editUsageInOpts   // insert include_usage into stream_options
	editOptsReplace   // replace stream_options: null
	editOptsInsert    // insert stream_options at the end of the object
	editAppendMessage // insert before the closing ']' of messages
)

// Rewrite applies opts to body in one pass and appends the result to dst.
// Bytes outside the edited values are copied unchanged. f must come from
// Parse(body). With enough capacity in dst it does not allocate.
func Rewrite(dst, body []byte, f Fields, opts Options) ([]byte, error) {
	if f.bodyLen != len(body) || f.objEnd == 0 {
		panic("reqbody: Fields do not describe this body")
	}
	var edits [3]edit
	n := 0
	extra := 0
	if opts.Model != "" {
		extra += 6*len(opts.Model) + len(`"model":"",`)
		if f.ModelPresent {
			edits[n] = edit{f.model.s, f.model.e, editModelReplace}
		} else {
			edits[n] = edit{f.objStart + 1, f.objStart + 1, editModelInsert}
		}
		n++
	}
	if opts.IncludeUsage && f.Stream && !f.IncludeUsage {
		extra += len(`,"stream_options":{"include_usage":true}`)
		switch {
		case f.usage.set():
			edits[n] = edit{f.usage.s, f.usage.e, editUsageTrue}
		case f.opts.set() && body[f.opts.s] == '{':
			edits[n] = edit{f.opts.s + 1, f.opts.s + 1, editUsageInOpts}
		case f.opts.set():
			edits[n] = edit{f.opts.s, f.opts.e, editOptsReplace}
		default:
			edits[n] = edit{f.objEnd, f.objEnd, editOptsInsert}
		}
		n++
	}
	if opts.AssistantPrefix != nil {
		if !f.messages.set() || body[f.messages.s] != '[' {
			return dst, ErrNoMessages
		}
		extra += 6*len(*opts.AssistantPrefix) + len(`,{"role":"assistant","content":""}`)
		edits[n] = edit{f.messages.e - 1, f.messages.e - 1, editAppendMessage}
		n++
	}
	// Stable: at equal offsets (only possible for an empty object, where the
	// model insert and the stream_options insert meet) the model goes first.
	slices.SortStableFunc(edits[:n], func(a, b edit) int { return a.at - b.at })

	dst = slices.Grow(dst, len(body)+extra)
	last := 0
	modelInserted := false
	for _, e := range edits[:n] {
		dst = append(dst, body[last:e.at]...)
		last = e.end
		switch e.kind {
		case editModelReplace:
			dst = jsonscan.AppendQuote(dst, opts.Model)
		case editModelInsert:
			dst = append(dst, `"model":`...)
			dst = jsonscan.AppendQuote(dst, opts.Model)
			if f.members > 0 {
				dst = append(dst, ',')
			}
			modelInserted = true
		case editUsageTrue:
			dst = append(dst, "true"...)
		case editUsageInOpts:
			dst = append(dst, `"include_usage":true`...)
			if f.optsN > 0 {
				dst = append(dst, ',')
			}
		case editOptsReplace:
			dst = append(dst, `{"include_usage":true}`...)
		case editOptsInsert:
			if f.members > 0 || modelInserted {
				dst = append(dst, ',')
			}
			dst = append(dst, `"stream_options":{"include_usage":true}`...)
		case editAppendMessage:
			if jsonscan.SkipWS(body, f.messages.s+1) != f.messages.e-1 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":"assistant","content":`...)
			dst = jsonscan.AppendQuote(dst, *opts.AssistantPrefix)
			dst = append(dst, '}')
		}
	}
	return append(dst, body[last:]...), nil
}

// RewriteModel returns body with only the top-level model value replaced by
// upstreamModel (JSON-escaped), appended to dst. If the body has no model
// key, one is inserted.
func RewriteModel(dst, body []byte, f Fields, upstreamModel string) []byte {
	out, _ := Rewrite(dst, body, f, Options{Model: upstreamModel})
	return out
}

// WithIncludeUsage ensures "stream_options":{"include_usage":true} on a
// streaming request (adding the key, or setting include_usage inside an
// existing stream_options), appended to dst. Non-streaming bodies are copied
// unchanged.
func WithIncludeUsage(dst, body []byte, f Fields) []byte {
	out, _ := Rewrite(dst, body, f, Options{IncludeUsage: true})
	return out
}

// AppendAssistantPrefix appends {"role":"assistant","content":prefix} as the
// last element of the top-level messages array, appended to dst. It fails
// with the Parse error for an invalid body, or ErrNoMessages.
func AppendAssistantPrefix(dst, body []byte, prefix string) ([]byte, error) {
	f, err := Parse(body)
	if err != nil {
		return dst, err
	}
	return Rewrite(dst, body, f, Options{AssistantPrefix: &prefix})
}

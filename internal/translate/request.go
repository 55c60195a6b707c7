package translate

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
)

// Request is a translated request body and what the caller needs to serve
// its answer.
type Request struct {
	// Body is the request for the target family.
	Body []byte
	// Model is the client's "model" field.
	Model string
	// Stream: the client asked for a stream.
	Stream bool
	// IncludeUsage: a streaming client wants the usage in its stream (an
	// OpenAI client's stream_options.include_usage; always true for an
	// Anthropic client, whose message_delta carries usage).
	IncludeUsage bool
	// Dropped names, sorted and without duplicates, the request fields (as
	// JSON paths with [] for any index) that the target family cannot
	// express and that were left out or adjusted: record them on the hop's
	// span.
	Dropped []string
	// EncryptedReasoning: a Responses client asked for
	// include: ["reasoning.encrypted_content"]; its answer's reasoning
	// items carry their thinking blocks for replay (reasoning.go).
	EncryptedReasoning bool
}

// dropped collects the names of dropped fields.
type dropped map[string]struct{}

func (d dropped) add(name string) { d[name] = struct{}{} }

func (d dropped) remove(name string) { delete(d, name) }

func (d dropped) list() []string {
	if len(d) == 0 {
		return nil
	}
	out := make([]string, 0, len(d))
	for k := range d {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// isNull: absent or JSON null. A null field is treated as absent in both
// families, so it is never reported as dropped.
func isNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) == 0 || string(v) == "null"
}

// decodeObject reads the top level of a request body. Duplicate keys keep
// the last value, as encoding/json does for the typed decode.
func decodeObject(body []byte) (map[string]json.RawMessage, *Error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, invalid(CodeInvalidRequest, "", "request body must be a JSON object")
	}
	return top, nil
}

func field(name string, v json.RawMessage, dst any) *Error {
	if isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return invalid(CodeInvalidRequest, name, "invalid value for "+name)
	}
	return nil
}

func idx(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// marshal encodes without HTML escaping: <, > and & stay literal, as the
// providers send them.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("translate: marshal: " + err.Error()) // only our own types are encoded
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// sortedKeys makes the first error reported independent of map order.
func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

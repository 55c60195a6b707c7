package reqbody

import (
	"errors"
	"testing"
)

// Why: the wallet reserves for the token limit the upstream will read, so
// the gateway must read the same one: the largest of the three spellings,
// each at most once and in lower case, as for the other routing keys.
func TestParseMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		n       int64
		present bool
		err     error
	}{
		{"absent", `{"model":"m"}`, 0, false, nil},
		{"max_tokens", `{"model":"m","max_tokens":256}`, 256, true, nil},
		{"max_completion_tokens", `{"max_completion_tokens":1000,"model":"m"}`, 1000, true, nil},
		{"responses max_output_tokens", `{"model":"m","max_output_tokens":64}`, 64, true, nil},
		{"largest of two", `{"max_tokens":10,"max_completion_tokens":300}`, 300, true, nil},
		{"null", `{"max_tokens":null}`, 0, false, nil},
		{"zero", `{"max_tokens":0}`, 0, true, nil},
		{"integral float", `{"max_tokens":100.0}`, 100, true, nil},
		{"exponent", `{"max_tokens":1e3}`, 1000, true, nil},
		{"huge clamps", `{"max_tokens":123456789012345678901234567890}`, maxTokenCount, true, nil},
		{"huge exponent clamps", `{"max_tokens":1e300}`, maxTokenCount, true, nil},
		{"escaped key", `{"max_tok\u0065ns":7}`, 7, true, nil},
		{"fraction", `{"max_tokens":1.5}`, 0, false, ErrInvalidField},
		{"negative", `{"max_tokens":-1}`, 0, false, ErrInvalidField},
		{"string", `{"max_tokens":"100"}`, 0, false, ErrInvalidField},
		{"duplicate", `{"max_tokens":10,"max_tokens":100000}`, 0, false, ErrDuplicateKey},
		{"case variant", `{"max_tokens":10,"Max_Tokens":100000}`, 0, false, ErrDuplicateKey},
		{"nested is not routing", `{"metadata":{"max_tokens":"x"},"max_tokens":5}`, 5, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.body))
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && (f.MaxTokens != tc.n || f.MaxTokensPresent != tc.present) {
				t.Fatalf("MaxTokens = %d (present %v), want %d (%v)", f.MaxTokens, f.MaxTokensPresent, tc.n, tc.present)
			}
		})
	}
}

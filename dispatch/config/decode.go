package config

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// This file is the strict YAML walker: it reads a yaml.Node tree by hand so
// that every mistake carries the line of the node that caused it, and so that
// the walk goes on after a mistake instead of stopping at the first one (the
// yaml library's own strict decoding stops at the first syntax problem and
// reports type problems without telling which key was explicitly set).

// val is one scalar read from the file: set tells an explicit key from an
// absent one (profiles depend on it), node locates it for later errors.
type val[T any] struct {
	v    T
	set  bool
	node *yaml.Node
}

func (v val[T]) isSet() bool { return v.set }

func (v val[T]) or(def T) T {
	if v.set {
		return v.v
	}
	return def
}

// line is the line of the value, or fallback when the key was absent.
func (v val[T]) line(fallback *yaml.Node) *yaml.Node {
	if v.node != nil {
		return v.node
	}
	return fallback
}

// Limits on the walk. Aliases let a small file reference a large subtree many
// times; the budget bounds the work and the error list whatever the input.
const (
	maxVisits = 1 << 20
	maxErrors = 500
)

type parser struct {
	errs    ErrorList
	getenv  func(string) (string, bool)
	visits  int
	aborted bool
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		if !p.aborted {
			p.aborted = true
			p.errs = append(p.errs, Error{Line: 0, Msg: fmt.Sprintf("more than %d mistakes; stopped", maxErrors)})
		}
		return
	}
	line := 0
	if n != nil && n.Line > 0 {
		line = n.Line
	}
	p.errs = append(p.errs, Error{Line: line, Msg: fmt.Sprintf(format, args...)})
}

// visit charges one node to the budget; false means stop walking.
func (p *parser) visit(n *yaml.Node) bool {
	if p.aborted {
		return false
	}
	p.visits++
	if p.visits > maxVisits {
		p.aborted = true
		p.errs = append(p.errs, Error{Line: n.Line, Msg: "config too large or too many aliases; stopped"})
		return false
	}
	return true
}

// deref follows aliases. An anchor can never sit on an alias, so one step is
// enough; the loop is only defensive.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names a node's type for "must be X, not Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "empty"
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the number " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		}
		return fmt.Sprintf("%q (%s)", n.Value, strings.TrimPrefix(n.Tag, "!!"))
	case yaml.DocumentNode:
		return "a document"
	}
	return "an unknown node"
}

// in builds the subject of a message: `header_timeout in policy of model "m"`.
func in(key, ctx string) string {
	if ctx == "" {
		return key
	}
	return key + " in " + ctx
}

type handler func(k, v *yaml.Node)
type fields map[string]handler

// mapping walks n as a mapping with a closed set of keys. Unknown and
// duplicate keys are errors at the key's line; a null value (a key with
// nothing after it) stands for an empty mapping. It reports whether n was a
// mapping.
func (p *parser) mapping(n *yaml.Node, what string, fs fields) bool {
	n = deref(n)
	if n == nil || !p.visit(n) {
		return false
	}
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping, not %s", what, describe(n))
		return false
	}
	first := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || !p.visit(k) {
			return false
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.errorf(k, "keys of %s must be strings, not %s", what, describe(k))
			continue
		}
		if k.Tag == "!!merge" {
			p.errorf(k, "merge keys (<<) are not supported in %s; write the keys out", what)
			continue
		}
		if line, dup := first[k.Value]; dup {
			p.errorf(k, "duplicate key %q in %s (first set at line %d)", k.Value, what, line)
			continue
		}
		first[k.Value] = k.Line
		h, ok := fs[k.Value]
		if !ok {
			p.errorf(k, "unknown key %q in %s (allowed: %s)", k.Value, what, allowed(fs))
			continue
		}
		h(k, v)
	}
	return true
}

func allowed(fs fields) string {
	keys := make([]string, 0, len(fs))
	for k := range fs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// sequence walks n as a list, calling fn for each item. A null value stands
// for an empty list. It reports whether n was a list (or null).
func (p *parser) sequence(n *yaml.Node, what string, fn func(i int, item *yaml.Node)) bool {
	n = deref(n)
	if n == nil || !p.visit(n) {
		return false
	}
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "%s must be a list, not %s", what, describe(n))
		return false
	}
	for i, item := range n.Content {
		if !p.visit(item) {
			return false
		}
		fn(i, item)
	}
	return true
}

// scalar returns the dereferenced scalar node, or nil after reporting why
// the value is not a usable scalar.
func (p *parser) scalar(n *yaml.Node, what, want string) *yaml.Node {
	n = deref(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n, "%s must be %s, not %s", what, want, describe(n))
		return nil
	}
	return n
}

// str reads a string. `${VAR}` is rejected everywhere: the design allows
// environment values only through api_key_env and token_env, so a
// template-looking value is a mistake, never a secret to expand.
func (p *parser) str(n *yaml.Node, what string) val[string] {
	s := p.scalar(n, what, "a string")
	if s == nil {
		return val[string]{}
	}
	if s.Tag != "!!str" {
		p.errorf(s, "%s must be a string, not %s (quote it)", what, describe(s))
		return val[string]{}
	}
	if strings.Contains(s.Value, "${") {
		p.errorf(s, "%s: ${...} interpolation is not supported; put secrets in an environment variable and write its bare name in api_key_env (channels) or admin.token_env", what)
		return val[string]{}
	}
	return val[string]{v: s.Value, set: true, node: s}
}

// enum reads a string that must be one of choices.
func (p *parser) enum(n *yaml.Node, what string, choices ...string) val[string] {
	v := p.str(n, what)
	if !v.set {
		return v
	}
	for _, c := range choices {
		if v.v == c {
			return v
		}
	}
	p.errorf(v.node, "%s must be one of %s, not %q", what, strings.Join(choices, ", "), v.v)
	return val[string]{}
}

func (p *parser) integer(n *yaml.Node, what string, min int64) val[int64] {
	s := p.scalar(n, what, "an integer")
	if s == nil {
		return val[int64]{}
	}
	var i int64
	if s.Tag != "!!int" || s.Decode(&i) != nil {
		p.errorf(s, "%s must be an integer, not %s", what, describe(s))
		return val[int64]{}
	}
	if i < min {
		p.errorf(s, "%s must be at least %d, not %d", what, min, i)
		return val[int64]{}
	}
	return val[int64]{v: i, set: true, node: s}
}

// count reads a small non-negative integer that fits an int everywhere.
func (p *parser) count(n *yaml.Node, what string, min int64) val[int] {
	v := p.integer(n, what, min)
	if !v.set {
		return val[int]{}
	}
	if v.v > math.MaxInt32 {
		p.errorf(v.node, "%s is too large: %d", what, v.v)
		return val[int]{}
	}
	return val[int]{v: int(v.v), set: true, node: v.node}
}

// Upper bounds of breaker counts. The count breaker keeps one timestamp per
// failure, allocated up front, so `failures: 1000000000` would allocate
// gigabytes per channel; no real policy needs more than these. The rate
// breaker keeps one bucket per second of its window, allocated up front.
const (
	MaxBreakerFailures    = 1000
	MaxBreakerMinRequests = 1_000_000
	MaxBreakerWindow      = time.Hour
	// The trace ring allocates one slot per trace up front.
	MaxTraceRingTraces = 1_000_000
	// Early warning: its ring's memory is bounded whatever the durations;
	// these bound what can mean anything at all.
	MaxEarlyWarningDuration   = time.Hour
	MaxEarlyWarningMinSamples = 100_000
)

// countMax is count with an upper bound.
func (p *parser) countMax(n *yaml.Node, what string, min, max int64) val[int] {
	v := p.count(n, what, min)
	if v.set && int64(v.v) > max {
		p.errorf(v.node, "%s must be at most %d, not %d", what, max, v.v)
		return val[int]{}
	}
	return v
}

func (p *parser) number(n *yaml.Node, what string) val[float64] {
	s := p.scalar(n, what, "a number")
	if s == nil {
		return val[float64]{}
	}
	var f float64
	if (s.Tag != "!!int" && s.Tag != "!!float") || s.Decode(&f) != nil {
		p.errorf(s, "%s must be a number, not %s", what, describe(s))
		return val[float64]{}
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		p.errorf(s, "%s must be a finite number, not %s", what, s.Value)
		return val[float64]{}
	}
	return val[float64]{v: f, set: true, node: s}
}

func (p *parser) boolean(n *yaml.Node, what string) val[bool] {
	s := p.scalar(n, what, "true or false")
	if s == nil {
		return val[bool]{}
	}
	var b bool
	if s.Tag != "!!bool" || s.Decode(&b) != nil {
		p.errorf(s, "%s must be true or false, not %s", what, describe(s))
		return val[bool]{}
	}
	return val[bool]{v: b, set: true, node: s}
}

// duration reads a Go duration ("60s", "5m", "1m30s"); a bare 0 is accepted
// because time.ParseDuration accepts it. Negative durations are mistakes.
func (p *parser) duration(n *yaml.Node, what string, positive bool) val[time.Duration] {
	s := p.scalar(n, what, "a duration")
	if s == nil {
		return val[time.Duration]{}
	}
	d, err := time.ParseDuration(s.Value)
	if (s.Tag != "!!str" && s.Tag != "!!int") || err != nil {
		p.errorf(s, "%s must be a duration like 60s or 5m, not %s", what, describe(s))
		return val[time.Duration]{}
	}
	if d < 0 {
		p.errorf(s, "%s must not be negative, got %s", what, s.Value)
		return val[time.Duration]{}
	}
	if positive && d == 0 {
		p.errorf(s, "%s must be greater than 0", what)
		return val[time.Duration]{}
	}
	return val[time.Duration]{v: d, set: true, node: s}
}

// strList reads a list of strings.
func (p *parser) strList(n *yaml.Node, what string) val[[]val[string]] {
	var out []val[string]
	ok := p.sequence(n, what, func(i int, item *yaml.Node) {
		if s := p.str(item, fmt.Sprintf("%s[%d]", what, i)); s.set {
			out = append(out, s)
		}
	})
	if !ok {
		return val[[]val[string]]{}
	}
	return val[[]val[string]]{v: out, set: true, node: deref(n)}
}

// peek returns a string key of a mapping without validating it, to name the
// mapping in messages before it has been walked ("channel \"openai-eu\"").
func peek(n *yaml.Node, key string) (string, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return "", false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k != nil && v != nil && k.Kind == yaml.ScalarNode && k.Value == key &&
			v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value != "" {
			return v.Value, true
		}
	}
	return "", false
}

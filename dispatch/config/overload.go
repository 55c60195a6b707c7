package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/hopgate/hopgate/dispatch/overload"
)

// Overload configures overload protection (DESIGN.md §13, package
// dispatch/overload): the buffer budget, the admission bounds, and the
// bound on one buffered (non-streaming) upstream answer per operation.
type Overload struct {
	// BudgetBytes is the buffer budget (0: BudgetFraction of GOMEMLIMIT
	// when it is set, else 256 MiB).
	BudgetBytes    int64
	BudgetFraction float64 // default overload.DefaultBudgetFraction, 0.25
	// MaxInFlight and MaxStreams bound requests in flight and streaming
	// requests (0: derived from the budget).
	MaxInFlight, MaxStreams int64
	// MaxResponseBytes bounds one buffered upstream answer, per operation;
	// an answer beyond it is a failed hop.
	MaxResponseBytes map[string]int64
}

// Default bounds of one buffered upstream answer. A chat or completion
// answer is text (kilobytes); embeddings of a 2048-input batch at 3072
// dimensions and b64 images legitimately reach tens of MiB. With a budget
// of a few hundred MiB, 64 MiB for every operation let four slow answers
// take it all.
const (
	DefaultMaxResponseBytes      = 16 << 20
	DefaultMaxResponseBytesLarge = 64 << 20
)

// MaxResponse is the bound on one buffered answer of operation op.
func (o Overload) MaxResponse(op string) int64 {
	if n, ok := o.MaxResponseBytes[op]; ok {
		return n
	}
	return DefaultMaxResponseBytes
}

type rawOverload struct {
	node           *yaml.Node
	budgetBytes    val[int64]
	budgetFraction val[float64]
	maxInFlight    val[int64]
	maxStreams     val[int64]
	maxResponse    map[string]val[int64]
}

func (p *parser) overload(n *yaml.Node) rawOverload {
	o := rawOverload{node: n, maxResponse: map[string]val[int64]{}}
	p.mapping(n, "overload", fields{
		"budget_bytes": func(_, v *yaml.Node) { o.budgetBytes = p.integer(v, "budget_bytes in overload", 0) },
		"budget_fraction": func(_, v *yaml.Node) {
			o.budgetFraction = p.number(v, "budget_fraction in overload")
			if o.budgetFraction.set && (o.budgetFraction.v <= 0 || o.budgetFraction.v > 1) {
				p.errorf(o.budgetFraction.node, "budget_fraction in overload must be in (0, 1], not %v", o.budgetFraction.v)
			}
		},
		"max_in_flight": func(_, v *yaml.Node) { o.maxInFlight = p.integer(v, "max_in_flight in overload", 0) },
		"max_streams":   func(_, v *yaml.Node) { o.maxStreams = p.integer(v, "max_streams in overload", 0) },
		"max_response_bytes": func(_, v *yaml.Node) {
			f := fields{}
			for _, op := range append([]string{"default"}, operations...) {
				f[op] = func(k, v *yaml.Node) {
					o.maxResponse[k.Value] = p.integer(v, k.Value+" in max_response_bytes in overload", 1024)
				}
			}
			p.mapping(v, "max_response_bytes in overload", f)
		},
	})
	return o
}

// resolve fills the defaults.
func (o rawOverload) resolve() Overload {
	r := Overload{
		BudgetBytes:      o.budgetBytes.or(0),
		BudgetFraction:   o.budgetFraction.or(overload.DefaultBudgetFraction),
		MaxInFlight:      o.maxInFlight.or(0),
		MaxStreams:       o.maxStreams.or(0),
		MaxResponseBytes: map[string]int64{},
	}
	def := o.maxResponse["default"].or(DefaultMaxResponseBytes)
	for _, op := range operations {
		n := def
		switch op {
		case OpEmbeddings, OpImages:
			n = max(def, DefaultMaxResponseBytesLarge)
		}
		r.MaxResponseBytes[op] = o.maxResponse[op].or(n)
	}
	return r
}

package breaker

import "github.com/hopgate/hopgate/internal/keyed"

// Set is the process-wide registry of breakers keyed by channel id.
type Set struct{ s *keyed.Set[Policy, *Breaker] }

// NewSet returns an empty Set; opts apply to every breaker it creates.
func NewSet(opts ...Option) *Set {
	return &Set{keyed.New(func(name string, p Policy) *Breaker { return New(name, p, opts...) })}
}

// Get returns the breaker of channel name, creating it on first use. If the
// existing breaker's policy differs from p (after defaults), it is replaced by
// a fresh closed one: a config reload starts that channel over. Otherwise its
// state is kept.
func (s *Set) Get(name string, p Policy) *Breaker { return s.s.Get(name, p.WithDefaults()) }

// Retain drops the breakers of the channels keep rejects (a reload removed
// them); the others keep their state.
func (s *Set) Retain(keep func(name string) bool) { s.s.Retain(keep) }

// All returns the breakers sorted by name.
func (s *Set) All() []*Breaker { return s.s.All() }

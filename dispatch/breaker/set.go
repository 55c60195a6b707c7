package breaker

import (
	"slices"
	"strings"
	"sync"
)

// Set is the process-wide registry of breakers keyed by channel id.
type Set struct {
	opts []Option

	mu sync.RWMutex
	m  map[string]*Breaker
}

// NewSet returns an empty Set; opts apply to every breaker it creates.
func NewSet(opts ...Option) *Set {
	return &Set{opts: opts, m: make(map[string]*Breaker)}
}

// Get returns the breaker of channel name, creating it on first use. If the
// existing breaker's policy differs from p (after defaults), it is replaced by
// a fresh closed one: a config reload starts that channel over. Otherwise its
// state is kept.
func (s *Set) Get(name string, p Policy) *Breaker {
	p = p.WithDefaults()
	s.mu.RLock()
	b := s.m[name]
	s.mu.RUnlock()
	if b != nil && b.policy == p {
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b = s.m[name]; b != nil && b.policy == p {
		return b // another goroutine created it meanwhile
	}
	b = New(name, p, s.opts...)
	s.m[name] = b
	return b
}

// All returns the breakers sorted by name.
func (s *Set) All() []*Breaker {
	s.mu.RLock()
	out := make([]*Breaker, 0, len(s.m))
	for _, b := range s.m {
		out = append(out, b)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Breaker) int { return strings.Compare(a.name, b.name) })
	return out
}

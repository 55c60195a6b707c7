// Package keyed is the process-wide registry of per-channel state (breakers,
// early-warning detectors): one value per channel id, kept across config
// reloads while the channel's policy is unchanged, started over when it
// changes, dropped when a reload removes the channel (Retain).
package keyed

import (
	"slices"
	"strings"
	"sync"
)

// Set maps a channel id to its value V, created for a policy P.
type Set[P comparable, V any] struct {
	create func(name string, p P) V

	mu sync.RWMutex
	m  map[string]entry[P, V]
}

type entry[P comparable, V any] struct {
	policy P
	v      V
}

// New returns an empty Set whose values create makes.
func New[P comparable, V any](create func(name string, p P) V) *Set[P, V] {
	return &Set[P, V]{create: create, m: make(map[string]entry[P, V])}
}

// Get returns the value of channel name, creating it on first use. If the
// existing value was created for another policy, it is replaced by a fresh
// one: a config reload starts that channel over. Otherwise it is kept.
func (s *Set[P, V]) Get(name string, p P) V {
	s.mu.RLock()
	e, ok := s.m[name]
	s.mu.RUnlock()
	if ok && e.policy == p {
		return e.v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok = s.m[name]; ok && e.policy == p {
		return e.v // another goroutine created it meanwhile
	}
	e = entry[P, V]{p, s.create(name, p)}
	s.m[name] = e
	return e.v
}

// Retain drops the value of every channel keep rejects and leaves the
// others as they are: a reload forgets the channels it removed, so a
// gateway reloaded many times keeps no state for channels long gone. A
// request still running on the previous configuration may create a
// dropped channel's value again; the next Retain drops it.
func (s *Set[P, V]) Retain(keep func(name string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.m {
		if !keep(name) {
			delete(s.m, name)
		}
	}
}

// Lookup returns the value of channel name, the zero V when there is none.
func (s *Set[P, V]) Lookup(name string) V {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[name].v
}

// All returns the values sorted by channel id.
func (s *Set[P, V]) All() []V {
	s.mu.RLock()
	names := make([]string, 0, len(s.m))
	for n := range s.m {
		names = append(names, n)
	}
	slices.SortFunc(names, strings.Compare)
	out := make([]V, len(names))
	for i, n := range names {
		out[i] = s.m[n].v
	}
	s.mu.RUnlock()
	return out
}

package earlywarning

import (
	"slices"
	"strings"
	"sync"
)

// Set is the process-wide registry of detectors keyed by channel id.
type Set struct {
	opts []Option

	mu sync.RWMutex
	m  map[string]*Detector
}

// NewSet returns an empty Set; opts apply to every detector it creates.
func NewSet(opts ...Option) *Set {
	return &Set{opts: opts, m: make(map[string]*Detector)}
}

// Get returns the detector of channel name, creating it on first use. If
// the existing detector's policy differs from p (after defaults), it is
// replaced by a fresh one: a config reload starts that channel over.
func (s *Set) Get(name string, p Policy) *Detector {
	p = p.WithDefaults()
	s.mu.RLock()
	d := s.m[name]
	s.mu.RUnlock()
	if d != nil && d.policy == p {
		return d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d = s.m[name]; d != nil && d.policy == p {
		return d
	}
	d = New(name, p, s.opts...)
	s.m[name] = d
	return d
}

// Lookup returns the detector of channel name, nil when there is none
// (early warning was never on for it).
func (s *Set) Lookup(name string) *Detector {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[name]
}

// All returns the detectors sorted by name.
func (s *Set) All() []*Detector {
	s.mu.RLock()
	out := make([]*Detector, 0, len(s.m))
	for _, d := range s.m {
		out = append(out, d)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Detector) int { return strings.Compare(a.name, b.name) })
	return out
}

package earlywarning

import "github.com/hopgate/hopgate/internal/keyed"

// Set is the process-wide registry of detectors keyed by channel id.
type Set struct{ s *keyed.Set[Policy, *Detector] }

// NewSet returns an empty Set; opts apply to every detector it creates.
func NewSet(opts ...Option) *Set {
	return &Set{keyed.New(func(name string, p Policy) *Detector { return New(name, p, opts...) })}
}

// Get returns the detector of channel name, creating it on first use. If
// the existing detector's policy differs from p (after defaults), it is
// replaced by a fresh one: a config reload starts that channel over.
func (s *Set) Get(name string, p Policy) *Detector { return s.s.Get(name, p.WithDefaults()) }

// Lookup returns the detector of channel name, nil when there is none
// (early warning was never on for it).
func (s *Set) Lookup(name string) *Detector { return s.s.Lookup(name) }

// Retain drops the detectors of the channels keep rejects (a reload
// removed them); the others keep their state.
func (s *Set) Retain(keep func(name string) bool) { s.s.Retain(keep) }

// All returns the detectors sorted by name.
func (s *Set) All() []*Detector { return s.s.All() }

package telemetry

import (
	"sync"
	"time"
)

// FailoverEntry is one request that did not take the plain first-hop path:
// what on-call reads at /admin/failovers when no trace backend is configured.
type FailoverEntry struct {
	Time        time.Time `json:"time"`
	Model       string    `json:"model"`
	ServedModel string    `json:"served_model,omitempty"`
	Path        string    `json:"path"`
	Outcome     string    `json:"outcome"`
	Status      int       `json:"status"`
	TraceID     string    `json:"trace_id"`
	Attempts    int       `json:"attempts"`
}

// FailoverLog keeps the last n entries in a fixed ring: memory is allocated
// once, so an incident (when every request fails over) cannot grow it.
type FailoverLog struct {
	mu   sync.Mutex
	buf  []FailoverEntry
	next int  // slot of the next Add
	full bool // the ring has wrapped at least once
}

// NewFailoverLog returns a log holding the last n entries (n <= 0 means 200).
func NewFailoverLog(n int) *FailoverLog {
	if n <= 0 {
		n = defaultFailoverLogSize
	}
	return &FailoverLog{buf: make([]FailoverEntry, n)}
}

// Add records e, evicting the oldest entry when full.
func (l *FailoverLog) Add(e FailoverEntry) {
	l.mu.Lock()
	l.buf[l.next] = e
	l.next++
	if l.next == len(l.buf) {
		l.next, l.full = 0, true
	}
	l.mu.Unlock()
}

// List returns a copy of the entries, newest first.
func (l *FailoverLog) List() []FailoverEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	if l.full {
		n = len(l.buf)
	}
	out := make([]FailoverEntry, 0, n)
	for i := range n {
		out = append(out, l.buf[(l.next-1-i+len(l.buf))%len(l.buf)])
	}
	return out
}

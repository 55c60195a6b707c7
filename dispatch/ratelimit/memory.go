package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process Counter (rate_limits.store: memory): one map
// of theoretical arrival times under one lock, swept of empty cells once
// a window.
type Memory struct {
	mu    sync.Mutex
	tat   map[cellKey]int64
	swept int64 // unix ns of the last sweep
}

type cellKey struct {
	tenant, model string
	kind          Kind
}

var _ Counter = (*Memory)(nil)

// NewMemory returns an empty in-process counter.
func NewMemory() *Memory { return &Memory{tat: map[cellKey]int64{}} }

// Take admits cells' units all or none.
func (m *Memory) Take(_ context.Context, now time.Time, cells []Cell) (Verdict, error) {
	var v Verdict
	var next [MaxCells]int64
	t := now.UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(t)
	var fits [MaxCells]bool
	var tats [MaxCells]int64
	allowed := true
	for i, c := range cells {
		tats[i] = m.tat[key(c)]
		next[i], fits[i], v.States[i] = take(tats[i], t, c.N, c.Limit)
		allowed = allowed && fits[i]
	}
	if !allowed {
		v.deny(cells, fits[:len(cells)], tats[:len(cells)], t)
		return v, nil
	}
	v.Allowed = true
	for i, c := range cells {
		m.tat[key(c)] = next[i]
	}
	return v, nil
}

// Adjust moves one cell by delta units.
func (m *Memory) Adjust(_ context.Context, now time.Time, c Cell, delta int64) error {
	t := now.UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key(c)
	tat, ok := m.tat[k]
	if !ok && delta <= 0 {
		return nil
	}
	if next := adjust(tat, t, delta, c.Limit); next > t {
		m.tat[k] = next
	} else {
		delete(m.tat, k)
	}
	return nil
}

// Len is the number of cells held (tests: the sweep forgets empty ones).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.tat)
}

// sweep forgets the cells whose window is empty, at most once a window:
// an idle tenant costs nothing after a minute.
func (m *Memory) sweep(now int64) {
	if now-m.swept < int64(Window) {
		return
	}
	m.swept = now
	for k, tat := range m.tat {
		if tat <= now {
			delete(m.tat, k)
		}
	}
}

func key(c Cell) cellKey { return cellKey{c.Tenant, c.Model, c.Kind} }

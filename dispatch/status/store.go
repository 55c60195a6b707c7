package status

import (
	"context"
	"sort"
	"sync"
	"time"
)

// StatusCount is the number of counted requests of one model in one
// bucket. Minute is the bucket start in UTC, truncated to the minute (to
// the hour or day in what StatusHours and StatusDays return).
type StatusCount struct {
	Minute time.Time
	Model  string
	OK     int64
	Failed int64
}

// Store keeps the status history. AddStatus adds the counts to what the
// store holds for each (Minute, Model): several processes flushing the same
// minute add up. The read methods return every bucket starting at or after
// since, aggregated per minute, hour or UTC day, in any order.
type Store interface {
	AddStatus(ctx context.Context, counts []StatusCount) error
	StatusMinutes(ctx context.Context, since time.Time) ([]StatusCount, error)
	StatusHours(ctx context.Context, since time.Time) ([]StatusCount, error)
	StatusDays(ctx context.Context, since time.Time) ([]StatusCount, error)
}

// Retention of MemoryStore, relative to the newest minute it was given:
// just more than each view needs.
const (
	memKeepMinutes = 2 * time.Hour
	memKeepHours   = 48 * time.Hour
	memKeepDays    = 92 * 24 * time.Hour
)

type bucketKey struct {
	start int64 // unix seconds of the bucket start
	model string
}

type okFailed struct{ ok, failed int64 }

// MemoryStore is a Store in process memory: history lasts as long as the
// process. It keeps minute, hour and day buckets, each pruned past what the
// page shows, so its size is bounded by models × (120 + 48 + 92).
type MemoryStore struct {
	mu                   sync.Mutex
	minutes, hours, days map[bucketKey]okFailed
	newest               time.Time
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{
		minutes: map[bucketKey]okFailed{},
		hours:   map[bucketKey]okFailed{},
		days:    map[bucketKey]okFailed{},
	}
}

func dayStart(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// AddStatus adds counts.
func (s *MemoryStore) AddStatus(_ context.Context, counts []StatusCount) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range counts {
		m := c.Minute.UTC().Truncate(time.Minute)
		add := func(to map[bucketKey]okFailed, start time.Time) {
			k := bucketKey{start.Unix(), c.Model}
			v := to[k]
			v.ok += c.OK
			v.failed += c.Failed
			to[k] = v
		}
		add(s.minutes, m)
		add(s.hours, m.Truncate(time.Hour))
		add(s.days, dayStart(m))
		if m.After(s.newest) {
			s.newest = m
		}
	}
	prune(s.minutes, s.newest.Add(-memKeepMinutes))
	prune(s.hours, s.newest.Add(-memKeepHours))
	prune(s.days, s.newest.Add(-memKeepDays))
	return nil
}

func prune(m map[bucketKey]okFailed, before time.Time) {
	for k := range m {
		if k.start < before.Unix() {
			delete(m, k)
		}
	}
}

func (s *MemoryStore) since(m map[bucketKey]okFailed, since time.Time) []StatusCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StatusCount
	for k, v := range m {
		if k.start >= since.Unix() {
			out = append(out, StatusCount{Minute: time.Unix(k.start, 0).UTC(), Model: k.model, OK: v.ok, Failed: v.failed})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Minute.Equal(out[j].Minute) {
			return out[i].Minute.Before(out[j].Minute)
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// StatusMinutes returns minute buckets from since on.
func (s *MemoryStore) StatusMinutes(_ context.Context, since time.Time) ([]StatusCount, error) {
	return s.since(s.minutes, since), nil
}

// StatusHours returns hour buckets from since on.
func (s *MemoryStore) StatusHours(_ context.Context, since time.Time) ([]StatusCount, error) {
	return s.since(s.hours, since), nil
}

// StatusDays returns UTC day buckets from since on.
func (s *MemoryStore) StatusDays(_ context.Context, since time.Time) ([]StatusCount, error) {
	return s.since(s.days, since), nil
}

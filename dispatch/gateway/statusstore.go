package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/hopgate/hopgate/dispatch/status"
	"github.com/hopgate/hopgate/internal/store"
)

// statusStore keeps the status page's history in the configured store
// (DESIGN.md §10): it survives restarts, and the replicas sharing a
// PostgreSQL add up. It also prunes old windows, at most once an hour.
type statusStore struct {
	st  *store.Store
	now func() time.Time

	mu         sync.Mutex
	lastPruned time.Time
}

var _ status.Store = (*statusStore)(nil)

// pruneEvery spaces the store's pruning of old status windows.
const pruneEvery = time.Hour

func (s *statusStore) AddStatus(ctx context.Context, counts []status.StatusCount) error {
	out := make([]store.StatusCount, len(counts))
	for i, c := range counts {
		out[i] = store.StatusCount{Start: c.Minute, Model: c.Model, OK: c.OK, Failed: c.Failed}
	}
	if err := s.st.AddStatus(ctx, out); err != nil {
		return err
	}
	s.prune(ctx)
	return nil
}

func (s *statusStore) prune(ctx context.Context) {
	now := s.now()
	s.mu.Lock()
	due := now.Sub(s.lastPruned) >= pruneEvery
	if due {
		s.lastPruned = now
	}
	s.mu.Unlock()
	if due {
		_, _ = s.st.PruneStatus(ctx, now) // best effort: retried in an hour
	}
}

func (s *statusStore) StatusMinutes(ctx context.Context, since time.Time) ([]status.StatusCount, error) {
	return convert(s.st.StatusMinutes(ctx, since))
}

func (s *statusStore) StatusHours(ctx context.Context, since time.Time) ([]status.StatusCount, error) {
	return convert(s.st.StatusHours(ctx, since))
}

func (s *statusStore) StatusDays(ctx context.Context, since time.Time) ([]status.StatusCount, error) {
	return convert(s.st.StatusDays(ctx, since))
}

func convert(in []store.StatusCount, err error) ([]status.StatusCount, error) {
	if err != nil {
		return nil, err
	}
	out := make([]status.StatusCount, len(in))
	for i, c := range in {
		out[i] = status.StatusCount{Minute: c.Start, Model: c.Model, OK: c.OK, Failed: c.Failed}
	}
	return out, nil
}

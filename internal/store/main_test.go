package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend is one driver under test: it makes empty databases and says how
// to open a Store on one.
type backend struct {
	name string
	// newDB makes an empty database for t and returns a Config for it.
	newDB func(t *testing.T) Config
}

var backends = []backend{
	{DriverSQLite, func(t *testing.T) Config {
		return Config{Driver: DriverSQLite, Path: filepath.Join(t.TempDir(), "hopgate.db"), BusyTimeout: 30 * time.Second}
	}},
	{DriverPostgres, func(t *testing.T) Config {
		return Config{Driver: DriverPostgres, DSN: pgtest.Shared(t).NewDatabase(t)}
	}},
}

// eachBackend runs fn once per driver, as parallel subtests: the same
// specification for both.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// openStore opens a Store on cfg, closed when the test ends.
func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Driver, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// fakeClock is a settable clock for row timestamps.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ctx(t *testing.T) context.Context { return t.Context() }

const actor = "test:admin"

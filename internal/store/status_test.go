package store

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Status counts add up: two Stores on one database (two replicas) adding
// to the same minute sum, the hours and days agree with the minutes, the
// history survives closing every Store, and pruning keeps 48 hours of
// minutes and 90 days of days.
func TestStatusAddsUpAcrossStoresAndRestarts(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		cfg := b.newDB(t)
		s1, s2 := openStore(t, cfg), openStore(t, cfg)
		m := time.Date(2026, 3, 14, 15, 9, 0, 0, time.UTC)
		day := time.Date(2026, 3, 14, 0, 0, 0, 0, time.UTC)

		if err := s1.AddStatus(ctx(t), []StatusCount{
			{Start: m.Add(26 * time.Second), Model: "gpt", OK: 3, Failed: 1}, // truncated to m
			{Start: m, Model: "claude", Failed: 5},
			{Start: m.Add(time.Minute), Model: "gpt", OK: 1},
			{Start: m.Add(2 * time.Minute), Model: "idle"}, // nothing to add
		}); err != nil {
			t.Fatal(err)
		}
		if err := s2.AddStatus(ctx(t), []StatusCount{
			{Start: m, Model: "gpt", OK: 2},
			{Start: m.Add(time.Hour), Model: "gpt", OK: 4, Failed: 4}, // the next hour, same day
		}); err != nil {
			t.Fatal(err)
		}
		if err := s2.AddStatus(ctx(t), nil); err != nil {
			t.Fatalf("AddStatus(nil) = %v", err)
		}
		if err := s2.AddStatus(ctx(t), []StatusCount{{Start: m, Model: "gpt", OK: -1}}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("negative count: %v, want ErrInvalid", err)
		}

		wantMinutes := []StatusCount{
			{Start: m, Model: "claude", Failed: 5},
			{Start: m, Model: "gpt", OK: 5, Failed: 1},
			{Start: m.Add(time.Minute), Model: "gpt", OK: 1},
			{Start: m.Add(time.Hour), Model: "gpt", OK: 4, Failed: 4},
		}
		wantHours := []StatusCount{
			{Start: m.Truncate(time.Hour), Model: "claude", Failed: 5},
			{Start: m.Truncate(time.Hour), Model: "gpt", OK: 6, Failed: 1},
			{Start: m.Truncate(time.Hour).Add(time.Hour), Model: "gpt", OK: 4, Failed: 4},
		}
		wantDays := []StatusCount{
			{Start: day, Model: "claude", Failed: 5},
			{Start: day, Model: "gpt", OK: 10, Failed: 5},
		}
		check := func(s *Store) {
			t.Helper()
			for _, q := range []struct {
				name string
				read func() ([]StatusCount, error)
				want []StatusCount
			}{
				{"minutes", func() ([]StatusCount, error) { return s.StatusMinutes(ctx(t), m) }, wantMinutes},
				{"minutes since the next one", func() ([]StatusCount, error) { return s.StatusMinutes(ctx(t), m.Add(time.Second)) }, wantMinutes[2:]},
				{"hours", func() ([]StatusCount, error) { return s.StatusHours(ctx(t), m.Add(30*time.Minute)) }, wantHours},
				{"days", func() ([]StatusCount, error) { return s.StatusDays(ctx(t), m) }, wantDays},
			} {
				got, err := q.read()
				if err != nil || !slices.Equal(got, q.want) {
					t.Fatalf("%s = %+v, %v\nwant %+v", q.name, got, err, q.want)
				}
			}
		}
		check(s1)
		check(s2)

		s1.Close()
		s2.Close()
		s3 := openStore(t, cfg)
		check(s3)

		// 48 hours after the first minute plus one minute: only that
		// first minute is older than the retention.
		n, err := s3.PruneStatus(ctx(t), m.Add(MinuteRetention+time.Minute))
		if err != nil || n != 2 { // gpt and claude at m
			t.Fatalf("PruneStatus = %d, %v; want the 2 rows of the first minute", n, err)
		}
		if got, _ := s3.StatusMinutes(ctx(t), time.Time{}); !slices.Equal(got, wantMinutes[2:]) {
			t.Fatalf("minutes after pruning: %+v", got)
		}
		if got, _ := s3.StatusDays(ctx(t), time.Time{}); !slices.Equal(got, wantDays) {
			t.Fatalf("days after pruning minutes: %+v", got)
		}
		if n, err := s3.PruneStatus(ctx(t), day.Add(DayRetention)); err != nil || n != 2 {
			t.Fatalf("PruneStatus at 90 days = %d, %v; want the 2 remaining minutes, no day", n, err)
		}
		if n, err := s3.PruneStatus(ctx(t), day.Add(DayRetention+24*time.Hour)); err != nil || n != 2 {
			t.Fatalf("PruneStatus at 91 days = %d, %v; want the 2 day rows", n, err)
		}
	})
}

package store

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"time"
)

// Retention of the status history (DESIGN §10: the last hour per minute,
// the last day per hour, the last 90 days per day).
const (
	MinuteRetention = 48 * time.Hour
	DayRetention    = 90 * 24 * time.Hour
)

// StatusCount is what one model did in one window: requests answered (OK)
// and failed, as the public status page counts them.
type StatusCount struct {
	// Start is the window's start in UTC: a minute (AddStatus,
	// StatusMinutes), an hour (StatusHours) or a day (StatusDays).
	Start  time.Time
	Model  string
	OK     int64
	Failed int64
}

// AddStatus adds counts to the per-minute history and to the per-day
// history, in one transaction. It adds rather than sets: several replicas,
// and one replica after a restart, each add their own counts to the same
// minute. Start is truncated to its minute (UTC).
func (s *Store) AddStatus(ctx context.Context, counts []StatusCount) error {
	minutes := map[statusKey]StatusCount{}
	days := map[statusKey]StatusCount{}
	for _, c := range counts {
		if c.OK < 0 || c.Failed < 0 || !validAmount(c.OK) || !validAmount(c.Failed) || len(c.Model) > 200 {
			return invalid("status count %+v", c)
		}
		if c.OK == 0 && c.Failed == 0 {
			continue
		}
		c.Start = c.Start.UTC().Truncate(time.Minute)
		minutes[statusKey{micros(c.Start), c.Model}] = addCounts(minutes[statusKey{micros(c.Start), c.Model}], c)
		c.Start = truncateDay(c.Start)
		days[statusKey{micros(c.Start), c.Model}] = addCounts(days[statusKey{micros(c.Start), c.Model}], c)
	}
	if len(minutes) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		// Every minute row before every day row, each in key order: two
		// replicas adding the same keys lock them in the same order and
		// cannot deadlock.
		if err := upsertCounts(ctx, tx, `INSERT INTO status_minutes (minute_us, model, ok, failed)
			VALUES ($1, $2, $3, $4) ON CONFLICT (minute_us, model) DO UPDATE SET
			ok = status_minutes.ok + excluded.ok, failed = status_minutes.failed + excluded.failed`, minutes); err != nil {
			return err
		}
		return upsertCounts(ctx, tx, `INSERT INTO status_days (day_us, model, ok, failed)
			VALUES ($1, $2, $3, $4) ON CONFLICT (day_us, model) DO UPDATE SET
			ok = status_days.ok + excluded.ok, failed = status_days.failed + excluded.failed`, days)
	})
}

type statusKey struct {
	start int64
	model string
}

func addCounts(a, b StatusCount) StatusCount {
	b.OK += a.OK
	b.Failed += a.Failed
	return b
}

func upsertCounts(ctx context.Context, tx *sql.Tx, stmt string, counts map[statusKey]StatusCount) error {
	keys := make([]statusKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b statusKey) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.model, b.model))
	})
	for _, k := range keys {
		c := counts[k]
		if _, err := tx.ExecContext(ctx, stmt, k.start, k.model, c.OK, c.Failed); err != nil {
			return err
		}
	}
	return nil
}

func truncateDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// StatusMinutes returns the per-minute counts of minutes starting at or
// after since, oldest first (models by name within a minute).
func (s *Store) StatusMinutes(ctx context.Context, since time.Time) ([]StatusCount, error) {
	return s.statusQuery(ctx, `SELECT minute_us, model, ok, failed FROM status_minutes
		WHERE minute_us >= $1 ORDER BY minute_us, model`, micros(since))
}

// StatusHours returns per-hour sums of the minutes, for the hours starting
// at or after since truncated to its hour, oldest first. Minutes are kept
// MinuteRetention, so hours reach back that far.
func (s *Store) StatusHours(ctx context.Context, since time.Time) ([]StatusCount, error) {
	return s.statusQuery(ctx, `SELECT (minute_us / 3600000000) * 3600000000 AS hour_us, model,
		CAST(SUM(ok) AS BIGINT), CAST(SUM(failed) AS BIGINT) FROM status_minutes
		WHERE minute_us >= $1 GROUP BY hour_us, model ORDER BY hour_us, model`,
		micros(since.Truncate(time.Hour)))
}

// StatusDays returns the per-day counts (UTC days) of days starting at or
// after since truncated to its day, oldest first.
func (s *Store) StatusDays(ctx context.Context, since time.Time) ([]StatusCount, error) {
	return s.statusQuery(ctx, `SELECT day_us, model, ok, failed FROM status_days
		WHERE day_us >= $1 ORDER BY day_us, model`, micros(truncateDay(since)))
}

func (s *Store) statusQuery(ctx context.Context, query string, since int64) ([]StatusCount, error) {
	rows, err := s.query(ctx, query, since)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []StatusCount
	for rows.Next() {
		var c StatusCount
		var us int64
		if err := rows.Scan(&us, &c.Model, &c.OK, &c.Failed); err != nil {
			return nil, classify(err)
		}
		c.Start = fromMicros(us)
		out = append(out, c)
	}
	return out, classify(rows.Err())
}

// PruneStatus deletes minutes older than MinuteRetention and days older
// than DayRetention before now, and returns how many rows went.
func (s *Store) PruneStatus(ctx context.Context, now time.Time) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		n = 0
		for _, q := range []struct {
			stmt   string
			cutoff time.Time
		}{
			{`DELETE FROM status_minutes WHERE minute_us < $1`, now.Add(-MinuteRetention)},
			{`DELETE FROM status_days WHERE day_us < $1`, truncateDay(now).Add(-DayRetention)},
		} {
			res, err := tx.ExecContext(ctx, q.stmt, micros(q.cutoff))
			if err != nil {
				return err
			}
			d, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += d
		}
		return nil
	})
	return n, err
}

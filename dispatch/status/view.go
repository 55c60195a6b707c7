package status

import (
	"context"
	"errors"
	"time"
)

// Window levels: the colour of a bar. The thresholds are the observed
// success rate of the window; they are not a promise (there is no SLA
// figure on the page), only where a window starts to look bad.
const (
	LevelNone     = "none"     // no counted request in the window
	LevelGood     = "good"     // ≥ 99 %
	LevelDegraded = "degraded" // ≥ 90 %
	LevelBad      = "bad"      // < 90 %

	goodRate     = 0.99
	degradedRate = 0.90
)

// Window is one bar.
type Window struct {
	Start       time.Time `json:"start"`
	OK          int64     `json:"ok"`
	Failed      int64     `json:"failed"`
	SuccessRate *float64  `json:"success_rate"` // null without requests
	Level       string    `json:"level"`
}

// ModelView is one public model's three series, oldest window first.
type ModelView struct {
	Model  string   `json:"model"`
	Hour   []Window `json:"last_hour_per_minute"`
	Day    []Window `json:"last_day_per_hour"`
	Days90 []Window `json:"last_90_days_per_day"`
}

// View is what /status and /status.json show.
type View struct {
	GeneratedAt time.Time   `json:"generated_at"`
	Models      []ModelView `json:"models"`
}

func level(ok, failed int64) (*float64, string) {
	n := ok + failed
	if n == 0 {
		return nil, LevelNone
	}
	r := float64(ok) / float64(n)
	switch {
	case r >= goodRate:
		return &r, LevelGood
	case r >= degradedRate:
		return &r, LevelDegraded
	}
	return &r, LevelBad
}

// series lays counts on n consecutive windows ending with the one holding
// now; step is a minute, an hour or a day.
func series(counts []StatusCount, model string, first time.Time, n int, step func(time.Time, int) time.Time) []Window {
	ws := make([]Window, n)
	idx := make(map[int64]int, n)
	for i := range ws {
		ws[i].Start = step(first, i)
		idx[ws[i].Start.Unix()] = i
	}
	for _, c := range counts {
		if c.Model != model {
			continue
		}
		if i, ok := idx[c.Minute.UTC().Unix()]; ok {
			ws[i].OK += c.OK
			ws[i].Failed += c.Failed
		}
	}
	for i := range ws {
		ws[i].SuccessRate, ws[i].Level = level(ws[i].OK, ws[i].Failed)
	}
	return ws
}

// buildView reads the store (and the counts not flushed yet) for models.
func buildView(ctx context.Context, st Store, rec *Recorder, now time.Time, models []string) (*View, error) {
	now = now.UTC()
	minute0 := now.Truncate(time.Minute).Add(-59 * time.Minute)
	hour0 := now.Truncate(time.Hour).Add(-23 * time.Hour)
	day0 := dayStart(now).AddDate(0, 0, -89)

	mins, err1 := st.StatusMinutes(ctx, minute0)
	hours, err2 := st.StatusHours(ctx, hour0)
	days, err3 := st.StatusDays(ctx, day0)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	// Counts not in the store yet, rolled up to each resolution.
	for _, c := range rec.unflushed(day0) {
		mins = append(mins, c)
		hours = append(hours, StatusCount{Minute: c.Minute.Truncate(time.Hour), Model: c.Model, OK: c.OK, Failed: c.Failed})
		days = append(days, StatusCount{Minute: dayStart(c.Minute), Model: c.Model, OK: c.OK, Failed: c.Failed})
	}
	v := &View{GeneratedAt: now, Models: make([]ModelView, 0, len(models))}
	for _, m := range models {
		v.Models = append(v.Models, ModelView{
			Model:  m,
			Hour:   series(mins, m, minute0, 60, func(t time.Time, i int) time.Time { return t.Add(time.Duration(i) * time.Minute) }),
			Day:    series(hours, m, hour0, 24, func(t time.Time, i int) time.Time { return t.Add(time.Duration(i) * time.Hour) }),
			Days90: series(days, m, day0, 90, func(t time.Time, i int) time.Time { return t.AddDate(0, 0, i) }),
		})
	}
	return v, nil
}

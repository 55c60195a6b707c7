package status

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/internal/testkit"
	"github.com/hopgate/hopgate/telemetry"
)

var t0 = time.Date(2026, 3, 10, 12, 0, 30, 0, time.UTC)

// flakyStore wraps MemoryStore: fail makes AddStatus fail, block makes it
// wait until released (a store that hangs must not hang requests).
// entered and ended, when set (buffered), get a value as each AddStatus
// starts and returns, so tests wait on the store instead of polling it.
type flakyStore struct {
	*MemoryStore
	mu             sync.Mutex
	fail           bool
	block          chan struct{}
	adds           int
	entered, ended chan struct{}
}

// signal sends on c without waiting (nil: nothing).
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// await receives from c, failing the test after testkit.Bound (a failure
// bound only: a passing test waits for c, never for time).
func await(t *testing.T, c chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(testkit.Bound):
		t.Fatalf("%s did not happen in %v", what, testkit.Bound)
	}
}

func (f *flakyStore) AddStatus(ctx context.Context, c []StatusCount) error {
	f.mu.Lock()
	fail, block := f.fail, f.block
	f.adds++
	f.mu.Unlock()
	signal(f.entered)
	defer signal(f.ended)
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail {
		return errors.New("store down")
	}
	return f.MemoryStore.AddStatus(ctx, c)
}

func testConfig(t *testing.T, models ...string) *config.Config {
	t.Helper()
	y := "auth: {mode: none}\nchannels:\n  - {id: a, base_url: \"http://127.0.0.1:1/v1\"}\nmodels:\n"
	for _, m := range models {
		b, _ := json.Marshal(m)
		y += "  - {name: " + string(b) + ", chain: [{channel: a}]}\n"
	}
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestClassify is the definition of a failure on the status page.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		outcome         string
		counted, failed bool
	}{
		{telemetry.OutcomeOK, true, false},
		{telemetry.OutcomeFailoverOK, true, false},
		{telemetry.OutcomeExhausted, true, true},
		{telemetry.OutcomeDeadline, true, true},
		{telemetry.OutcomeDegraded, true, true},
		{telemetry.OutcomeInterrupted, true, true},
		{telemetry.OutcomeFinalError, false, false},
		{telemetry.OutcomeCanceled, false, false},
		{telemetry.OutcomeBadRequest, false, false},
		{"something new", false, false},
	} {
		if c, f := Classify(tc.outcome); c != tc.counted || f != tc.failed {
			t.Errorf("%s: counted %v failed %v", tc.outcome, c, f)
		}
	}
}

// TestLevels pins a bar's colour to the thresholds docs/oncall.md states:
// green from 99 % served, amber from 90 %, red below, grey without requests.
func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		ok, failed int64
		want       string
	}{
		{0, 0, LevelNone},
		{100, 0, LevelGood},
		{99, 1, LevelGood},
		{98, 2, LevelDegraded},
		{90, 10, LevelDegraded},
		{89, 11, LevelBad},
		{0, 1, LevelBad},
	} {
		if _, got := level(tc.ok, tc.failed); got != tc.want {
			t.Errorf("%d ok, %d failed: %s, want %s", tc.ok, tc.failed, got, tc.want)
		}
	}
}

// TestRecorderBatchesAndRetries: counts go to the store in one batch per
// flush, per model and minute; a failed flush keeps them for the next.
func TestRecorderBatchesAndRetries(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	st := &flakyStore{MemoryStore: NewMemoryStore()}
	r := NewRecorder(st, clock, clock, time.Second, nil)
	for range 3 {
		r.Record("m", telemetry.OutcomeOK)
	}
	r.Record("m", telemetry.OutcomeExhausted)
	r.Record("m", telemetry.OutcomeCanceled)
	clock.Advance(time.Minute)
	r.Record("m", telemetry.OutcomeFailoverOK)
	r.Record("n", telemetry.OutcomeDeadline)

	st.fail = true
	if err := r.Flush(context.Background()); err == nil {
		t.Fatal("flush to a failing store succeeded")
	}
	st.fail = false
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st.adds != 2 {
		t.Fatalf("%d AddStatus calls, want 2 (one per flush)", st.adds)
	}
	got, _ := st.StatusMinutes(context.Background(), t0.Add(-time.Hour))
	want := []StatusCount{
		{Minute: t0.Truncate(time.Minute), Model: "m", OK: 3, Failed: 1},
		{Minute: t0.Truncate(time.Minute).Add(time.Minute), Model: "m", OK: 1},
		{Minute: t0.Truncate(time.Minute).Add(time.Minute), Model: "n", Failed: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("store holds %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if err := r.Flush(context.Background()); err != nil || st.adds != 2 {
		t.Fatal("an empty flush reached the store")
	}
}

// TestRecordNeverWaitsOnTheStore: while a flush hangs on the store,
// requests keep being counted at once, and nothing is lost.
func TestRecordNeverWaitsOnTheStore(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	st := &flakyStore{MemoryStore: NewMemoryStore(), block: make(chan struct{}), entered: make(chan struct{}, 1)}
	r := NewRecorder(st, clock, clock, time.Second, nil)
	r.Record("m", telemetry.OutcomeOK)
	// release lets the store answer: below, or when the test fails
	// before it, so the flush and the Records return and their
	// goroutines end either way.
	release := sync.OnceFunc(func() { close(st.block) })
	t.Cleanup(release)
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(context.Background()) }()
	await(t, st.entered, "the flush reaching the store")
	// The store hangs until it is released, below: a Record that waited
	// on it would not return, and await fails after its bound.
	recorded := make(chan struct{})
	go func() {
		for range 1000 {
			r.Record("m", telemetry.OutcomeOK)
		}
		close(recorded)
	}()
	await(t, recorded, "1000 Records while the store hung")
	// The page counts what is in flight and what is pending.
	var ok int64
	for _, c := range r.unflushed(t0.Add(-time.Hour)) {
		ok += c.OK
	}
	if ok != 1001 {
		t.Fatalf("unflushed ok = %d, want 1001", ok)
	}
	release()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := st.StatusMinutes(context.Background(), t0.Add(-time.Hour))
	if len(got) != 1 || got[0].OK != 1001 {
		t.Fatalf("store %+v", got)
	}
}

// TestRunFlushesOnTheClockAndAtStop: the flusher runs on the injected
// clock and flushes once more when stopped, so a drain loses nothing.
func TestRunFlushesOnTheClockAndAtStop(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	st := &flakyStore{MemoryStore: NewMemoryStore(), ended: make(chan struct{}, 2)}
	r := NewRecorder(st, clock, clock, 10*time.Second, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	r.Record("m", telemetry.OutcomeOK)
	if err := clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second)
	await(t, st.ended, "the flush on the tick")
	if c, _ := st.StatusMinutes(context.Background(), t0.Add(-time.Hour)); len(c) != 1 || c[0].OK != 1 {
		t.Fatalf("after the tick: %+v", c)
	}
	r.Record("m", telemetry.OutcomeExhausted)
	cancel()
	<-done
	c, _ := st.StatusMinutes(context.Background(), t0.Add(-time.Hour))
	if len(c) != 1 || c[0].OK != 1 || c[0].Failed != 1 {
		t.Fatalf("after stop: %+v", c)
	}
}

// TestMemoryStoreRollsUp: minutes add up across flushes (two replicas
// writing the same minute), hours and UTC days aggregate them.
func TestMemoryStoreRollsUp(t *testing.T) {
	st := NewMemoryStore()
	ctx := context.Background()
	m := t0.Truncate(time.Minute)
	_ = st.AddStatus(ctx, []StatusCount{{Minute: m, Model: "m", OK: 2}})
	_ = st.AddStatus(ctx, []StatusCount{{Minute: m, Model: "m", OK: 1, Failed: 1}, {Minute: m.Add(2 * time.Hour), Model: "m", OK: 5}})
	mins, _ := st.StatusMinutes(ctx, m)
	if len(mins) != 2 || mins[0].OK != 3 || mins[0].Failed != 1 {
		t.Fatalf("minutes %+v", mins)
	}
	hours, _ := st.StatusHours(ctx, m.Add(-time.Hour))
	if len(hours) != 2 || !hours[0].Minute.Equal(m.Truncate(time.Hour)) || hours[0].OK != 3 {
		t.Fatalf("hours %+v", hours)
	}
	days, _ := st.StatusDays(ctx, m.AddDate(0, 0, -1))
	if len(days) != 1 || days[0].OK != 8 || days[0].Failed != 1 || days[0].Minute.Hour() != 0 {
		t.Fatalf("days %+v", days)
	}
}

func get(t *testing.T, h http.HandlerFunc, path string) (*http.Response, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, path, nil))
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestPageShowsBadWindows: a minute with failures is a red bar in the
// hour series, and a bad hour and day in the others; the JSON has the
// same windows; no SLA figure anywhere.
func TestPageShowsBadWindows(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	cfg := testConfig(t, "gpt", "quiet")
	s := New(Options{Clock: clock, Config: func() *config.Config { return cfg }})
	for range 20 {
		s.Record("gpt", telemetry.OutcomeOK)
	}
	clock.Advance(time.Minute)
	for range 5 {
		s.Record("gpt", telemetry.OutcomeOK)
		s.Record("gpt", telemetry.OutcomeExhausted)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	s.Record("gpt", telemetry.OutcomeOK) // unflushed: still shown

	res, body := get(t, s.ServeJSON, "/status.json")
	if res.StatusCode != 200 {
		t.Fatal(res.Status)
	}
	var v View
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Models) != 2 || v.Models[0].Model != "gpt" {
		t.Fatalf("models %+v", v.Models)
	}
	hour := v.Models[0].Hour
	if len(hour) != 60 || len(v.Models[0].Day) != 24 || len(v.Models[0].Days90) != 90 {
		t.Fatalf("series lengths %d %d %d", len(hour), len(v.Models[0].Day), len(v.Models[0].Days90))
	}
	if w := hour[57]; w.OK != 20 || w.Level != LevelGood {
		t.Errorf("good minute %+v", w)
	}
	if w := hour[58]; w.Failed != 5 || w.Level != LevelBad || *w.SuccessRate != 0.5 {
		t.Errorf("bad minute %+v", w)
	}
	if w := hour[59]; w.OK != 1 {
		t.Errorf("current minute (unflushed) %+v", w)
	}
	if w := v.Models[0].Day[23]; w.OK != 26 || w.Failed != 5 || w.Level != LevelBad {
		t.Errorf("hour %+v", w)
	}
	if w := v.Models[1].Hour[59]; w.Level != LevelNone || w.SuccessRate != nil {
		t.Errorf("quiet model %+v", w)
	}

	clock.Advance(cacheFor) // past the cache
	res, html := get(t, s.ServeHTML, "/status")
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'sha256-") {
		t.Fatalf("%s %v", res.Status, res.Header)
	}
	for _, want := range []string{`data-model="gpt"`, `class="bad"`, `data-start="2026-03-10T12:01:00Z"`, "12:01 UTC: 50.00 % of 10 requests served (5 failed)"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, no := range []string{"SLA", "uptime"} {
		if strings.Contains(html, no) {
			t.Errorf("page shows %q", no)
		}
	}
}

// TestPageEscapesModelNames: model names come from the config but are
// attacker-influenced text on a public page.
func TestPageEscapesModelNames(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	evil := `<script>alert("x")</script>`
	cfg := testConfig(t, evil)
	s := New(Options{Clock: clock, Config: func() *config.Config { return cfg }})
	s.Record(evil, telemetry.OutcomeExhausted)
	_, html := get(t, s.ServeHTML, "/status")
	if strings.Contains(html, evil) || !strings.Contains(html, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Fatalf("model name not escaped:\n%s", html)
	}
	_, js := get(t, s.ServeJSON, "/status.json")
	if strings.Contains(js, "<script>") {
		t.Fatal("JSON carries a raw <script> (encoding/json escapes < as \\u003c)")
	}
}

// TestDisabledRecordsNothing: status.enabled false stops counting.
func TestDisabledRecordsNothing(t *testing.T) {
	cfg := testConfig(t, "m")
	cfg.Status.Enabled = false
	s := New(Options{Config: func() *config.Config { return cfg }})
	s.Record("m", telemetry.OutcomeOK)
	if len(s.rec.unflushed(time.Time{})) != 0 {
		t.Fatal("recorded while disabled")
	}
	var nilService *Service
	nilService.Record("m", telemetry.OutcomeOK) // no panic
}

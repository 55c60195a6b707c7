package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/replay"
)

// The harness in its short mode (2 minutes of warm-up, scenarios at half
// length, no sweep): every scenario runs with and without early warning,
// the report renders, and on the ramp early warning saves callers the
// timeouts it exists to save without crying wolf on the quiet scenarios.
func TestShortReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the replay takes a few seconds")
	}
	rep, err := replay.Generate(replay.ReportOptions{Short: true, Seed: 21})
	if err != nil {
		t.Fatal(err)
	}
	md := string(rep.Markdown())
	for _, sc := range replay.Scenarios {
		if !strings.Contains(md, "| "+sc.Name+" | breakers only |") || !strings.Contains(md, "| "+sc.Name+" | early warning |") {
			t.Errorf("the report lacks %s's rows", sc.Name)
		}
	}
	if len(rep.Rows) != 2*len(replay.Scenarios) {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	rows := map[string]replay.Summary{}
	for _, r := range rep.Rows {
		rows[r.Scenario.Name+"/"+r.Policy] = r.Summary
	}
	off, on := rows["ramp-then-failure/breakers only"], rows["ramp-then-failure/early warning"]
	if on.TimedOut >= off.TimedOut || on.P99 >= off.P99 || on.Demotions == 0 {
		t.Errorf("ramp: early warning %+v against breakers only %+v: want fewer timeouts and a lower p99", on, off)
	}
	for _, n := range []string{"latency-blip", "noisy-healthy"} {
		if s := rows[n+"/early warning"]; s.FalseAlarms != 0 {
			t.Errorf("%s: %d false alarms with the defaults", n, s.FalseAlarms)
		}
	}
	// The window filling (DESIGN §16): demoting before the 429 spares
	// callers the 429 hops, with no demotion in a window that never filled.
	if off, on := rows["window-fill/breakers only"], rows["window-fill/early warning"]; on.FailedHops >= off.FailedHops || on.Demotions == 0 || on.FalseAlarms != 0 {
		t.Errorf("window-fill: early warning %+v against breakers only %+v: want fewer failed hops, demotions, no false alarm", on, off)
	}
	t.Logf("%d runs, %v of traffic, in %v", rep.Runs, rep.Virtual, rep.Elapsed)
}

// Virtual time makes a run repeatable: the same seed, the same requests
// with the same latencies and paths, whatever the machine's load.
func TestReplayIsDeterministic(t *testing.T) {
	sc, _ := replay.ScenarioNamed("ramp-then-failure")
	ew := replay.Defaults()
	o := replay.Options{Scenario: sc, EarlyWarning: &ew, Seed: 7, Warmup: 2 * time.Minute, Scale: 0.3}
	a, err := replay.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Records) != len(b.Records) {
		t.Fatalf("%d records, then %d", len(a.Records), len(b.Records))
	}
	for i := range a.Records {
		if a.Records[i] != b.Records[i] {
			t.Fatalf("record %d differs:\n%+v\n%+v", i, a.Records[i], b.Records[i])
		}
	}
	if len(a.Demotions) != len(b.Demotions) || len(a.Openings) != len(b.Openings) {
		t.Fatalf("transitions differ: %v %v / %v %v", a.Demotions, a.Openings, b.Demotions, b.Openings)
	}
}

// The command writes the report where -out says.
func TestCommandWritesReport(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the replay takes a few seconds")
	}
	var stdout, stderr bytes.Buffer
	if err := run([]string{"-short", "-q", "-out", "-"}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "# Early warning: the replay report\n") || !strings.Contains(stdout.String(), "**Short mode**") {
		t.Fatalf("stdout:\n%.300s", stdout.String())
	}
}

package dashboards

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed JSON is what Grafana imports; it must be what the code says.
func TestGeneratedIsFresh(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("generated", name))
		if err != nil {
			t.Fatalf("%s: %v; run `go run ./dashboards/cmd/gen` from the repository root", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("generated/%s is stale: run `go run ./dashboards/cmd/gen` from the repository root and commit the result", name)
		}
	}
}

// A generator that is not deterministic makes the staleness test flaky.
func TestJSONDeterministic(t *testing.T) {
	a, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, err := JSON()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatal("JSON() differs between calls")
		}
	}
	if !bytes.HasSuffix(a, []byte("}\n")) || bytes.HasSuffix(a, []byte("\n\n")) {
		t.Error("JSON() must end with exactly one newline")
	}
}

// panel is the part of Grafana's panel JSON the structural tests read.
type panel struct {
	ID              int     `json:"id"`
	Type            string  `json:"type"`
	Title           string  `json:"title"`
	Description     string  `json:"description"`
	Repeat          string  `json:"repeat"`
	RepeatDirection string  `json:"repeatDirection"`
	MaxPerRow       float64 `json:"maxPerRow"`
	Collapsed       bool    `json:"collapsed"`
	GridPos         struct{ X, Y, W, H int }
	Datasource      struct{ Type, UID string } `json:"datasource"`
	Targets         []struct {
		Expr     string `json:"expr"`
		Exemplar bool   `json:"exemplar"`
		Instant  bool   `json:"instant"`
	} `json:"targets"`
	Options struct {
		ColorMode string `json:"colorMode"`
	} `json:"options"`
	FieldConfig struct {
		Defaults struct {
			Unit     string   `json:"unit"`
			Min      *float64 `json:"min"`
			Max      *float64 `json:"max"`
			Mappings []struct {
				Type    string `json:"type"`
				Options map[string]struct {
					Text  string `json:"text"`
					Color string `json:"color"`
				} `json:"options"`
			} `json:"mappings"`
			Thresholds struct {
				Steps []struct {
					Value *float64 `json:"value"`
					Color string   `json:"color"`
				} `json:"steps"`
			} `json:"thresholds"`
			Custom struct {
				ThresholdsStyle struct {
					Mode string `json:"mode"`
				} `json:"thresholdsStyle"`
			} `json:"custom"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string            `json:"id"`
				Value []json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Panels []panel `json:"panels"`
}

type board struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
}

func loadBoard(t *testing.T) board {
	t.Helper()
	raw, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var b board
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func byID(t *testing.T, b board, id int) panel {
	t.Helper()
	for _, p := range allPanels(b.Panels) {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no panel with id %d", id)
	return panel{}
}

// Links, bookmarks and provisioning point at the uid; it must never drift.
func TestIdentity(t *testing.T) {
	b := loadBoard(t)
	if b.UID != "hopgate-failover" || b.Title != "hopgate — failover" {
		t.Fatalf("uid/title = %q/%q", b.UID, b.Title)
	}
}

// DESIGN.md §6: a row per region, a tile per channel inside it.
func TestBreakerRowAndTilesRepeat(t *testing.T) {
	b := loadBoard(t)
	first := b.Panels[0]
	if first.Type != "row" || first.Repeat != "region" || !strings.Contains(first.Title, "$region") {
		t.Fatalf("first panel must be the row repeated by region, got %+v", first)
	}
	if first.Collapsed {
		t.Error("the breaker row must be open: tiles hidden behind a click are useless in an incident")
	}
	tile := byID(t, b, idBreakerTile)
	if b.Panels[1].ID != idBreakerTile {
		t.Errorf("the tile must directly follow the region row (open rows own the panels after them)")
	}
	if tile.Type != "stat" || tile.Repeat != "channel" || tile.RepeatDirection != "h" || tile.MaxPerRow != 6 {
		t.Errorf("tile repeat = %q/%q/%v, want channel/h/6", tile.Repeat, tile.RepeatDirection, tile.MaxPerRow)
	}
	if tile.Options.ColorMode != "background" {
		t.Errorf("tile colorMode = %q, want background", tile.Options.ColorMode)
	}
	if len(tile.Targets) != 1 || !tile.Targets[0].Instant ||
		tile.Targets[0].Expr != `max(hopgate_breaker_state{region=~"$region",channel=~"$channel"}) > 0 or (max(hopgate_early_warning_demoted{region=~"$region",channel=~"$channel"}) > 0) * 3 or max(hopgate_breaker_state{region=~"$region",channel=~"$channel"})` {
		t.Errorf("tile target = %+v", tile.Targets)
	}
}

// The three breaker states, and early warning's demoted, must read the same
// on the tiles and the timeline (and as on the admin page).
func TestBreakerMappings(t *testing.T) {
	b := loadBoard(t)
	want := map[string][2]string{"0": {"closed", "green"}, "1": {"half-open", "yellow"}, "2": {"open", "red"}, "3": {"demoted", "blue"}}
	for _, id := range []int{idBreakerTile, idBreakerTimeline} {
		p := byID(t, b, id)
		if len(p.FieldConfig.Defaults.Mappings) != 1 {
			t.Fatalf("panel %d: %d mappings, want 1 value mapping", id, len(p.FieldConfig.Defaults.Mappings))
		}
		m := p.FieldConfig.Defaults.Mappings[0]
		if m.Type != "value" || len(m.Options) != len(want) {
			t.Fatalf("panel %d: mapping %+v", id, m)
		}
		for v, tc := range want {
			got := m.Options[v]
			if got.Text != tc[0] || got.Color != tc[1] {
				t.Errorf("panel %d: %s → %s/%s, want %s/%s", id, v, got.Text, got.Color, tc[0], tc[1])
			}
		}
	}
	if tl := byID(t, b, idBreakerTimeline); tl.Type != "state-timeline" {
		t.Errorf("breaker history type = %q, want state-timeline", tl.Type)
	}
}

// The 25 % line is the rate breaker's trip point; on-call compares against it.
func TestErrorRatePanel(t *testing.T) {
	b := loadBoard(t)
	p := byID(t, b, idErrorRate)
	d := p.FieldConfig.Defaults
	if d.Unit != "percentunit" || d.Min == nil || *d.Min != 0 || d.Max == nil || *d.Max != 1 {
		t.Errorf("unit/min/max = %q/%v/%v", d.Unit, d.Min, d.Max)
	}
	if d.Custom.ThresholdsStyle.Mode != "line" {
		t.Errorf("thresholdsStyle = %q, want line", d.Custom.ThresholdsStyle.Mode)
	}
	found := false
	for _, s := range d.Thresholds.Steps {
		if s.Value != nil && *s.Value == 0.25 && s.Color == "red" {
			found = true
		}
	}
	if !found {
		t.Errorf("no red threshold at 0.25: %+v", d.Thresholds.Steps)
	}
	expr := p.Targets[0].Expr
	for _, want := range []string{`outcome!~"ok|final|canceled"`, `outcome!~"final|canceled"`, "[1m]", "sum by (channel)"} {
		if !strings.Contains(expr, want) {
			t.Errorf("error-rate expr lacks %q: %s", want, expr)
		}
	}
}

// Latency is where on-call jumps from a spike to the trace.
func TestLatencyExemplarsLinkToTraces(t *testing.T) {
	b := loadBoard(t)
	p := byID(t, b, idHopLatency)
	if len(p.Targets) != 3 {
		t.Fatalf("%d latency targets, want p50/p95/p99", len(p.Targets))
	}
	for _, tg := range p.Targets {
		if !tg.Exemplar {
			t.Errorf("exemplar off on %s", tg.Expr)
		}
		if !strings.Contains(tg.Expr, "histogram_quantile(") || !strings.Contains(tg.Expr, "hopgate_hop_duration_seconds_bucket") {
			t.Errorf("latency expr = %s", tg.Expr)
		}
	}
	linked := false
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID == "byName" && o.Matcher.Options == "trace_id" {
			for _, prop := range o.Properties {
				if prop.ID == "links" && len(prop.Value) > 0 && strings.Contains(string(prop.Value[0]), "${tracing_ds}") {
					linked = true
				}
			}
		}
	}
	if !linked {
		t.Error("no trace_id link to ${tracing_ds} on the latency panel")
	}
}

// An on-call reading a panel cold must be told what it answers.
func TestEveryPanelDescribedAndPlaced(t *testing.T) {
	b := loadBoard(t)
	ids := map[int]bool{}
	for _, p := range allPanels(b.Panels) {
		if ids[p.ID] {
			t.Errorf("duplicate panel id %d", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %d %q: bad gridPos %+v", p.ID, p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if strings.TrimSpace(p.Description) == "" {
			t.Errorf("panel %d %q has no description", p.ID, p.Title)
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %d %q: datasource %q, want ${datasource}", p.ID, p.Title, p.Datasource.UID)
		}
		if p.FieldConfig.Defaults.Unit == "" && p.Type == "timeseries" {
			t.Errorf("panel %d %q has no unit", p.ID, p.Title)
		}
	}
}

// The variables are the board's contract with the deploy provisioning.
func TestVariables(t *testing.T) {
	b := loadBoard(t)
	want := []struct {
		name, typ, query string
		multi            bool
	}{
		{"datasource", "datasource", `"prometheus"`, false},
		{"tracing_ds", "datasource", `"jaeger"`, false},
		{"region", "query", `"label_values(hopgate_breaker_state, region)"`, true},
		{"channel", "query", `"label_values(hopgate_breaker_state{region=~\"$region\"}, channel)"`, true},
		{"model", "query", `"label_values(hopgate_requests_total, model)"`, true},
	}
	if len(b.Templating.List) != len(want) {
		t.Fatalf("%d variables, want %d", len(b.Templating.List), len(want))
	}
	for i, w := range want {
		v := b.Templating.List[i]
		if v.Name != w.name || v.Type != w.typ || string(v.Query) != w.query || v.Multi != w.multi || v.IncludeAll != w.multi {
			t.Errorf("variable %d = %s/%s/%s multi=%v all=%v, want %+v", i, v.Name, v.Type, v.Query, v.Multi, v.IncludeAll, w)
		}
	}
}

// With telemetry.trace_url, an exemplar opens the operator's trace UI
// first, with the same template the admin pages use; the committed board
// (no trace URL) is unchanged.
func TestExemplarLinksUseTraceURL(t *testing.T) {
	raw, err := JSONWith(Options{TraceURL: "http://jaeger:16686/trace/{trace_id}"})
	if err != nil {
		t.Fatal(err)
	}
	var b board
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	p := byID(t, b, idHopLatency)
	var urls []string
	for _, o := range p.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			for _, v := range prop.Value {
				var l struct{ URL string }
				_ = json.Unmarshal(v, &l)
				urls = append(urls, l.URL)
			}
		}
	}
	if len(urls) != 2 || urls[0] != "http://jaeger:16686/trace/${__value.raw}" || !strings.Contains(urls[1], "${tracing_ds}") {
		t.Fatalf("exemplar links %q", urls)
	}
	plain, _ := JSON()
	if bytes.Contains(plain, []byte("trace_url")) {
		t.Error("the committed board mentions trace_url")
	}
	if _, err := JSONWith(Options{TraceURL: "http://jaeger/trace/"}); err == nil {
		t.Error("a template without {trace_id} was accepted")
	}
}

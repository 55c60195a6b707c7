package browser_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Tile colours as the stylesheet sets them (--ok, --half, --bad, --demoted).
const (
	green  = "rgb(46, 158, 68)"
	yellow = "rgb(224, 176, 0)"
	red    = "rgb(217, 54, 54)"
	blue   = "rgb(37, 99, 235)"
)

type css = chromedp.CSS

// tileColour reads the computed background of a channel's breaker tile.
func tileColour(t *testing.T, b *browser, channel string) string {
	t.Helper()
	return eval[string](t, b, fmt.Sprintf(
		`getComputedStyle(document.querySelector('.tile[data-channel=%q]')).backgroundColor`, channel))
}

// refresh runs the page's own refresh script (what its timer does every
// 5 s) and waits until it has swapped the live view.
func refresh(t *testing.T, b *browser) {
	t.Helper()
	eval[any](t, b, `window.hopgateRefresh().then(() => document.documentElement.hasAttribute("data-stale") ? "stale" : "ok")`,
		chromedp.EvalAwaitPromise)
	if stale := eval[bool](t, b, `document.documentElement.hasAttribute("data-stale")`); stale {
		t.Fatal("the refresh script failed")
	}
}

// TestOncallTilesDuringIncident loads /admin while a scripted incident
// plays on the fake clock and watches cheap-eu's tile go green → red →
// yellow → green: the first change by a full load, the others through the
// page's refresh script.
func TestOncallTilesDuringIncident(t *testing.T) {
	in := newIncident(t, "")
	b := newBrowser(t)

	// Two healthy minutes first, so the error-rate chart has a history.
	for range 6 {
		in.expectPath(t, false, "cheap-eu:ok")
		in.clock.Advance(20 * time.Second)
	}
	b.do(t, "load /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile[data-channel="cheap-eu"]`)))
	if c := tileColour(t, b, "cheap-eu"); c != green {
		t.Fatalf("healthy: cheap-eu tile %s, want green %s", c, green)
	}

	in.fault(t, "cheap-eu", "503")
	for range 3 {
		in.expectPath(t, false, "cheap-eu:503 -> mid-us:ok")
	}
	b.do(t, "reload /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile.open`)))
	reopen := get(t, b, "reopen time", chromedp.Text(css(`.tile[data-channel="cheap-eu"] .tile-reopen`)))
	wantReopen := "half-open at " + in.clock.Now().Add(time.Minute).UTC().Format("15:04:05") + " UTC (in 60s)"
	if c := tileColour(t, b, "cheap-eu"); c != red || !strings.Contains(reopen, wantReopen) {
		t.Fatalf("open: cheap-eu tile %s %q, want red %s with its reopen time", c, reopen, red)
	}
	in.expectPath(t, false, "cheap-eu:open -> mid-us:ok")
	b.do(t, "reload /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile.open`)))
	b.screenshot(t, "admin")

	// Two clicks from the red tile to one failed request's trace: the
	// tile lists the kept traces through the channel, newest first.
	b.do(t, "click the red tile", chromedp.Click(css(`.tile[data-channel="cheap-eu"]`)), chromedp.WaitVisible(css(`table.traces a.trace-link`)))
	if first := get(t, b, "newest trace", chromedp.Text(css(`table.traces td.path`))); first != "cheap-eu:open → mid-us:ok" {
		t.Errorf("the tile's newest trace has path %q", first)
	}
	b.do(t, "click the trace", chromedp.Click(css(`table.traces a.trace-link`)), chromedp.WaitVisible(css(`.waterfall`)))
	if skip := eval[int](t, b, `document.querySelectorAll('details.span.skip').length`); skip != 1 {
		t.Errorf("the trace of a skipped request shows %d breaker skips", skip)
	}
	b.do(t, "back to /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile.open`)))

	in.clock.Advance(time.Minute) // the cooldown ends: half-open
	refresh(t, b)
	if c := tileColour(t, b, "cheap-eu"); c != yellow {
		t.Fatalf("after the cooldown: cheap-eu tile %s, want yellow %s", c, yellow)
	}

	in.fault(t, "cheap-eu", "")
	in.expectPath(t, false, "cheap-eu:ok") // the trial succeeds: closed
	refresh(t, b)
	if c := tileColour(t, b, "cheap-eu"); c != green {
		t.Fatalf("after the trial: cheap-eu tile %s, want green %s", c, green)
	}
	if rate := get(t, b, "error rate", chromedp.Text(css(`.chart[data-channel="cheap-eu"] .rate`))); rate == "no hops" {
		t.Errorf("cheap-eu's error-rate chart saw no hops")
	}
	b.noConsoleErrors(t)
}

// TestOncallDemotedTile: early warning's fourth state in a real browser.
// Two errors in four hops demote cheap-eu while its breaker stays closed
// (two failures of three): its tile turns blue and says until when and
// why, and the reordered request's trace shows the demotion event.
func TestOncallDemotedTile(t *testing.T) {
	in := newIncidentWith(t, "", "  early_warning: {enabled: true, min_samples: 4, for: 0s}\n")
	b := newBrowser(t)
	in.fault(t, "cheap-eu", "503-times=2")
	for _, want := range []string{"cheap-eu:503 -> mid-us:ok", "cheap-eu:503 -> mid-us:ok", "cheap-eu:ok", "cheap-eu:ok"} {
		in.clock.Advance(time.Second) // verdicts are reused for 250 ms
		in.expectPath(t, false, want)
	}
	in.clock.Advance(time.Second)
	in.expectPath(t, true, "cheap-eu:demoted -> mid-us:ok")

	b.do(t, "load /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile.demoted`)))
	if c := tileColour(t, b, "cheap-eu"); c != blue {
		t.Fatalf("demoted: cheap-eu tile %s, want blue %s", c, blue)
	}
	until := get(t, b, "demotion end", chromedp.Text(css(`.tile[data-channel="cheap-eu"] .tile-demoted`)))
	if want := "last in its chains until " + in.clock.Now().Add(2*time.Minute).UTC().Format("15:04:05"); !strings.Contains(until, want) {
		t.Errorf("tile says %q, want %q", until, want)
	}
	if c := tileColour(t, b, "mid-us"); c != green {
		t.Errorf("mid-us tile %s, want green", c)
	}
	b.screenshot(t, "admin-demoted")

	b.do(t, "click the blue tile", chromedp.Click(css(`.tile[data-channel="cheap-eu"]`)), chromedp.WaitVisible(css(`table.traces a.trace-link`)))
	if first := get(t, b, "newest trace", chromedp.Text(css(`table.traces td.path`))); first != "cheap-eu:demoted → mid-us:ok" {
		t.Fatalf("the tile's newest trace has path %q", first)
	}
	b.do(t, "open the trace", chromedp.Click(css(`table.traces a.trace-link`)), chromedp.WaitVisible(css(`.waterfall`)))
	events := eval[[]string](t, b, `Array.from(document.querySelectorAll('.event')).map(e => e.textContent)`)
	found := false
	for _, e := range events {
		found = found || strings.Contains(e, "early warning demotion") && strings.Contains(e, "hopgate.early_warning.reason=error_rate")
	}
	if !found {
		t.Errorf("the trace's events %q lack the demotion with its reason", events)
	}
	in.clock.Advance(2 * time.Minute)
	b.do(t, "reload /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`.tile[data-channel="cheap-eu"]`)))
	if c := tileColour(t, b, "cheap-eu"); c != green {
		t.Errorf("after the cooldown: cheap-eu tile %s, want green (on probation)", c)
	}
	b.noConsoleErrors(t)
}

// TestTraceViewFromFailoverLink opens a failover's trace view from its
// link on /admin and reads the span tree: the spans in tree order, the
// failed hops marked, the gate's discard then commit, an attribute opened
// on demand.
func TestTraceViewFromFailoverLink(t *testing.T) {
	in := newIncident(t, "http://127.0.0.1:16686/trace/{trace_id}")
	b := newBrowser(t)

	in.fault(t, "cheap-eu", "503")
	in.fault(t, "mid-us", "stream-error")
	id := in.expectPath(t, true, "cheap-eu:503 -> mid-us:stream_error -> premium-eu:ok")

	b.do(t, "load /admin", chromedp.Navigate(in.admin+"/admin"), chromedp.WaitVisible(css(`table.failovers a.trace-link`)))
	ext := get(t, b, "trace_url link", chromedp.AttributeValue(css(`table.failovers a.ext`), "href"))
	if ext.Value != "http://127.0.0.1:16686/trace/"+id {
		t.Errorf("trace_url link %q", ext.Value)
	}
	b.do(t, "follow the failover's link", chromedp.Click(css(`table.failovers a.trace-link`)), chromedp.WaitVisible(css(`.waterfall`)))
	if url := get(t, b, "location", chromedp.Location()); !strings.HasSuffix(url, "/admin/traces/"+id) {
		t.Fatalf("the link led to %s, not the trace %s", url, id)
	}
	if path := get(t, b, "path", chromedp.Text(css(`.path-big`))); path != "cheap-eu:503 → mid-us:stream_error → premium-eu:ok" {
		t.Errorf("failover path on top: %q", path)
	}
	names := eval[[]string](t, b, `Array.from(document.querySelectorAll('details.span')).map(d => d.dataset.name)`)
	hop := "chat " + model
	want := []string{"POST /v1/chat/completions", "dispatch " + model,
		hop, "await headers",
		hop, "await headers", "stream gate",
		hop, "await headers", "stream gate"}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("spans in order:\n got %q\nwant %q", names, want)
	}
	gates := eval[[]string](t, b, `Array.from(document.querySelectorAll('details.span[data-gate]')).map(d => d.dataset.gate)`)
	if strings.Join(gates, ",") != "discard_error,commit_content" {
		t.Errorf("gate decisions %q", gates)
	}

	// The failed hops are marked, the gate's discard is red, and the
	// attributes open on demand.
	if n := eval[int](t, b, `document.querySelectorAll('details.span.hop.err').length`); n != 2 {
		t.Errorf("%d errored hops marked, want 2 (503 and stream_error)", n)
	}
	if c := eval[string](t, b, `getComputedStyle(document.querySelector('details.span[data-gate=discard_error] .gate-badge')).color`); c != "rgb(155, 28, 28)" {
		t.Errorf("discard badge colour %s", c)
	}
	if v := eval[bool](t, b, `document.querySelector('details.span[data-gate=discard_error] table.attrs').checkVisibility()`); v {
		t.Error("attributes shown before they were asked for")
	}
	b.do(t, "open the gate's attributes", chromedp.Click(css(`details.span[data-gate=discard_error] summary`)),
		chromedp.WaitVisible(css(`details.span[data-gate=discard_error] table.attrs`)))
	attrs := get(t, b, "gate attributes", chromedp.Text(css(`details.span[data-gate=discard_error] table.attrs`)))
	if !strings.Contains(attrs, "hopgate.gate.decision") || !strings.Contains(attrs, "discard_error") {
		t.Errorf("gate attributes: %q", attrs)
	}
	b.screenshot(t, "trace")
	b.noConsoleErrors(t)

	// An unknown trace is a 404 page that says why (Chromium logs the
	// 404 status itself: that one console line is expected).
	b.do(t, "unknown trace", chromedp.Navigate(in.admin+"/admin/traces/0123456789abcdef0123456789abcdef"),
		chromedp.WaitVisible(css(`main.notfound`)))
	if txt := get(t, b, "404 page", chromedp.Text(css(`main.notfound`))); !strings.Contains(txt, "is not in this process's trace ring") {
		t.Errorf("404 page: %q", txt)
	}
}

// TestStatusShowsBadWindow loads /status after a good minute, a bad one
// (every channel failing: the chain is exhausted) and a recovered one,
// and finds the bad minute red in the hour series.
func TestStatusShowsBadWindow(t *testing.T) {
	in := newIncident(t, "")
	b := newBrowser(t)

	for range 4 {
		in.expectPath(t, false, "cheap-eu:ok")
	}
	in.clock.Advance(time.Minute) // 09:42: the bad minute
	bad := in.clock.Now().UTC().Truncate(time.Minute)
	for _, ch := range channels {
		in.fault(t, ch.id, "503")
	}
	for range 3 {
		if code, _, _ := in.request(t, false); code < 500 {
			t.Fatalf("an exhausted chain answered %d", code)
		}
	}
	for _, ch := range channels {
		in.fault(t, ch.id, "")
	}
	in.clock.Advance(2 * time.Minute) // breakers half-open; the trial closes them
	for range 4 {
		in.request(t, false)
	}
	if err := in.gw.Status().Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	b.do(t, "load /status", chromedp.Navigate(in.main+"/status"), chromedp.WaitVisible(css(`section.model`)))
	sel := fmt.Sprintf(`[data-series=hour] rect[data-start="%s"]`, bad.Format("2006-01-02T15:04:05Z"))
	q := fmt.Sprintf("document.querySelector(%q)", sel)
	if class, fill := eval[string](t, b, q+".getAttribute('class')"), eval[string](t, b, "getComputedStyle("+q+").fill"); class != "bad" || fill != red {
		t.Fatalf("the bad minute %s is %q (fill %s), want bad/red", bad, class, fill)
	}
	if title := eval[string](t, b, q+".textContent"); !strings.Contains(title, "0.00 % of 3 requests served (3 failed)") {
		t.Errorf("bad minute title %q", title)
	}
	if good := eval[int](t, b, `document.querySelectorAll('[data-series=hour] rect.good').length`); good != 2 {
		t.Errorf("%d good minutes, want 2 (before and after)", good)
	}
	b.screenshot(t, "status")
	b.noConsoleErrors(t)
}

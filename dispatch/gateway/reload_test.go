package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// breakerStates reads /admin/breakers: channel -> state.
func breakerStates(t *testing.T, g *gwtest.Gateway) map[string]string {
	t.Helper()
	resp, err := http.Get(g.AdminURL + "/admin/breakers")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var views []struct{ Channel, State string }
	if err := json.NewDecoder(resp.Body).Decode(&views); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range views {
		out[v.Channel] = v.State
	}
	return out
}

// TestReloadKeepsBreakerState: a reload is not an amnesty. A channel whose
// breaker opened stays open across a reload that leaves it unchanged (a
// config push during an incident must not send traffic back to the broken
// channel); a channel whose breaker policy changed starts fresh.
func TestReloadKeepsBreakerState(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{}, relTwo("m|503", ""), "a", "b")
	for i := 0; i < 3; i++ {
		if r := g.Post(relChat); r.Status != 200 {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
	}
	if st := breakerStates(t, g); st["a"] != "open" {
		t.Fatalf("breakers before reload: %v", st)
	}

	// A new model appears; channels a and b are unchanged.
	next := g.Reparse(relTwo("m|503", `  - name: m2
    chain:
      - {channel: b, upstream_model: "m", price: {input: 1, output: 1}}
`))
	if err := g.Process.Reload(next); err != nil {
		t.Fatal(err)
	}
	if g.Process.Config() != next {
		t.Fatal("Reload did not install the new config")
	}
	r := g.Post(relChat)
	if p := r.Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" {
		t.Fatalf("path after reload %q: the open breaker was forgotten", p)
	}
	if r := g.Post(`{"model":"m2","messages":[]}`); r.Status != 200 {
		t.Fatalf("new model after reload: %d %s", r.Status, r.Body)
	}
	if st := breakerStates(t, g); st["a"] != "open" || st["b"] != "closed" {
		t.Fatalf("breakers after reload: %v", st)
	}

	// Changing a's breaker policy gives it a fresh breaker.
	changed := g.Reparse(strings.Replace(relTwo("m|503", ""), `{id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY}`,
		`{id: a, base_url: "{{url:a}}", api_key_env: CHANNEL_KEY, breaker: {failures: 5}}`, 1))
	if err := g.Process.Reload(changed); err != nil {
		t.Fatal(err)
	}
	if st := breakerStates(t, g); st["a"] != "closed" {
		t.Fatalf("breaker of a changed channel: %v", st)
	}

	// Listener addresses cannot change on reload: rejected, old config kept.
	moved := g.Reparse(relTwo("m", ""))
	moved.Listen = "127.0.0.1:1"
	if err := g.Process.Reload(moved); err == nil {
		t.Fatal("a reload moving the listener was accepted")
	}
	if g.Process.Config() != changed {
		t.Fatal("a rejected reload replaced the config")
	}
}

// The overload budget and bounds are fixed at start: a reload that changes
// them is accepted (the rest of the file applies) but says, in the log,
// that the running ones are kept; a reload that leaves them alone says
// nothing about them.
func TestReloadWarnsOverloadIsFixed(t *testing.T) {
	const warning = "overload budget and bounds are fixed at start"
	g := gwtest.Start(t, gwtest.Options{}, relTwo("m", "overload: {max_streams: 100}\n"), "a", "b")
	if err := g.Process.Reload(g.Reparse(relTwo("m", "overload: {max_streams: 100}\n"))); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(g.Logs.String(), warning) {
		t.Fatalf("a reload that kept the bounds warned:\n%s", g.Logs.String())
	}
	if err := g.Process.Reload(g.Reparse(relTwo("m", "overload: {max_streams: 5}\n"))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.Logs.String(), warning) {
		t.Fatalf("a reload that changed max_streams did not warn:\n%s", g.Logs.String())
	}
}

// relThree is relTwo with channel c serving model m2, and early warning on
// for every channel; without c (withC false) it is what a reload that
// removes the channel installs.
func relThree(withC bool) string {
	const ew = "policy:\n  early_warning: {enabled: true}\n"
	if !withC {
		return relTwo("m|503", ew)
	}
	yml := relTwo("m|503", `  - name: m2
    chain:
      - {channel: c, upstream_model: "m", price: {input: 1, output: 1}}
`+ew)
	return strings.Replace(yml, "models:\n", `  - {id: c, base_url: "{{url:c}}", api_key_env: CHANNEL_KEY}
models:
`, 1)
}

// TestReloadForgetsRemovedChannels: a reload that removes a channel drops
// its breaker, early-warning detector and error-rate counters (a
// long-running gateway reloaded many times would otherwise keep state for
// every channel it ever had),
// and leaves the state of the channels it keeps alone: a's breaker, open
// before the reload, is still open after it.
func TestReloadForgetsRemovedChannels(t *testing.T) {
	g := gwtest.Start(t, gwtest.Options{}, relThree(true), "a", "b", "c")
	for i := 0; i < 3; i++ {
		if r := g.Post(relChat); r.Status != 200 {
			t.Fatalf("status %d %s", r.Status, r.Body)
		}
	}
	if r := g.Post(`{"model":"m2","messages":[]}`); r.Status != 200 {
		t.Fatalf("m2 on channel c: %d %s", r.Status, r.Body)
	}
	eng, rates := g.Process.Engine(), g.Process.Telemetry().ErrorRates
	// names lists the channels with a breaker, then those with a detector,
	// then those with error-rate counters (the on-call page's).
	names := func() string {
		var out []string
		for _, b := range eng.Breakers().All() {
			out = append(out, b.Name())
		}
		out = append(out, "|")
		for _, d := range eng.Warnings().All() {
			out = append(out, d.Name())
		}
		out = append(out, "|")
		out = append(out, rates.Channels()...)
		return strings.Join(out, " ")
	}
	if before := names(); before != "a b c | a b c | a b c" {
		t.Fatalf("breakers | detectors | error rates before the reload: %s", before)
	}
	detA := eng.Warnings().Lookup("a")
	if st := breakerStates(t, g); st["a"] != "open" {
		t.Fatalf("breakers before the reload: %v", st)
	}

	if err := g.Process.Reload(g.Reparse(relThree(false))); err != nil {
		t.Fatal(err)
	}
	if after := names(); after != "a b | a b | a b" {
		t.Fatalf("breakers | detectors | error rates after a reload that removed c: %s, want c's gone", after)
	}
	if eng.Warnings().Lookup("a") != detA {
		t.Fatal("the reload replaced the detector of a channel it kept")
	}
	if p := g.Post(relChat).Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" {
		t.Fatalf("path after the reload %q: the open breaker of a kept channel was forgotten", p)
	}
}

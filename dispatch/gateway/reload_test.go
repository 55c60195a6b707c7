package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/dispatch/config"
	"github.com/hopgate/hopgate/dispatch/gateway"
)

// breakerStates reads /admin/breakers: channel -> state.
func (r *relGW) breakerStates() map[string]string {
	r.t.Helper()
	resp, err := http.Get("http://" + r.gw.AdminAddr() + "/admin/breakers")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var views []struct{ Channel, State string }
	if err := json.NewDecoder(resp.Body).Decode(&views); err != nil {
		r.t.Fatal(err)
	}
	out := map[string]string{}
	for _, v := range views {
		out[v.Channel] = v.State
	}
	return out
}

// reparse builds the config Reload gets: same listeners, new body.
func (r *relGW) reparse(yml string) *config.Config {
	r.t.Helper()
	cur := r.gw.Config()
	yml = strings.ReplaceAll(yml, "{{listen}}", cur.Listen)
	yml = strings.ReplaceAll(yml, "{{admin}}", cur.AdminListen)
	for id, u := range r.urls {
		yml = strings.ReplaceAll(yml, "{{url:"+id+"}}", u)
	}
	cfg, err := config.Parse([]byte(yml), nil)
	if err != nil {
		r.t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestReloadKeepsBreakerState: a reload is not an amnesty. A channel whose
// breaker opened stays open across a reload that leaves it unchanged (a
// config push during an incident must not send traffic back to the broken
// channel); a channel whose breaker policy changed starts fresh.
func TestReloadKeepsBreakerState(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	r := relStart(t, relTwo("m|503", ""), gateway.Options{Clock: clock}, nil, nil, "a", "b")
	for i := 0; i < 3; i++ {
		if resp, out := r.post(relChat, nil); resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, out)
		}
	}
	if st := r.breakerStates(); st["a"] != "open" {
		t.Fatalf("breakers before reload: %v", st)
	}

	// A new model appears; channels a and b are unchanged.
	next := r.reparse(relTwo("m|503", `  - name: m2
    chain:
      - {channel: b, upstream_model: "m", price: {input: 1, output: 1}}
`))
	if err := r.gw.Reload(next); err != nil {
		t.Fatal(err)
	}
	if r.gw.Config() != next {
		t.Fatal("Reload did not install the new config")
	}
	resp, _ := r.post(relChat, nil)
	if p := resp.Header.Get("X-Hopgate-Path"); p != "a:open -> b:ok" {
		t.Fatalf("path after reload %q: the open breaker was forgotten", p)
	}
	if resp, out := r.post(`{"model":"m2","messages":[]}`, nil); resp.StatusCode != 200 {
		t.Fatalf("new model after reload: %d %s", resp.StatusCode, out)
	}
	if st := r.breakerStates(); st["a"] != "open" || st["b"] != "closed" {
		t.Fatalf("breakers after reload: %v", st)
	}

	// Changing a's breaker policy gives it a fresh breaker.
	changed := r.reparse(strings.Replace(relTwo("m|503", ""), `{id: a, base_url: "{{url:a}}"}`,
		`{id: a, base_url: "{{url:a}}", breaker: {failures: 5}}`, 1))
	if err := r.gw.Reload(changed); err != nil {
		t.Fatal(err)
	}
	if st := r.breakerStates(); st["a"] != "closed" {
		t.Fatalf("breaker of a changed channel: %v", st)
	}

	// Listener addresses cannot change on reload: rejected, old config kept.
	moved := r.reparse(relTwo("m", ""))
	moved.Listen = "127.0.0.1:1"
	if err := r.gw.Reload(moved); err == nil {
		t.Fatal("a reload moving the listener was accepted")
	}
	if r.gw.Config() != changed {
		t.Fatal("a rejected reload replaced the config")
	}
}

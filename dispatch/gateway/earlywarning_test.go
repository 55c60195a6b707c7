package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/hopgate/hopgate/internal/testkit/gwtest"
)

// A demotion through the real process: gateway.Start wires the detectors'
// transitions to the demotions counter and a warning with the evidence,
// and feeds the demoted gauge; a reload that leaves a channel's early
// warning alone keeps its demotion (as for breakers), one that changes it
// starts the channel over.
func TestEarlyWarningDemotionIsCountedAndLogged(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	const ew = "policy:\n  early_warning: {enabled: true, min_samples: 4, for: 0s}\n"
	r := gwtest.Start(t, gwtest.Options{Clock: clock}, relTwo("m|503-times=2", ew), "a", "b")
	for _, want := range []string{"a:503 -> b:ok", "a:503 -> b:ok", "a:ok", "a:ok", "a:demoted -> b:ok"} {
		clock.Advance(time.Second) // verdicts are reused for 250 ms
		if resp := r.Post(relChat); resp.Status != 200 || resp.Header.Get("X-Hopgate-Path") != want {
			t.Fatalf("path %q (%d %s), want %q", resp.Header.Get("X-Hopgate-Path"), resp.Status, resp.Body, want)
		}
	}
	metrics := func() string {
		resp, err := http.Get(r.AdminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	text := metrics()
	for _, want := range []string{
		`hopgate_early_warning_demotions_total{channel="a",channel_region="",reason="error_rate",region=""} 1`,
		`hopgate_early_warning_demoted{channel="a",channel_region="",region=""} 1`,
		`hopgate_early_warning_demoted{channel="b",channel_region="",region=""} 0`,
		`hopgate_breaker_state{channel="a",channel_region="",region=""} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if logs := r.Logs.String(); !strings.Contains(logs, `"msg":"early warning: channel demoted to the end of its chains"`) ||
		!strings.Contains(logs, `"evidence":"2 errors in 4 hops over the last 30s"`) {
		t.Errorf("no demotion warning with its evidence in the log:\n%s", logs)
	}

	same := r.Reparse(relTwo("m|503-times=2", ew))
	if err := r.Process.Reload(same); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if resp := r.Post(relChat); resp.Header.Get("X-Hopgate-Path") != "a:demoted -> b:ok" {
		t.Fatalf("after a reload that kept it: %q, want the demotion kept", resp.Header.Get("X-Hopgate-Path"))
	}
	changed := r.Reparse(relTwo("m|503-times=2", strings.Replace(ew, "min_samples: 4", "min_samples: 6", 1)))
	if err := r.Process.Reload(changed); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if resp := r.Post(relChat); resp.Header.Get("X-Hopgate-Path") != "a:ok" {
		t.Fatalf("after a reload that changed it: %q, want a fresh start", resp.Header.Get("X-Hopgate-Path"))
	}
}

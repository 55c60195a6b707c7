package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoak is the soak of `make test`: 50 s of mixed traffic over randomly
// failing channels (a 3 s smoke run with -short), then every check of the
// long soak. The whole test stays under 60 s of wall time.
func TestSoak(t *testing.T) {
	o := Options{Duration: 50 * time.Second, Rate: 20, Seed: uint64(time.Now().UnixNano())}
	if testing.Short() {
		o.Duration = 3 * time.Second
	}
	rep := runSoak(t, o)
	if rep.Requests == 0 || rep.PathsChecked == 0 || len(rep.FaultsInjected) == 0 {
		t.Fatalf("the soak exercised nothing: %+v", rep)
	}
}

// TestSoakCountsShedRequests: with bounds and a budget small enough that
// the gateway must shed and fail hops over at the budget, shed requests are
// counted apart (503 engine_overloaded with Retry-After and X-Hopgate-Shed),
// reconciled with hopgate_shed_requests_total by reason, traced, and not
// mistaken for the chain deadline's reply; hops failed at the budget are
// failovers, not violations. The memory limit and its RSS ceiling are
// applied and restored. The providers stream slowly (50 ms a frame) so that
// streams overlap however idle the machine: a quick answer leaves the
// gateway before the next request arrives.
func TestSoakCountsShedRequests(t *testing.T) {
	o := Options{
		Duration: 6 * time.Second, Rate: 40, Seed: uint64(time.Now().UnixNano()),
		EndlessShare: 0.8, BudgetBytes: 64 << 10, GatewayMaxInFlight: 3, GatewayMaxStreams: 1,
		FrameDelay: 50 * time.Millisecond,
		// Far above what the run needs, race detector included: the
		// ceiling is checked, never crossed.
		MemoryLimit: 4 << 30, RSSCeiling: 3 << 30,
	}
	if testing.Short() {
		o.Duration = 3 * time.Second
	}
	rep := runSoak(t, o)
	shed := total(rep.Shed)
	switch {
	case shed == 0:
		t.Fatalf("nothing was shed at 1 stream and 3 requests in flight: %+v", rep)
	case rep.ShedTraced != shed:
		t.Fatalf("%d shed requests, %d traced", shed, rep.ShedTraced)
	case rep.Shed["streams"] == 0:
		t.Fatalf("no stream was shed at a bound of 1: %v", rep.Shed)
	case rep.BudgetLimit != o.BudgetBytes || rep.BoundInFlight != 3 || rep.BoundStreams != 1:
		t.Fatalf("gateway bounds: budget %d, in flight %d, streams %d", rep.BudgetLimit, rep.BoundInFlight, rep.BoundStreams)
	case rep.MemoryLimit != o.MemoryLimit || rep.RSSCeiling != o.RSSCeiling:
		t.Fatalf("memory limit %d, ceiling %d", rep.MemoryLimit, rep.RSSCeiling)
	case rep.Outcomes["deadline"] != rep.MetricOutcomes["deadline"]:
		t.Fatalf("deadline replies: clients %d, metric %d", rep.Outcomes["deadline"], rep.MetricOutcomes["deadline"])
	}
	if !strings.Contains(rep.Text(), "shed (503 engine_overloaded, Retry-After): clients") {
		t.Fatalf("the report has no shed line:\n%s", rep.Text())
	}
}

// TestSoakWalletBooks: in wallet mode every request is charged to a
// tenant's wallet, and after the drain the books hold (issue 35): the
// ledger and the balance agree, nothing stays reserved, no failed request
// was charged and every complete answer was (runSoak fails on any
// violation).
func TestSoakWalletBooks(t *testing.T) {
	o := Options{Duration: 6 * time.Second, Rate: 20, Seed: uint64(time.Now().UnixNano()), Wallet: true}
	if testing.Short() {
		o.Duration = 3 * time.Second
	}
	rep := runSoak(t, o)
	if rep.Wallet == nil || rep.Wallet.Charges == 0 || rep.Wallet.Reserved != 0 {
		t.Fatalf("the wallet soak charged nothing, or left a reservation: %+v", rep.Wallet)
	}
	if !strings.Contains(rep.Text(), "wallet: ") {
		t.Fatalf("the report has no wallet line:\n%s", rep.Text())
	}
}

// TestShedAccounting: the client view and hopgate_shed_requests_total must
// agree reason by reason; a difference in either direction is a violation.
func TestShedAccounting(t *testing.T) {
	for _, tc := range []struct {
		name            string
		clients, metric map[string]int
		violations      int
	}{
		{"equal", map[string]int{"streams": 3}, map[string]int{"streams": 3, "budget": 0, "in_flight": 0}, 0},
		{"metric missed one", map[string]int{"streams": 3}, map[string]int{"streams": 2}, 1},
		{"shed unseen by clients", map[string]int{}, map[string]int{"in_flight": 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Shed: tc.clients, MetricShed: tc.metric}
			checkShed(rep)
			if len(rep.Violations) != tc.violations {
				t.Fatalf("violations %q, want %d", rep.Violations, tc.violations)
			}
		})
	}
}

// TestParseSample reads the lines the gateway's /metrics writes.
func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		line   string
		ok     bool
		name   string
		labels map[string]string
		value  float64
	}{
		{`hopgate_shed_requests_total{otel_scope_name="x",reason="streams",region="soak-1"} 7`, true,
			"hopgate_shed_requests_total", map[string]string{"otel_scope_name": "x", "reason": "streams", "region": "soak-1"}, 7},
		{`hopgate_buffer_budget_used_bytes 1.048576e+06`, true, "hopgate_buffer_budget_used_bytes", map[string]string{}, 1 << 20},
		{`m{a="q\"uote,}",b="x"} 2 1700000000`, true, "m", map[string]string{"a": `q"uote,}`, "b": "x"}, 2},
		{`# TYPE m counter`, false, "", nil, 0},
		{`m{a="unterminated} 1`, false, "", nil, 0},
		{`m NaNa`, false, "", nil, 0},
	} {
		s, ok := parseSample(tc.line)
		if ok != tc.ok {
			t.Errorf("%q: ok %v", tc.line, ok)
			continue
		}
		if !ok {
			continue
		}
		if s.name != tc.name || s.value != tc.value || len(s.labels) != len(tc.labels) {
			t.Errorf("%q: got %+v", tc.line, s)
		}
		for k, v := range tc.labels {
			if s.labels[k] != v {
				t.Errorf("%q: label %s = %q, want %q", tc.line, k, s.labels[k], v)
			}
		}
	}
}

// TestByteSizeFlag: sizes are written as GOMEMLIMIT is.
func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "64KiB": 64 << 10, "1GiB": 1 << 30, "1000": 1000, "10B": 10, "-1": -1} {
		var s byteSize
		if err := s.Set(in); err != nil || int64(s) != want {
			t.Errorf("%q: %d, %v; want %d", in, s, err, want)
		}
	}
	var s byteSize
	for _, bad := range []string{"", "12MB", "lots", "9999999999GiB"} {
		if err := s.Set(bad); err == nil {
			t.Errorf("%q: accepted as %d", bad, s)
		}
	}
}

func runSoak(t *testing.T, o Options) *Report {
	t.Helper()
	if testing.Verbose() {
		o.Progress = os.Stderr
	}
	t.Logf("seed %d", o.Seed)
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Text())
	if len(rep.Violations) > 0 {
		t.Fatalf("%d violation line(s); see the report above", len(rep.Violations))
	}
	return rep
}

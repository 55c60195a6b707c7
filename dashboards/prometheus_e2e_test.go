package dashboards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hopgate/hopgate/internal/testkit"
)

// prometheusBin finds the Prometheus binary the way `make test` provides it:
// HOPGATE_PROMETHEUS_BIN, else PATH. A machine without it skips, except in
// CI (CI=true), where a missing binary means the install step broke and must
// not pass silently.
func prometheusBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test runs a real Prometheus for ~20 s")
	}
	bin := os.Getenv("HOPGATE_PROMETHEUS_BIN")
	if bin == "" {
		bin, _ = exec.LookPath("prometheus")
	}
	if bin == "" {
		msg := "prometheus not found (set HOPGATE_PROMETHEUS_BIN or run `make prometheus`)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// promServer is a real Prometheus process scraping one target every second.
type promServer struct {
	url       string
	log       *testkit.SyncBuffer
	exemplars bool // exemplar storage is on (the feature flag was accepted)
	client    *http.Client
}

// startPrometheus runs bin with a config scraping target's /metrics every
// second, storage in a temporary directory, and waits for /-/ready. The
// process is stopped (SIGINT, then SIGKILL) when the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: hopgate
    metrics_path: /metrics
    static_configs:
      - targets: [%q]
`, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// freeAddr races with parallel test packages: retry on a new port when
	// Prometheus exits because its address was taken meanwhile.
	for attempt := 1; ; attempt++ {
		p, out, ok := tryStartPrometheus(t, bin, cfgPath, dir)
		if ok {
			return p
		}
		if attempt == 3 || !strings.Contains(out, "address already in use") {
			t.Fatalf("prometheus exited before it was ready:\n%s", out)
		}
		t.Logf("prometheus lost a port race (attempt %d); retrying", attempt)
	}
}

func tryStartPrometheus(t *testing.T, bin, cfgPath, dir string) (*promServer, string, bool) {
	t.Helper()
	addr := testkit.LoopbackAddr(t)
	log := &testkit.SyncBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data-"+addr[strings.LastIndexByte(addr, ':')+1:]),
		"--web.listen-address="+addr,
		"--enable-feature=exemplar-storage",
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Only the process we started, by its handle.
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	p := &promServer{url: "http://" + addr, log: log, client: &http.Client{Timeout: 10 * time.Second}}
	// Ready when /-/ready answers 200, or exited.
	gone := func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	testkit.Poll{Within: 30 * time.Second, Every: 100 * time.Millisecond}.EventuallyNil(t, func() error {
		if gone() {
			return nil
		}
		resp, err := p.client.Get(p.url + "/-/ready")
		if err != nil {
			return fmt.Errorf("%w\n%s", err, log.Tail(30))
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s\n%s", resp.Status, log.Tail(30))
		}
		return nil
	}, "prometheus ready")
	if gone() {
		return nil, log.Tail(30), false
	}
	// Prometheus logs this line when --enable-feature=exemplar-storage took
	// effect; an unknown feature is only a warning, so the log is the proof.
	p.exemplars = strings.Contains(log.String(), "exemplar storage enabled")
	return p, "", true
}

// series is one series of a query result; a scalar result is one series
// without labels.
type series struct {
	Metric map[string]string
	Values []float64
}

func (s series) String() string {
	return fmt.Sprintf("%v=%v", s.Metric, s.Values)
}

// finite reports whether any value is a number (not NaN/Inf): 0/0 yields a
// series full of NaN, which a panel draws as nothing.
func finite(ss []series) bool {
	for _, s := range ss {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				return true
			}
		}
	}
	return false
}

// apiResponse is the envelope of Prometheus' HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// call GETs (or POSTs) an API path and returns its data, or an error that
// carries Prometheus' own message (a PromQL parse error, for instance).
func (p *promServer) call(ctx context.Context, path string, form url.Values) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, not JSON: %.200s", path, resp.StatusCode, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: status %q, %s: %s", path, r.Status, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// query runs an instant query at now.
func (p *promServer) query(ctx context.Context, expr string) ([]series, error) {
	data, err := p.call(ctx, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

// queryRange runs a range query over the last d with a 1 s step, the way
// Grafana sends a panel's range targets.
func (p *promServer) queryRange(ctx context.Context, expr string, d time.Duration) ([]series, error) {
	end := time.Now()
	data, err := p.call(ctx, "/api/v1/query_range", url.Values{
		"query": {expr},
		"start": {unix(end.Add(-d))},
		"end":   {unix(end)},
		"step":  {"1"},
	})
	if err != nil {
		return nil, err
	}
	return decodeResult(data)
}

// exemplar is one stored exemplar: its labels (trace_id) and value.
type exemplar struct {
	Labels map[string]string `json:"labels"`
	Value  string            `json:"value"`
}

// queryExemplars returns the exemplars of expr's series over the last d.
func (p *promServer) queryExemplars(ctx context.Context, expr string, d time.Duration) ([]exemplar, error) {
	end := time.Now()
	data, err := p.call(ctx, "/api/v1/query_exemplars", url.Values{
		"query": {expr},
		"start": {unix(end.Add(-d))},
		"end":   {unix(end)},
	})
	if err != nil {
		return nil, err
	}
	var groups []struct {
		Exemplars []exemplar `json:"exemplars"`
	}
	if err := json.Unmarshal(data, &groups); err != nil {
		return nil, fmt.Errorf("decode exemplars: %w", err)
	}
	var out []exemplar
	for _, g := range groups {
		out = append(out, g.Exemplars...)
	}
	return out, nil
}

func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// decodeResult reads vector, matrix and scalar results.
func decodeResult(data json.RawMessage) ([]series, error) {
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "vector", "matrix":
		var raw []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
			Values [][]any           `json:"values"`
		}
		if err := json.Unmarshal(d.Result, &raw); err != nil {
			return nil, err
		}
		out := make([]series, 0, len(raw))
		for _, r := range raw {
			s := series{Metric: r.Metric}
			points := r.Values
			if r.Value != nil {
				points = [][]any{r.Value}
			}
			for _, pt := range points {
				v, err := pointValue(pt)
				if err != nil {
					return nil, err
				}
				s.Values = append(s.Values, v)
			}
			out = append(out, s)
		}
		return out, nil
	case "scalar":
		var pt []any
		if err := json.Unmarshal(d.Result, &pt); err != nil {
			return nil, err
		}
		v, err := pointValue(pt)
		if err != nil {
			return nil, err
		}
		return []series{{Values: []float64{v}}}, nil
	default:
		return nil, fmt.Errorf("unexpected result type %q", d.ResultType)
	}
}

// pointValue reads [timestamp, "value"]; Prometheus writes NaN and ±Inf as
// strings that ParseFloat understands.
func pointValue(pt []any) (float64, error) {
	if len(pt) != 2 {
		return 0, fmt.Errorf("point %v: want [ts, value]", pt)
	}
	s, ok := pt[1].(string)
	if !ok {
		return 0, fmt.Errorf("point %v: value is not a string", pt)
	}
	return strconv.ParseFloat(s, 64)
}

// scraped polls every 250 ms for up to within. This is a real-time test:
// Prometheus scrapes on its own clock, so waiting is the only way to
// observe it, but every wait is bounded.
func scraped(within time.Duration) testkit.Poll {
	return testkit.Poll{Within: within, Every: 250 * time.Millisecond}
}

var errEmpty = errors.New("empty result")

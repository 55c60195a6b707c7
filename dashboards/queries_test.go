package dashboards

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	promql "github.com/prometheus/prometheus/promql/parser"
)

// Every query the board sends must be PromQL once Grafana has interpolated it.
func TestQueriesParseAsPromQL(t *testing.T) {
	raw, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := Queries(raw)
	if err != nil {
		t.Fatal(err)
	}
	// 1 tile + 1 error rate + 1 timeline + 2 failover + 1 gate + 1 header
	// timeout + 2 deadline + 3 latency + 1 outcome + 1 cost + 2 early-warning
	// requests + 1 early-warning premium + 1 budget + 3 shed/admission + 1
	// rate-limit window = 22, + 3 variables.
	if len(qs) != 25 {
		t.Errorf("Queries found %d queries, want 25", len(qs))
	}
	allowed := contractMetrics(t)
	for _, q := range qs {
		expr := Substitute(q.Expr, map[string]string{"region": "eu-west-1|us-east-1"})
		if strings.Contains(expr, "$") {
			t.Errorf("%s/%s: uninterpolated variable left: %s", q.PanelTitle, q.RefID, expr)
		}
		parsed, err := promql.ParseExpr(expr)
		if err != nil {
			t.Errorf("%s/%s: %v\n%s", q.PanelTitle, q.RefID, err, expr)
			continue
		}
		promql.Inspect(parsed, func(n promql.Node, _ []promql.Node) error {
			vs, ok := n.(*promql.VectorSelector)
			if !ok {
				return nil
			}
			if !allowed[vs.Name] {
				t.Errorf("%s/%s: metric %q is not in telemetry/names.go", q.PanelTitle, q.RefID, vs.Name)
			}
			return nil
		})
	}
}

// contractMetrics reads the Metric* constants of telemetry/names.go (the
// contract file, and ratelimit.go for the rate-limit metrics of DESIGN
// §16) plus the series a histogram adds.
func contractMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, file := range []string{"../telemetry/names.go", "../telemetry/ratelimit.go"} {
		contractFile(t, file, out)
	}
	if len(out) == 0 {
		t.Fatal("no Metric* constants found in telemetry/names.go")
	}
	return out
}

// contractFile adds the Metric* constants of one telemetry file to out.
func contractFile(t *testing.T, file string, out map[string]bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if !strings.HasPrefix(name.Name, "Metric") || i >= len(vs.Values) {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok {
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
				out[v+suffix] = true
			}
		}
		return true
	})
}

// Queries must see panels of collapsed rows and both variable query shapes,
// because the e2e test feeds it boards edited in the Grafana UI too.
func TestQueriesShapes(t *testing.T) {
	board := `{
	  "panels": [
	    {"type": "row", "title": "r", "collapsed": true, "panels": [
	      {"title": "inner", "targets": [{"refId": "A", "expr": "up", "instant": true}]}
	    ]},
	    {"title": "text", "type": "text"},
	    {"title": "mixed", "targets": [{"refId": "A", "expr": ""}, {"refId": "B", "expr": "sum(up)"}]}
	  ],
	  "templating": {"list": [
	    {"name": "ds", "type": "datasource", "query": "prometheus"},
	    {"name": "a", "type": "query", "query": "label_values(up, job)"},
	    {"name": "b", "type": "query", "query": {"query": "label_values(job)", "refId": "X"}},
	    {"name": "c", "type": "custom", "query": "x,y"}
	  ]}
	}`
	got, err := Queries([]byte(board))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{
		{"inner", "A", "up", true},
		{"mixed", "B", "sum(up)", false},
		{"variable a", "a", "label_values(up, job)", true},
		{"variable b", "b", "label_values(job)", true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("query %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := Queries([]byte("{")); err == nil {
		t.Error("Queries accepted broken JSON")
	}
}

func TestSubstitute(t *testing.T) {
	cases := []struct {
		name, in string
		vars     map[string]string
		want     string
	}{
		// The common case: a board variable set by the caller.
		{"dollar form", `up{region=~"$region"}`, map[string]string{"region": "eu"}, `up{region=~"eu"}`},
		// Grafana accepts braces and a format suffix; both must be consumed.
		{"brace and format", `up{a=~"${region}",b=~"${channel:regex}"}`, map[string]string{"region": "eu", "channel": "x|y"}, `up{a=~"eu",b=~"x|y"}`},
		// Unset board variables act as Grafana's All (".*").
		{"board default", `up{model=~"$model"}`, nil, `up{model=~".*"}`},
		// $__rate_interval must not be eaten as $__rate + "_interval".
		{"builtins", `rate(x[$__rate_interval]) + rate(x[$__interval]) + x offset $__range`, nil, `rate(x[1m]) + rate(x[1m]) + x offset 1h`},
		// Caller values override built-ins (a test may want a 5m window).
		{"override builtin", `rate(x[$__rate_interval])`, map[string]string{"__rate_interval": "5m"}, `rate(x[5m])`},
		// Legacy [[var]] syntax still appears in imported boards.
		{"brackets", `up{a="[[region]]"}`, map[string]string{"region": "eu"}, `up{a="eu"}`},
		// Unknown variables are left for the caller to notice.
		{"unknown", `up{a="$nope"}`, nil, `up{a="$nope"}`},
		// Variable functions become queries Prometheus answers with the values.
		{"label_values with selector", `label_values(hopgate_breaker_state{region=~"$region"}, channel)`, map[string]string{"region": "eu"},
			`group by (channel) (hopgate_breaker_state{region=~"eu"})`},
		// A comma inside the selector must not be taken as the separator.
		{"label_values comma in matcher", `label_values(up{a="x,y"}, job)`, nil, `group by (job) (up{a="x,y"})`},
		{"label_values label only", `label_values(region)`, nil, `group by (region) ({region!=""})`},
		{"query_result", `query_result(topk(3, up))`, nil, `topk(3, up)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Substitute(tc.in, tc.vars); got != tc.want {
				t.Errorf("Substitute(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Query is one PromQL query found in a dashboard: a panel target, or a
// template variable's query (PanelTitle "variable NAME", RefID the variable
// name, Instant true).
type Query struct {
	PanelTitle string
	RefID      string
	Expr       string
	Instant    bool
}

// The slice of Grafana's dashboard JSON that holds queries. Decoding into
// our own shape (not the SDK's) lets Queries read any board, including one
// exported from the Grafana UI.
type jsonBoard struct {
	Panels     []jsonPanel `json:"panels"`
	Templating struct {
		List []jsonVariable `json:"list"`
	} `json:"templating"`
}

type jsonPanel struct {
	Title   string       `json:"title"`
	Targets []jsonTarget `json:"targets"`
	Panels  []jsonPanel  `json:"panels"` // collapsed rows keep their panels here
}

type jsonTarget struct {
	RefID   string `json:"refId"`
	Expr    string `json:"expr"`
	Instant bool   `json:"instant"`
}

type jsonVariable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// Queries returns every Prometheus target expression of board (panels inside
// rows included) in panel order, then every query variable's query.
func Queries(board []byte) ([]Query, error) {
	var b jsonBoard
	if err := json.Unmarshal(board, &b); err != nil {
		return nil, fmt.Errorf("dashboards: decode board: %w", err)
	}
	var out []Query
	var walk func([]jsonPanel)
	walk = func(panels []jsonPanel) {
		for _, p := range panels {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					continue // not a Prometheus target
				}
				out = append(out, Query{PanelTitle: p.Title, RefID: t.RefID, Expr: t.Expr, Instant: t.Instant})
			}
			walk(p.Panels)
		}
	}
	walk(b.Panels)
	for _, v := range b.Templating.List {
		if v.Type != "query" {
			continue
		}
		expr, err := variableQuery(v.Query)
		if err != nil {
			return nil, fmt.Errorf("dashboards: variable %s: %w", v.Name, err)
		}
		if expr == "" {
			continue
		}
		out = append(out, Query{PanelTitle: "variable " + v.Name, RefID: v.Name, Expr: expr, Instant: true})
	}
	return out, nil
}

// variableQuery reads a variable query stored either as a string (classic)
// or as the Prometheus editor's object {"query": "..."}.
func variableQuery(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("query is neither a string nor an object: %w", err)
	}
	return obj.Query, nil
}

// Values Substitute gives Grafana's built-in variables: what Grafana would
// send for a one-hour range on a 15 s scrape.
var builtins = map[string]string{
	"__rate_interval":    "1m",
	"__rate_interval_ms": "60000",
	"__interval":         "1m",
	"__interval_ms":      "60000",
	"__range":            "1h",
	"__range_s":          "3600",
	"__range_ms":         "3600000",
}

// boardVars are this package's multi-value variables; when the caller does
// not set them they take the boards' All value.
var boardVars = map[string]string{
	VarRegion:  ".*",
	VarChannel: ".*",
	VarModel:   ".*",
}

// $name, ${name}, ${name:format}, [[name]] and [[name:format]].
var varRef = regexp.MustCompile(`\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)`)

var (
	labelValues = regexp.MustCompile(`^\s*label_values\((.*)\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.*)\)\s*$`)
	labelName   = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// Substitute interpolates Grafana variables into expr the way Grafana would
// before sending it to Prometheus, so the result is plain PromQL:
//
//   - vars supplies template variables by name (no "$"), inserted verbatim:
//     for a multi-value selection pass a regex such as "a|b";
//   - region, channel and model default to ".*" (the boards' All value);
//   - $__rate_interval and $__interval become 1m, $__range 1h (with the
//     _s/_ms forms); other unknown variables are left alone;
//   - the variable functions label_values(sel, label) and label_values(label)
//     become `group by (label) (sel)`, whose series carry exactly the values
//     Grafana would list; query_result(q) becomes q.
func Substitute(expr string, vars map[string]string) string {
	out := varRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := varRef.FindStringSubmatch(ref)
		name := m[1] + m[2] + m[3] // exactly one group matched
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := builtins[name]; ok {
			return v
		}
		if v, ok := boardVars[name]; ok {
			return v
		}
		return ref
	})
	if m := labelValues.FindStringSubmatch(out); m != nil {
		return labelValuesQuery(m[1], out)
	}
	if m := queryResult.FindStringSubmatch(out); m != nil {
		return strings.TrimSpace(m[1])
	}
	return out
}

// labelValuesQuery rewrites the arguments of label_values. The label name is
// always the last argument and cannot contain a comma; a selector can.
func labelValuesQuery(args, orig string) string {
	args = strings.TrimSpace(args)
	i := strings.LastIndex(args, ",")
	if i < 0 {
		if !labelName.MatchString(args) {
			return orig
		}
		return fmt.Sprintf(`group by (%s) ({%s!=""})`, args, args)
	}
	sel, label := strings.TrimSpace(args[:i]), strings.TrimSpace(args[i+1:])
	if !labelName.MatchString(label) || sel == "" {
		return orig
	}
	return fmt.Sprintf("group by (%s) (%s)", label, sel)
}

package config

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Error is one configuration mistake. Line is the 1-based line of the
// offending YAML node, or 0 when the mistake concerns the whole file (empty
// file, unreadable YAML without a position).
type Error struct {
	Line int
	Msg  string
}

func (e Error) Error() string { return "line " + strconv.Itoa(e.Line) + ": " + e.Msg }

// ErrorList is every mistake found in one config file. Parse reports all of
// them at once so an operator fixes a file in one round trip, not one
// mistake per `hopgate check`.
type ErrorList []Error

// Error joins the mistakes, one per line, sorted by line (stable, so
// mistakes on one line keep the order they were found in).
func (l ErrorList) Error() string {
	s := make(ErrorList, len(l))
	copy(s, l)
	s.sort()
	var b strings.Builder
	for i, e := range s {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

func (l ErrorList) sort() {
	sort.SliceStable(l, func(i, j int) bool { return l[i].Line < l[j].Line })
}

// dedup drops exact repeats, which appear when an alias makes the same bad
// node reachable twice.
func (l ErrorList) dedup() ErrorList {
	seen := make(map[Error]bool, len(l))
	out := l[:0]
	for _, e := range l {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a syntax error of the YAML library into an Error, keeping
// its line when the library gave one.
func yamlError(err error) Error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil && n >= 0 {
			return Error{Line: n, Msg: "invalid YAML: " + m[2]}
		}
	}
	return Error{Line: 0, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

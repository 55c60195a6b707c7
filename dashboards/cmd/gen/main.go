// Command gen writes the Grafana dashboards of package dashboards as JSON.
//
//	go run ./dashboards/cmd/gen                 # from the repository root
//	go run ./dashboards/cmd/gen -out some/dir   # elsewhere
//
// With -trace-url (hopgate's telemetry.trace_url, a template with
// {trace_id}) the exemplar links open the operator's trace UI first; write
// such a board outside generated/ (-out), which holds the generic one.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/hopgate/hopgate/dashboards"
)

func main() {
	out := flag.String("out", filepath.Join("dashboards", "generated"), "directory to write the dashboard JSON files into")
	traceURL := flag.String("trace-url", "", "telemetry.trace_url of the gateways: exemplar links open it first (e.g. http://jaeger:16686/trace/{trace_id})")
	flag.Parse()
	if err := run(*out, dashboards.Options{TraceURL: *traceURL}); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string, o dashboards.Options) error {
	files, err := dashboards.FilesWith(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

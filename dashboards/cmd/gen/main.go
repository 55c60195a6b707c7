// Command gen writes the Grafana dashboards of package dashboards as JSON.
//
//	go run ./dashboards/cmd/gen                 # from the repository root
//	go run ./dashboards/cmd/gen -out some/dir   # elsewhere
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
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	files, err := dashboards.Files()
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

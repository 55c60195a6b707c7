// Command hopreplay replays scripted incidents through a real gateway and
// fake providers on virtual time, with breakers alone and with early
// warning (DESIGN.md §12), and writes the report the early-warning
// defaults are chosen from (docs/early-warning.md).
//
//	go run ./cmd/hopreplay                 # the full report, with the sweep
//	go run ./cmd/hopreplay -short -out -   # a quick run to stdout
//
// A full run replays a few hours of traffic in a minute or two of real
// time; the same -seed writes the same file.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hopgate/hopgate/internal/replay"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "hopreplay:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hopreplay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "docs/early-warning.md", "where to write the report (- for stdout)")
	short := fs.Bool("short", false, "a shortened replay: 2 minutes of warm-up, scenarios at half length, no sweep")
	sweep := fs.Bool("sweep", true, "vary the defaults one parameter at a time (the report's last table)")
	seed := fs.Uint64("seed", 21, "random seed of the scenarios' latencies and errors")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := replay.ReportOptions{Short: *short, Sweep: *sweep, Seed: *seed}
	if !*quiet {
		o.Progress = stderr
	}
	rep, err := replay.Generate(o)
	if err != nil {
		return err
	}
	md := rep.Markdown()
	if *out == "-" {
		_, err = stdout.Write(md)
		return err
	}
	if err := os.WriteFile(*out, md, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s: %d runs in %s\n", *out, rep.Runs, rep.Elapsed.Round(1e9))
	if *sweep && !*short && !rep.DefaultsPass {
		fmt.Fprintln(stderr, "note: the defaults do not clear the report's bar (see its last section)")
	}
	return nil
}

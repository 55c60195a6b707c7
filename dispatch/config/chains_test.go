package config

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// `hopgate check` output is read by humans and diffed in reviews: it must be
// stable byte for byte, and a change must be a deliberate golden update
// (go test ./dispatch/config -run WriteChains -update).
func TestWriteChainsGolden(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "chains.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := mustParse(t, string(data), env("OPENAI_API_KEY", "sk-secret-never-printed"))
	var buf bytes.Buffer
	if err := c.WriteChains(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "chains.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("WriteChains output differs from %s (run with -update if intended):\n%s", golden, buf.String())
	}
	if strings.Contains(buf.String(), "sk-secret") {
		t.Error("WriteChains printed a credential")
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("trailing spaces in %q", line)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// A failing writer (closed pipe in `hopgate check | head`) is reported, not
// swallowed.
func TestWriteChainsWriteError(t *testing.T) {
	c := mustParse(t, string(skeleton("", "", "")), env())
	if err := c.WriteChains(failWriter{}); err == nil {
		t.Error("want the writer's error")
	}
}

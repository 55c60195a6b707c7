package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the loader: config files are edited by
// hand and pasted from chats, so the parser must never panic, must always
// answer with either a Config or an ErrorList of located mistakes, and an
// accepted Config must satisfy the invariants the request path relies on.
// Seeds are the committed config testdata.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{
		filepath.Join(repoTestdata, "*.yaml"),
		filepath.Join("testdata", "*.yaml"),
	} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range files {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(skeleton("", "", "")))
	// The blocks the committed files do not use: overload and early warning.
	f.Add([]byte(skeleton(", early_warning: {enabled: true, window: 10s, baseline: 20s}", "",
		"overload: {budget_fraction: 0.25, max_streams: 3, max_response_bytes: {default: 2048, images: 4096}}\n"+
			"policy: {early_warning: {latency_multiple: 2.5, error_fraction: 0.3}}\n")))
	f.Add([]byte("a: &x [*x, *x]\nmodels: [*x]\n"))
	f.Add([]byte("---\n---\n"))

	getenv := env("OPENAI_API_KEY", "sk-fuzz")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, getenv)
		if err != nil {
			if c != nil {
				t.Fatal("a Config together with an error")
			}
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %v", err)
			}
			for _, e := range l {
				if e.Line < 0 || e.Msg == "" {
					t.Fatalf("bad error %+v", e)
				}
			}
			return
		}
		if len(c.Models) == 0 {
			t.Fatal("accepted a config without models")
		}
		for _, m := range c.Models {
			if len(m.Chain) == 0 || len(m.Chain) > ChainMax {
				t.Fatalf("model %q has a chain of %d", m.Name, len(m.Chain))
			}
			for i, e := range m.Chain {
				if e.Channel == nil || c.Channel(e.Channel.ID) != e.Channel {
					t.Fatalf("model %q entry %d has an unindexed channel", m.Name, i)
				}
				if i > 0 && m.Chain[i-1].Price.Total() > e.Price.Total() {
					t.Fatalf("model %q chain not sorted by price", m.Name)
				}
			}
			if c.Model(m.Name) != m {
				t.Fatalf("model %q not indexed", m.Name)
			}
		}
		if err := c.WriteChains(io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}

package main

import (
	"os"
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
	if rep.Requests == 0 || rep.PathsChecked == 0 || len(rep.FaultsInjected) == 0 {
		t.Fatalf("the soak exercised nothing: %+v", rep)
	}
}

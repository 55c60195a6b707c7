package main

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// cpuProfile builds a CPU profile of n samples of 10 ms: limit of them
// under api's limit (inlined under the handler when inlined is set), gc
// of them in the collector's mark worker, the rest in the handler.
func cpuProfile(n, limit, gc int, inlined bool) *profile.Profile {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	handler, lim, mark, work := fn(1, "github.com/hopgate/hopgate/dispatch/api.(*Server).ServeHTTP"),
		fn(2, limiterFuncs[0]), fn(3, "runtime.gcBgMarkWorker"), fn(4, "runtime.gcDrain")
	hLoc := &profile.Location{ID: 1, Line: []profile.Line{{Function: handler}}}
	lLoc := &profile.Location{ID: 2, Line: []profile.Line{{Function: lim}}}
	if inlined {
		lLoc.Line = []profile.Line{{Function: lim}, {Function: handler}}
	}
	gLoc := &profile.Location{ID: 3, Line: []profile.Line{{Function: work}}}
	mLoc := &profile.Location{ID: 4, Line: []profile.Line{{Function: mark}}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function:   []*profile.Function{handler, lim, mark, work},
		Location:   []*profile.Location{hLoc, lLoc, gLoc, mLoc},
	}
	add := func(k int, locs ...*profile.Location) {
		for range k {
			p.Sample = append(p.Sample, &profile.Sample{Location: locs, Value: []int64{1, 10e6}})
		}
	}
	if inlined {
		add(limit, lLoc)
	} else {
		add(limit, lLoc, hLoc)
	}
	add(gc, gLoc, mLoc)
	add(n-limit-gc, hLoc)
	return p
}

// allocProfile: total bytes allocated, limit of them under api's settle.
func allocProfile(total, limit int64) *profile.Profile {
	h := &profile.Function{ID: 1, Name: "github.com/hopgate/hopgate/dispatch.(*call).run"}
	s := &profile.Function{ID: 2, Name: limiterFuncs[1]}
	hl, sl := &profile.Location{ID: 1, Line: []profile.Line{{Function: h}}}, &profile.Location{ID: 2, Line: []profile.Line{{Function: s}}}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		Function: []*profile.Function{h, s}, Location: []*profile.Location{hl, sl},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{hl}, Value: []int64{1, total - limit, 0, 0}},
			{Location: []*profile.Location{sl, hl}, Value: []int64{1, limit, 0, 0}},
		},
	}
}

// The share is the limiter's own samples plus its part of the collector
// by the bytes it allocates; the verdict holds the sampling error
// against the bar. Profiles survive a round trip through their encoding,
// as they come from the gateway's pprof listener.
func TestAttributionShare(t *testing.T) {
	for _, tc := range []struct {
		why                    string
		n, limit, gc           int
		allocTotal, allocLimit int64
		inlined                bool
		wantOwn, wantGC        float64
		wantVerdict            string
	}{
		{"10 of 2000 samples, 100 in GC, 1 % of bytes: 0.5 % + 0.05 %", 2000, 10, 100, 100000, 1000, false, 0.005, 0.0005, "met"},
		{"an inlined frame counts too", 2000, 10, 100, 100000, 1000, true, 0.005, 0.0005, "met"},
		{"no limiter samples: 0 %, still an error of one sample", 1000, 0, 0, 100000, 0, false, 0, 0, "met"},
		{"100 of 2000 is 5 %: missed beyond the error", 2000, 100, 0, 100000, 0, false, 0.05, 0, "**missed**"},
		{"18 of 1000 is 1.8 %: within the error of the bar", 1000, 18, 0, 100000, 0, false, 0.018, 0, "**not shown** (the bar is within the sampling error)"},
		{"half the GC and half the bytes: 0.6 % + 25 %", 1000, 6, 500, 100, 50, false, 0.006, 0.25, "**missed**"},
	} {
		var a attribution
		for range 2 { // two turns, each profile parsed back from its encoding
			cp, ap := roundTrip(t, cpuProfile(tc.n/2, tc.limit/2, tc.gc/2, tc.inlined)), roundTrip(t, allocProfile(tc.allocTotal/2, tc.allocLimit/2))
			if err := a.addCPU(cp); err != nil {
				t.Fatal(err)
			}
			if err := a.addAllocs(ap); err != nil {
				t.Fatal(err)
			}
			a.turns++
		}
		own, gc, _ := a.share()
		if math.Abs(own-tc.wantOwn) > 1e-9 || math.Abs(gc-tc.wantGC) > 1e-9 {
			t.Errorf("%s: share own %.4f gc %.4f, want %.4f and %.4f", tc.why, own, gc, tc.wantOwn, tc.wantGC)
		}
		if _, _, v := limiterVerdict(&a); v != tc.wantVerdict {
			t.Errorf("%s: verdict %q, want %q", tc.why, v, tc.wantVerdict)
		}
	}
}

func roundTrip(t *testing.T, p *profile.Profile) *profile.Profile {
	t.Helper()
	var b strings.Builder
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A profile of the wrong kind is an error, not a share of zero.
func TestAttributionWrongProfile(t *testing.T) {
	var a attribution
	if err := a.addCPU(allocProfile(10, 1)); err == nil {
		t.Error("an allocation profile read as a CPU profile")
	}
	if err := a.addAllocs(cpuProfile(10, 1, 0, false)); err == nil {
		t.Error("a CPU profile read as an allocation profile")
	}
}

// The report's target row and paragraph say the share, its error and
// the verdict, and a failed attribution says why instead.
func TestRenderAttribution(t *testing.T) {
	a := &attribution{turns: 5}
	_ = a.addCPU(cpuProfile(2000, 10, 100, false))
	_ = a.addAllocs(allocProfile(100000, 1000))
	a.perReq, a.rps = []float64{102, 105}, []float64{980, 990}
	r := &results{attrib: map[string]*attribution{targetLimited: a, "hopgate": {turns: 5, samples: 100, cpuNS: 1e9,
		perReq: []float64{100, 100}, rps: []float64{1000, 1000}}}}
	var out strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
	r.renderLimiterTarget(p)
	r.renderAttribution(p)
	for _, want := range []string{"| in-process limiter < 2 % of throughput", "| 0.55 % ± 0.32 % | met |", "2000 CPU samples", "0.50 %; its part of the garbage collector, 0.05 %",
		"CPU per completion 1.04× (rounds 1.02× to 1.05×), throughput 0.98× (rounds 0.98× to 0.99×)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	r.attrib[targetLimited] = &attribution{err: "GET …: 404"}
	r.renderAttribution(p)
	if !strings.Contains(out.String(), "attribution turns failed: GET …: 404") {
		t.Errorf("a failed attribution is not reported:\n%s", out.String())
	}
}

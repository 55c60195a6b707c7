package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/google/pprof/profile"
)

// The limiter's share of the gateway's CPU, measured where it runs (issue
// 33's bar: the in-process limiter costs under 2 % of throughput).
//
// The throughput rounds cannot resolve 2 %: on these two shared cores a
// turn's CPU per request moves by ±30 % from one round to the next (a
// span export or a GC cycle lands in whichever turn it falls into, and
// the load generator shares the cores), so the limited and the unlimited
// gateway's ratio says +2.8 % in one run and −3.0 % in the next. What can
// resolve it is a CPU profile of the limited gateway under the same load:
// the share of its samples whose stack holds the limiter's admission or
// settle (api's limit and settleLimit, kept out of line for this), plus
// the limiter's share of the garbage collector's work (its share of the
// bytes allocated, from an allocation profile of the same turns, times
// the collector's share of the samples). The samples' count bounds the
// error: about 1 000 samples give ±0.2 % at a share near 0.5 %.
//
// The attribution turns run after the throughput rounds, alternating the
// limited gateway and *hopgate* (whose limit and settle run too, finding
// no limit), each under its own profile: the profiler's cost is in both
// and in none of the measured rounds.

// limiterFuncs are the frames whose samples are the limiter's: api's
// admission and settle, each with everything it calls.
var limiterFuncs = []string{
	"github.com/hopgate/hopgate/dispatch/api.(*Server).limit",
	"github.com/hopgate/hopgate/dispatch/api.(*Server).settleLimit",
}

// gcFuncs are the frames of the garbage collector's own work: the
// background mark workers, the assists that allocating goroutines pay,
// and the sweeper.
var gcFuncs = []string{
	"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep",
}

// attribution is what the profiles of one gateway's attribution turns say.
type attribution struct {
	turns   int
	samples int64 // CPU samples of all turns
	cpuNS   int64 // their CPU time
	limitNS int64 // of which in limiterFuncs
	gcNS    int64 // of which in gcFuncs
	// allocBytes is the bytes allocated during the turns (sampled), and
	// limitBytes what limiterFuncs allocated of them.
	allocBytes, limitBytes int64
	// perReq is each turn's CPU per successful request (µs, from the
	// process's schedstat, as in the throughput rounds), and rps its
	// successful requests per second.
	perReq, rps []float64
	err         string
}

// share is the fraction of the gateway's CPU that is the limiter's: its
// own samples, plus its part of the collector's by the bytes it
// allocates. se is the sampling error of the own-samples part (binomial
// over the sample count): a profile sample is a 10 ms tick of one thread.
func (a attribution) share() (own, gc, se float64) {
	if a.cpuNS <= 0 || a.samples <= 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	own = float64(a.limitNS) / float64(a.cpuNS)
	if a.allocBytes > 0 {
		gc = float64(a.gcNS) / float64(a.cpuNS) * float64(a.limitBytes) / float64(a.allocBytes)
	}
	p := max(own, 1/float64(a.samples)) // no samples still leaves an error of about one
	se = math.Sqrt(p * (1 - p) / float64(a.samples))
	return own, gc, se
}

// addCPU adds a CPU profile's samples.
func (a *attribution) addCPU(p *profile.Profile) error {
	i := sampleIndex(p, "cpu")
	j := sampleIndex(p, "samples")
	if i < 0 || j < 0 {
		return errors.New("not a CPU profile: no cpu and samples values")
	}
	for _, s := range p.Sample {
		ns := s.Value[i]
		a.samples += s.Value[j]
		a.cpuNS += ns
		if stackHas(s, limiterFuncs) {
			a.limitNS += ns
		}
		if stackHas(s, gcFuncs) {
			a.gcNS += ns
		}
	}
	return nil
}

// addAllocs adds an allocation profile's bytes (a delta of the turn).
func (a *attribution) addAllocs(p *profile.Profile) error {
	i := sampleIndex(p, "alloc_space")
	if i < 0 {
		return errors.New("not an allocation profile: no alloc_space values")
	}
	for _, s := range p.Sample {
		a.allocBytes += s.Value[i]
		if stackHas(s, limiterFuncs) {
			a.limitBytes += s.Value[i]
		}
	}
	return nil
}

func sampleIndex(p *profile.Profile, typ string) int {
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i
		}
	}
	return -1
}

// stackHas reports whether any frame of s (inlined ones included) is one
// of funcs.
func stackHas(s *profile.Sample, funcs []string) bool {
	for _, loc := range s.Location {
		for _, ln := range loc.Line {
			if ln.Function == nil {
				continue
			}
			for _, f := range funcs {
				if ln.Function.Name == f {
					return true
				}
			}
		}
	}
	return false
}

// attribute runs the attribution turns: o.rounds of each of ts (the
// limited gateway and *hopgate*), alternating in a shuffled order, each
// turn under a CPU profile and an allocation delta of the same seconds.
func (w *world) attribute(ts []target, wl workload, m attackMode) map[string]*attribution {
	// Turns twice the rounds' (3 s at the default 1.5 s): the profiles'
	// error shrinks with their samples.
	secs := max(1, int(math.Round(2*w.o.duration.Seconds())))
	out := map[string]*attribution{}
	for _, t := range ts {
		out[t.name] = &attribution{}
	}
	for range w.o.rounds {
		for _, t := range w.shuffled(ts) {
			a := out[t.name]
			time.Sleep(w.o.settle)
			type got struct {
				p   *profile.Profile
				err error
			}
			cpuc, allocc := make(chan got, 1), make(chan got, 1)
			base := "http://" + t.pprof + "/debug/pprof/"
			go func() { p, err := fetchProfile(base + "profile?seconds=" + strconv.Itoa(secs)); cpuc <- got{p, err} }()
			go func() { p, err := fetchProfile(base + "allocs?seconds=" + strconv.Itoa(secs)); allocc <- got{p, err} }()
			// The profiles start when their requests arrive: the load
			// runs a little longer than they do on both sides.
			time.Sleep(50 * time.Millisecond)
			cpu0, cpuErr := cpuNS(t.pid)
			s := attack(t, wl, m, time.Duration(secs)*time.Second+100*time.Millisecond)
			if cpu1, err := cpuNS(t.pid); err == nil && cpuErr == nil {
				s.cpu = time.Duration(cpu1 - cpu0)
			}
			a.perReq = append(a.perReq, cpuPerReq(s)) // NaN when unread: the rounds stay paired
			a.rps = append(a.rps, s.rps())
			w.count(t, wl, s)
			c, al := <-cpuc, <-allocc
			err := errors.Join(c.err, al.err)
			if err == nil {
				err = errors.Join(a.addCPU(c.p), a.addAllocs(al.p))
			}
			if err != nil {
				a.err = err.Error()
				w.logf("attribution, %s: %v", t.name, err)
				continue
			}
			a.turns++
			if w.o.profileDir != "" {
				w.saveProfile(c.p, t.name+"-attrib-cpu-"+strconv.Itoa(a.turns)+".pprof")
				w.saveProfile(al.p, t.name+"-attrib-allocs-"+strconv.Itoa(a.turns)+".pprof")
			}
		}
	}
	return out
}

// saveProfile keeps a profile the attribution read, with -profile.
func (w *world) saveProfile(p *profile.Profile, name string) {
	path := filepath.Join(w.o.profileDir, name)
	f, err := os.Create(path)
	if err == nil {
		err = errors.Join(p.Write(f), f.Close())
	}
	if err != nil {
		w.logf("saving %s: %v", path, err)
	}
}

// fetchProfile reads a profile from a pprof listener.
func fetchProfile(url string) (*profile.Profile, error) {
	resp, err := control.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return profile.Parse(resp.Body)
}

// variant is the variant gateway named name, if it runs.
func (w *world) variant(name string) (target, bool) {
	for _, t := range w.variants {
		if t.name == name && t.pprof != "" && t.pid > 0 {
			return t, true
		}
	}
	return target{}, false
}

// limiterVerdict is the attribution's verdict on the 2 % bar: met when
// the share and twice its sampling error stay under it, missed when the
// share less twice the error is at or over it, and undecided in between.
func limiterVerdict(a *attribution) (total, se float64, v string) {
	own, gc, se := a.share()
	total = own + gc
	switch {
	case a.turns == 0 || math.IsNaN(total):
		return total, se, "not measured"
	case total+2*se < targetLimiterShare:
		return total, se, "met"
	case total-2*se >= targetLimiterShare:
		return total, se, "**missed**"
	default:
		return total, se, "**not shown** (the bar is within the sampling error)"
	}
}

// targetLimiterShare is issue 33's bar: the in-process limiter costs
// under 2 % of throughput.
const targetLimiterShare = 0.02

// renderLimiterTarget is the limiter's row of the targets (issue 33).
func (r *results) renderLimiterTarget(p printer) {
	a := r.attrib[targetLimited]
	if a == nil {
		return
	}
	total, se, v := limiterVerdict(a)
	p("Tenant rate limits (issue 33):")
	p("")
	p("| target | measured | verdict |")
	p("| --- | --- | --- |")
	p("| in-process limiter < 2 %% of throughput: its share of the limited gateway's CPU (completion-1KB, profiles of its turns) | %s | %s |", fmtShare(total, se), v)
	if lat := r.latency[wlComplete.name]; lat != nil && len(lat.by[targetLimitedRedis]) > 0 {
		p("| Redis limiter: added p50 at %d req/s (reported, no bar) | %s%s | – |", r.opts.rate,
			fmtSignedUS(added(lat, targetLimitedRedis, "hopgate", p50us)), addedRounds(lat, targetLimitedRedis, "hopgate", p50us))
	}
	p("")
}

func fmtShare(v, se float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f %% ± %.2f %%", 100*v, 200*se)
}

// renderAttribution is the attribution turns' paragraph of the limits
// section.
func (r *results) renderAttribution(p printer) {
	a := r.attrib[targetLimited]
	if a == nil {
		return
	}
	if a.turns == 0 {
		p("The limiter's attribution turns failed: %s.", a.err)
		p("")
		return
	}
	own, gc, se := a.share()
	total, _, v := limiterVerdict(a)
	p("**The limiter's share of the gateway's CPU** (the verdict): %d turns of *%s* on %s of their own, each under a CPU profile and an allocation profile of the same seconds (%d CPU samples of %s).",
		a.turns, targetLimited, wlComplete.name, a.samples, time.Duration(a.cpuNS).Round(10*time.Millisecond))
	p("Samples in its admission and settle (api's `limit` and `settleLimit`, with all they call): %.2f %%; its part of the garbage collector, %.2f %% (the collector's %.1f %% of the samples times the limiter's %.2f %% of the bytes allocated): **%s** of the CPU, which bounds what it costs the throughput (±: twice the samples' binomial error). The bar is under 2 %%: %s.",
		100*own, 100*gc, 100*float64(a.gcNS)/float64(a.cpuNS), 100*float64(a.limitBytes)/float64(max(a.allocBytes, 1)), fmtShare(total, se), v)
	if h := r.attrib["hopgate"]; h != nil && h.turns > 0 {
		hown, hgc, _ := h.share()
		p("*hopgate* in alternate turns under the same profiles (its limit and settle run and find no limit for the tenant): %.2f %%. In these turns, limited / hopgate (paired by round): CPU per completion %s%s, throughput %s%s.",
			100*(hown+hgc), fmtRatio(pairedMedian(a.perReq, h.perReq)), pairedRange(a.perReq, h.perReq),
			fmtRatio(pairedMedian(a.rps, h.rps)), pairedRange(a.rps, h.rps))
	}
	p("")
}

// pairedMedian is the median of a[i]/b[i].
func pairedMedian(a, b []float64) float64 { return median(pairedRatios(a, b)) }

// pairedRange is the range of a[i]/b[i], as roundsOf writes it.
func pairedRange(a, b []float64) string {
	xs := pairedRatios(a, b)
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf(" (rounds %s to %s)", fmtRatio(slices.Min(xs)), fmtRatio(slices.Max(xs)))
}

func pairedRatios(a, b []float64) []float64 {
	var xs []float64
	for i := range min(len(a), len(b)) {
		if x := a[i] / b[i]; !math.IsNaN(x) && !math.IsInf(x, 0) {
			xs = append(xs, x)
		}
	}
	return xs
}

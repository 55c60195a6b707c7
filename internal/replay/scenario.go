package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// The chain every scenario runs on: the cheap channel serves normally, the
// dear one is the fallback. Only the cheap channel misbehaves.
const (
	Cheap = "cheap"
	Dear  = "dear"
)

// Healthy latencies of the two providers: headers, then the first token
// that much later (each hop varies ±15 % around them).
var healthy = map[string][2]time.Duration{
	Cheap: {300 * time.Millisecond, 200 * time.Millisecond},
	Dear:  {400 * time.Millisecond, 250 * time.Millisecond},
}

// Scenario is one scripted incident on the cheap channel.
type Scenario struct {
	Name  string // the report's row name
	Title string // one line
	// Story says what the provider does, for the report.
	Story string
	// Length is the scripted part, after the warm-up; recovery is included.
	Length time.Duration
	// cheap returns the cheap channel's behaviour for a hop arriving at
	// at since the incident began (negative: warm-up), as a fault suffix.
	cheap func(s *script, at time.Duration) string
}

// script is one run's state of a scenario: its random numbers (drawn in
// the order hops reach the providers, which virtual time makes the same
// on every run) and what the provider remembers.
type script struct {
	sc  Scenario
	rng *rand.Rand
	// quota window of the rate-limit scenario
	window     int64
	windowUsed int
	// the window-fill scenario (window.go): the window the cheap
	// provider states on this hop's answer, and the windows it refused in
	stated windowState
	full   map[int64]bool
}

func newScript(sc Scenario, seed uint64) *script {
	return &script{sc: sc, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// fault is channel's behaviour for a hop arriving at at.
func (s *script) fault(channel string, at time.Duration) string {
	if channel == Cheap && at >= 0 {
		return s.sc.cheap(s, at)
	}
	return s.normal(channel, 1)
}

// normal is a healthy hop of channel, latencies times slow.
func (s *script) normal(channel string, slow float64) string {
	h := healthy[channel]
	j := 0.85 + 0.3*s.rng.Float64()
	return latency(time.Duration(float64(h[0])*slow*j), time.Duration(float64(h[1])*slow*j))
}

// latency is the fault suffix of a hop whose headers come after header and
// whose first token follows first later.
func latency(header, first time.Duration) string {
	return fmt.Sprintf("header-delay=%s|slow-first-token=%s", max(header, time.Millisecond).Round(time.Millisecond),
		max(first, time.Millisecond).Round(time.Millisecond))
}

// Scenarios are the incident shapes of the report, in its order.
var Scenarios = []Scenario{
	{
		Name:  "ramp-then-failure",
		Title: "latency ramp, then the provider hangs",
		Story: "Header latency climbs linearly from 0.3 s to 9 s over 4 minutes (past the 8 s header timeout " +
			"near the end), then the provider accepts requests and never answers for 5 minutes, then recovers.",
		Length: 12 * time.Minute,
		cheap: func(s *script, at time.Duration) string {
			switch {
			case at < 4*time.Minute:
				return s.normal(Cheap, 1+29*at.Seconds()/240)
			case at < 9*time.Minute:
				return "no-headers"
			}
			return s.normal(Cheap, 1)
		},
	},
	{
		Name:   "sudden-outage",
		Title:  "the provider hangs at once",
		Story:  "From one request to the next the provider stops answering (connections accepted, no headers) for 5 minutes, then recovers.",
		Length: 8 * time.Minute,
		cheap: func(s *script, at time.Duration) string {
			if at < 5*time.Minute {
				return "no-headers"
			}
			return s.normal(Cheap, 1)
		},
	},
	{
		Name:   "latency-blip",
		Title:  "a 30 s latency blip that recovers by itself",
		Story:  "Latency is 8 times its usual level for 30 seconds, then back to normal: nothing fails.",
		Length: 6 * time.Minute,
		cheap: func(s *script, at time.Duration) string {
			if at < 30*time.Second {
				return s.normal(Cheap, 8)
			}
			return s.normal(Cheap, 1)
		},
	},
	{
		Name:  "noisy-healthy",
		Title: "a noisy but healthy provider",
		Story: "Latency is log-normal around its usual median with a heavy tail (p99 about 6 times the median), " +
			"and 2 % of requests fail with a 503, for 15 minutes: an ordinary day on a busy provider.",
		Length: 15 * time.Minute,
		cheap: func(s *script, at time.Duration) string {
			if s.rng.Float64() < 0.02 {
				return "503"
			}
			return s.normal(Cheap, math.Exp(0.8*s.rng.NormFloat64()))
		},
	},
	windowFill,
	{
		Name:  "rate-limit",
		Title: "a rate-limit window filling up",
		Story: "The provider allows 100 requests per minute (fixed windows); traffic is 120 per minute. Past 70 % of " +
			"the quota it queues (latency up to 8 times its usual level at 100 %), past 100 % it answers 429 with " +
			"Retry-After until the window resets. 10 minutes.",
		Length: 10 * time.Minute,
		cheap: func(s *script, at time.Duration) string {
			w := int64(at / time.Minute)
			if w != s.window {
				s.window, s.windowUsed = w, 0
			}
			if at >= 10*time.Minute {
				return s.normal(Cheap, 1)
			}
			s.windowUsed++
			const quota = 100
			if s.windowUsed > quota {
				left := time.Duration(w+1)*time.Minute - at
				return fmt.Sprintf("429:ra=%d", max(int(math.Ceil(left.Seconds())), 1))
			}
			used := float64(s.windowUsed) / quota
			return s.normal(Cheap, 1+max(used-0.7, 0)/0.3*7)
		},
	},
}

// ScenarioNamed returns the scenario called name.
func ScenarioNamed(name string) (Scenario, bool) {
	for _, sc := range Scenarios {
		if strings.EqualFold(sc.Name, name) {
			return sc, true
		}
	}
	return Scenario{}, false
}

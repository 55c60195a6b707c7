package main

import (
	"math"
	"slices"
	"time"
)

// quantile is the nearest-rank quantile of sorted durations (0 when empty).
func quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median of xs (NaN when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is max-min of xs: how much rounds disagreed.
func spread(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	return slices.Max(xs) - slices.Min(xs)
}

// each maps every sample through f.
func each(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// paired applies f to the samples of a and b taken in the same round.
// Rounds alternate targets, so a pair saw the same machine noise.
func paired(a, b []sample, f func(a, b sample) float64) []float64 {
	n := min(len(a), len(b))
	out := make([]float64, n)
	for i := range n {
		out[i] = f(a[i], b[i])
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// p50us and p99us are NaN for a sample without a successful request, so a
// target that only failed shows "–", not a flattering 0.
func p50us(s sample) float64 { return qus(s, 0.50) }
func p99us(s sample) float64 { return qus(s, 0.99) }

func qus(s sample, p float64) float64 {
	if len(s.lat) == 0 {
		return math.NaN()
	}
	return us(s.q(p))
}

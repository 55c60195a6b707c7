package earlywarning

import (
	"math"
	"time"
)

// sketch counts latencies in log-scale bins: bin 0 holds [0, 1ms), bin i
// holds [1ms·r^(i-1), 1ms·r^i) with r = 1.25, the last bin everything from
// about 20 minutes up. A quantile read from it is within 25 % of the true
// one, which is plenty for "3× the baseline", and it costs a fixed 256
// bytes whatever the request rate.
type sketch [bins]uint32

const (
	bins      = 64
	binRatio  = 1.25
	binOrigin = time.Millisecond
)

var logRatio = math.Log(binRatio)

// binOf is the bin of d.
func binOf(d time.Duration) int {
	if d < binOrigin {
		return 0
	}
	i := int(math.Log(float64(d)/float64(binOrigin))/logRatio) + 1
	return min(i, bins-1)
}

// binValue is the representative latency of bin i: the geometric middle of
// its edges (half the origin for bin 0).
func binValue(i int) time.Duration {
	if i == 0 {
		return binOrigin / 2
	}
	lo := float64(binOrigin) * math.Pow(binRatio, float64(i-1))
	return time.Duration(lo * math.Sqrt(binRatio))
}

func (s *sketch) add(d time.Duration) { s[binOf(d)]++ }

func (s *sketch) merge(o *sketch) {
	for i := range s {
		s[i] += o[i]
	}
}

func (s *sketch) count() int {
	n := 0
	for _, c := range s {
		n += int(c)
	}
	return n
}

// median is the representative value of the bin holding the middle
// sample; 0 for an empty sketch.
func (s *sketch) median() time.Duration {
	n := s.count()
	if n == 0 {
		return 0
	}
	want := (n + 1) / 2
	seen := 0
	for i, c := range s {
		seen += int(c)
		if seen >= want {
			return binValue(i)
		}
	}
	return binValue(bins - 1)
}

// above counts the samples certainly above d: those in bins past d's own
// (a sample in d's bin may be on either side and does not count).
func (s *sketch) above(d time.Duration) int {
	n := 0
	for i := binOf(d) + 1; i < bins; i++ {
		n += int(s[i])
	}
	return n
}

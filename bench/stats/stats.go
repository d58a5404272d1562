// Package stats summarizes measurements: latency percentiles within one
// repetition, and medians with their spread across repetitions.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted values by
// the nearest-rank method: the smallest value with at least p% of the
// values at or below it. It returns 0 for no values.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Latency summarizes the latencies of one repetition, in microseconds.
type Latency struct {
	Min, Mean, P50, P99, Max float64
}

// Summarize sorts d in place and summarizes it.
func Summarize(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	us := make([]float64, len(d))
	var sum float64
	for i, v := range d {
		us[i] = float64(v) / float64(time.Microsecond)
		sum += us[i]
	}
	return Latency{
		Min:  us[0],
		Mean: sum / float64(len(us)),
		P50:  Percentile(us, 50),
		P99:  Percentile(us, 99),
		Max:  us[len(us)-1],
	}
}

// Spread is a value measured in several repetitions: their median, and
// the smallest and largest.
type Spread struct {
	Median, Min, Max float64
}

// Of returns the spread of xs (which it does not modify); the median of an
// even count is the mean of the middle two.
func Of(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[n-1]}
}

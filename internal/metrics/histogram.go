package metrics

import (
	"sync/atomic"
	"time"
)

// Bounds are the histograms' bucket upper bounds (Prometheus "le"), from
// 10 µs to 10 s; a last bucket holds what is above.
var Bounds = [...]time.Duration{
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// NumBuckets is the number of buckets: one per bound and one above.
const NumBuckets = len(Bounds) + 1

// Histogram counts durations in the buckets of Bounds, and their sum.
type Histogram struct {
	counts [NumBuckets]atomic.Uint64
	sum    atomic.Int64 // nanoseconds
}

// Observe counts a duration of d nanoseconds.
func (h *Histogram) Observe(d int64) {
	if d < 0 {
		d = 0
	}
	lo, hi := 0, len(Bounds) // first bound >= d, by bisection
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if int64(Bounds[mid]) < d {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	h.counts[lo].Add(1)
	h.sum.Add(d)
}

// Load returns the histogram's counts (not cumulative) and sum.
func (h *Histogram) Load() (counts [NumBuckets]uint64, sum time.Duration) {
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
	}
	return counts, time.Duration(h.sum.Load())
}

// Quantile estimates the q quantile (0 < q < 1) of counts, interpolating
// linearly inside the bucket it falls in, as Prometheus's
// histogram_quantile does; it is 0 without observations, and the last
// bound for what falls above it.
func Quantile(q float64, counts [NumBuckets]uint64) time.Duration {
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen uint64
	for i, c := range counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		if i == len(Bounds) {
			return Bounds[len(Bounds)-1]
		}
		var lo time.Duration
		if i > 0 {
			lo = Bounds[i-1]
		}
		frac := (rank - float64(seen)) / float64(c)
		return lo + time.Duration(frac*float64(Bounds[i]-lo))
	}
	return Bounds[len(Bounds)-1]
}

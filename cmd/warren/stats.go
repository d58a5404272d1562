package main

import (
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets: exact below 16 ns, then
// 16 buckets per power of two (about 6% wide). Recording never allocates.
type histogram struct {
	counts [16 + 60*16]uint64
	n      uint64
}

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 16 {
		return int(v)
	}
	e := bits.Len64(v) - 1 // 4 and up
	sub := int(v>>(e-4)) - 16
	return 16 + (e-4)*16 + sub
}

// bucketValue returns the middle of bucket i.
func bucketValue(i int) time.Duration {
	if i < 16 {
		return time.Duration(i)
	}
	e := (i-16)/16 + 4
	sub := (i - 16) % 16
	lo := uint64(16+sub) << (e - 4)
	width := uint64(1) << (e - 4)
	return time.Duration(lo + width/2)
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (nearest rank), 0 if h is empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(len(h.counts) - 1)
}

package console

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.005, 0.01}
	for _, c := range []struct {
		counts []uint64
		q      float64
		want   float64 // ms; NaN: nil
	}{
		{[]uint64{0, 0, 0, 0, 0}, 0.5, math.NaN()},
		{[]uint64{100, 0, 0, 0, 0}, 0.5, 0.5},    // halfway through (0, 1 ms]
		{[]uint64{50, 50, 0, 0, 0}, 0.5, 1},      // the 50th call is the last of the first bucket
		{[]uint64{0, 0, 100, 0, 0}, 0.99, 4.97},  // 2 + 3*0.99
		{[]uint64{99, 0, 0, 0, 1}, 0.99, 1},      // the 99th call of 100: the top of the first bucket
		{[]uint64{90, 0, 0, 0, 10}, 0.99, 10},    // beyond the last bound: the last bound
		{[]uint64{0, 10, 0, 0, 0}, 0.001, 1.001}, // a low rank inside the first non-empty bucket
	} {
		got := quantile(bounds, c.counts, c.q)
		if math.IsNaN(c.want) {
			if got != nil {
				t.Errorf("quantile(%v, %v) = %v, want nil", c.counts, c.q, *got)
			}
			continue
		}
		if got == nil || math.Abs(*got-c.want) > 1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.counts, c.q, got, c.want)
		}
	}
	if quantile(bounds, []uint64{1, 2}, 0.5) != nil {
		t.Error("mismatched counts: want nil")
	}
}

// TestSampler: reads of the source are at most one per minGap however many
// pages poll, rates are over about a window, and per-method figures come
// from the difference of the histograms.
func TestSampler(t *testing.T) {
	reads := 0
	var calls uint64
	buckets := []uint64{0, 0, 0}
	s := newSampler(func() Counts {
		reads++
		return Counts{CallsTotal: calls, ByUID: map[int]int{1000: 2, 0: 1}, ByTransport: map[string]int{"unix": 3},
			Methods: []MethodCounts{{Name: "A.B", Calls: calls, Bounds: []float64{0.001, 0.01}, Buckets: append([]uint64(nil), buckets...)}}}
	})
	t0 := time.Unix(1000, 0)
	s.read(t0)
	s.read(t0.Add(minGap / 2))
	if reads != 1 {
		t.Fatalf("%d reads within minGap", reads)
	}
	calls, buckets = 100, []uint64{100, 0, 0} // 100 fast calls
	s.read(t0.Add(500 * time.Millisecond))
	calls, buckets = 300, []uint64{100, 200, 0} // then 200 slower ones
	cur, prev := s.read(t0.Add(1500 * time.Millisecond))
	f := figuresOf(cur, prev)
	if f.Window != 1 || f.CallsPerSec != 200 {
		t.Errorf("window %v s, %v calls/s: want the last second, 200", f.Window, f.CallsPerSec)
	}
	if len(f.Methods) != 1 || f.Methods[0].PerSec != 200 || f.Methods[0].P50MS == nil || math.Abs(*f.Methods[0].P50MS-5.5) > 1e-9 {
		t.Errorf("methods: %+v", f.Methods)
	}
	if len(f.ByUID) != 2 || f.ByUID[0].Key != "1000" || f.ByUID[0].Conns != 2 {
		t.Errorf("by uid, the most first: %+v", f.ByUID)
	}
	if len(s.ring) > 3 {
		t.Errorf("%d samples kept", len(s.ring))
	}
}

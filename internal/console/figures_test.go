package console

import (
	"math"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/status"
)

// TestSampler: reads of the source are at most one per minGap however many
// pages poll; rates are over about a window, and percentiles come from the
// difference of the histograms, so that they follow the last second and
// not the whole run.
func TestSampler(t *testing.T) {
	reads := 0
	var ok, failed uint64
	var buckets [metrics.NumBuckets]uint64
	s := newSampler(func() metrics.Snapshot {
		reads++
		m := metrics.MethodStats{Method: "A.B", Calls: ok + failed, Buckets: buckets}
		m.Codes[status.OK], m.Codes[status.NotFound] = ok, failed
		return metrics.Snapshot{
			Methods:      []metrics.MethodStats{m, {Method: "Never.Called"}},
			Conns:        []metrics.ConnCount{{Transport: "unix", Engine: "goroutine", N: 3}, {Transport: "tcp", Engine: "eventloop", N: 1}},
			ConnsByUID:   []metrics.UIDCount{{UID: 1000, N: 2}, {UID: 0, N: 1}},
			ConnsRefused: []metrics.ReasonCount{{Reason: "policy", N: 2}, {Reason: "max_conns", N: 0}},
		}
	})
	t0 := time.Unix(1000, 0)
	s.read(t0)
	s.read(t0.Add(minGap / 2))
	if reads != 1 {
		t.Fatalf("%d reads within minGap", reads)
	}
	ok, buckets[0] = 100, 100 // 100 calls under 10 µs
	s.read(t0.Add(500 * time.Millisecond))
	ok, failed, buckets[9] = 250, 50, 200 // then 200 of 5-10 ms, 50 of them failed
	cur, prev := s.read(t0.Add(1500 * time.Millisecond))
	f := figuresOf(cur, prev)
	if f.Window != 1 || f.CallsPerSec != 200 || f.ErrorsPerSec != 50 || f.Calls != 300 {
		t.Errorf("window %v s, %v calls/s, %v errors/s, %d calls: want 1, 200, 50, 300", f.Window, f.CallsPerSec, f.ErrorsPerSec, f.Calls)
	}
	if len(f.Methods) != 1 || f.Methods[0].PerSec != 200 || f.Methods[0].P50MS == nil || math.Abs(*f.Methods[0].P50MS-7.5) > 0.01 {
		t.Errorf("methods (only those called; p50 over the window 7.5 ms): %+v", f.Methods)
	}
	if f.Conns != 4 || len(f.ByTransport) != 2 || f.ByTransport[1].Key != "tcp (event loop)" {
		t.Errorf("connections %d by transport %+v", f.Conns, f.ByTransport)
	}
	if len(f.ByUID) != 2 || f.ByUID[0].Key != "1000" || f.ByUID[0].N != 2 {
		t.Errorf("by uid, the most first: %+v", f.ByUID)
	}
	if len(f.ConnsRefused) != 1 || f.ConnsRefused[0] != (Row{"policy", 2}) {
		t.Errorf("refused connections, non-zero reasons: %+v", f.ConnsRefused)
	}
	if len(s.ring) > 3 {
		t.Errorf("%d samples kept", len(s.ring))
	}
	// Nothing called in the last window: no percentiles, no rate.
	cur, prev = s.read(t0.Add(3 * time.Second))
	if f := figuresOf(cur, prev); f.CallsPerSec != 0 || f.Methods[0].P50MS != nil {
		t.Errorf("an idle second: %v calls/s, p50 %v", f.CallsPerSec, f.Methods[0].P50MS)
	}
}

package metrics_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/status"
)

func TestSnapshot(t *testing.T) {
	r := metrics.New()
	m := r.Method("Svc.B")
	if r.Method("Svc.B") != m {
		t.Fatal("Method made a second series for one name")
	}
	a := r.Method("Svc.A")
	for range 10 {
		m.End(m.Start(), nil, 3, 5)
	}
	m.End(m.Start(), status.New(status.NotFound, "x"), 1, 0)
	m.End(m.Start(), errors.New("plain"), 0, 0)
	m.Refused(status.Code(99)) // out of range: Unknown
	st := a.Start()
	r.ConnRefused(metrics.ConnReasonOf("too many connections from uid 7 (limit 1)"))
	r.CallRefused(metrics.CallRate)
	r.Shed(metrics.ShedIdle)
	r.SetCollect(func(s *metrics.Snapshot) {
		s.ConnsByUID = append(s.ConnsByUID, metrics.UIDCount{UID: 5, N: 1}, metrics.UIDCount{UID: 6, N: 3})
	})
	s := r.Snapshot()
	if len(s.Methods) != 2 || s.Methods[0].Method != "Svc.A" || s.Methods[1].Method != "Svc.B" {
		t.Fatalf("methods %+v", s.Methods)
	}
	b := s.Methods[1]
	if b.Calls != 13 || b.Codes[status.OK] != 10 || b.Codes[status.NotFound] != 1 || b.Codes[status.Unknown] != 2 || b.Errors() != 3 {
		t.Fatalf("codes %+v", b)
	}
	if b.BytesIn != 31 || b.BytesOut != 50 || s.BytesIn != 31 || s.InFlight != 1 || s.Methods[0].InFlight != 1 {
		t.Fatalf("bytes or in flight: %+v", s)
	}
	var n uint64
	for _, c := range b.Buckets {
		n += c
	}
	if n != 12 || b.P99 <= 0 || b.P50 > b.P99 {
		t.Fatalf("histogram %d observations, p50 %v p99 %v", n, b.P50, b.P99)
	}
	if s.ConnsRefused[metrics.ConnMaxConnsPerUID].N != 1 || s.CallsRefused[metrics.CallRate].N != 1 || s.Shed[metrics.ShedIdle].N != 1 {
		t.Fatalf("reasons %+v %+v %+v", s.ConnsRefused, s.CallsRefused, s.Shed)
	}
	if s.ConnsByUID[0].UID != 6 {
		t.Fatalf("uids not by count: %+v", s.ConnsByUID)
	}
	a.End(st, nil, 0, 0)
	var nilReg *metrics.Registry
	if nilReg.Method("x") != nil || len(nilReg.Snapshot().Methods) != 0 {
		t.Fatal("nil registry counts")
	}
}

func TestQuantile(t *testing.T) {
	var c [metrics.NumBuckets]uint64
	if metrics.Quantile(0.5, c) != 0 {
		t.Fatal("quantile of nothing")
	}
	var h metrics.Histogram
	for range 100 {
		h.Observe(int64(30 * time.Microsecond)) // (25 µs, 50 µs]
	}
	c, sum := h.Load()
	if sum != 100*30*time.Microsecond || c[2] != 100 {
		t.Fatalf("buckets %v sum %v", c, sum)
	}
	if q := metrics.Quantile(0.5, c); q < 25*time.Microsecond || q > 50*time.Microsecond {
		t.Fatalf("p50 %v", q)
	}
	h.Observe(int64(time.Hour))
	h.Observe(-5)
	c, _ = h.Load()
	if c[metrics.NumBuckets-1] != 1 || c[0] != 1 {
		t.Fatalf("edges %v", c)
	}
	if q := metrics.Quantile(1, c); q != metrics.Bounds[len(metrics.Bounds)-1] {
		t.Fatalf("p100 %v", q)
	}
}

// TestSnapshotWhileRegistering: scrapes and registrations at once (run
// with -race).
func TestSnapshotWhileRegistering(t *testing.T) {
	r := metrics.New()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			r.Method(fmt.Sprintf("Svc.M%03d", 199-i))
		}
	}()
	for range 50 {
		s := r.Snapshot()
		for i := 1; i < len(s.Methods); i++ {
			if s.Methods[i-1].Method >= s.Methods[i].Method {
				t.Fatalf("not sorted: %s, %s", s.Methods[i-1].Method, s.Methods[i].Method)
			}
		}
	}
	<-done
	if n := len(r.Snapshot().Methods); n != 200 {
		t.Fatalf("%d methods", n)
	}
}

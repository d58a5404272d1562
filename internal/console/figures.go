package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warrenipc/warren/internal/metrics"
)

// sampler reads the server's metrics at most every minGap and keeps the
// samples of the last window, so that any number of pages polling it
// compute their rates over about one second from the same few reads.
type sampler struct {
	source func() metrics.Snapshot
	mu     sync.Mutex
	ring   []metrics.Snapshot // oldest first
}

const (
	minGap = 250 * time.Millisecond
	window = time.Second
)

func newSampler(source func() metrics.Snapshot) *sampler { return &sampler{source: source} }

// read returns the newest sample and the one about window before it (the
// oldest kept, early on).
func (s *sampler) read(now time.Time) (cur, prev *metrics.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.ring); n == 0 || now.Sub(s.ring[n-1].Time) >= minGap {
		x := s.source()
		x.Time = now
		s.ring = append(s.ring, x)
	}
	// Keep one sample older than the window, for the next reads.
	for len(s.ring) > 2 && now.Sub(s.ring[1].Time) >= window {
		s.ring = s.ring[1:]
	}
	cur, prev = &s.ring[len(s.ring)-1], &s.ring[0]
	for i := range s.ring {
		if cur.Time.Sub(s.ring[i].Time) >= window {
			prev = &s.ring[i]
		}
	}
	return cur, prev
}

// Figures is the JSON the page polls: totals since the start, and rates
// and percentiles over the last Window seconds.
type Figures struct {
	Window       float64        `json:"window_s"`
	Calls        uint64         `json:"calls"` // calls ended
	CallsPerSec  float64        `json:"calls_per_sec"`
	ErrorsPerSec float64        `json:"errors_per_sec"`
	InFlight     int64          `json:"in_flight"`
	Conns        int64          `json:"conns"`
	ByTransport  []Row          `json:"by_transport"` // "unix", "tcp (event loop)", ...
	ByUID        []Row          `json:"by_uid"`
	ConnsRefused []Row          `json:"conns_refused"` // by reason, non-zero
	CallsRefused []Row          `json:"calls_refused"`
	Shed         []Row          `json:"shed"`
	Methods      []MethodFigure `json:"methods"` // those called, the busiest first
}

// Row is one line of a breakdown.
type Row struct {
	Key string `json:"key"`
	N   uint64 `json:"n"`
}

// MethodFigure is one method's line.
type MethodFigure struct {
	Name         string   `json:"name"`
	Calls        uint64   `json:"calls"`
	Errors       uint64   `json:"errors"`
	InFlight     int64    `json:"in_flight"`
	PerSec       float64  `json:"per_sec"`
	ErrorsPerSec float64  `json:"errors_per_sec"`
	P50MS        *float64 `json:"p50_ms"` // null without calls ended in the window
	P99MS        *float64 `json:"p99_ms"`
}

func (h *Handler) serveFigures(w http.ResponseWriter, r *http.Request) {
	cur, prev := h.figures.read(time.Now())
	body, err := json.Marshal(figuresOf(cur, prev))
	if err != nil {
		panic(err) // plain values
	}
	securityHeaders(w.Header(), "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}

// figuresOf computes the figures between two samples.
func figuresOf(cur, prev *metrics.Snapshot) *Figures {
	span := cur.Time.Sub(prev.Time).Seconds()
	rate := func(now, before uint64) float64 {
		if span <= 0 || now < before {
			return 0
		}
		return float64(now-before) / span
	}
	f := &Figures{Window: span, InFlight: cur.InFlight, ByTransport: []Row{}, ByUID: []Row{}, Methods: []MethodFigure{}}
	for _, c := range cur.Conns {
		key := c.Transport
		if c.Engine == "eventloop" {
			key += " (event loop)"
		}
		f.ByTransport = append(f.ByTransport, Row{key, uint64(c.N)})
		f.Conns += c.N
	}
	for _, u := range cur.ConnsByUID {
		f.ByUID = append(f.ByUID, Row{strconv.FormatUint(uint64(u.UID), 10), uint64(u.N)})
	}
	f.ConnsRefused, f.CallsRefused, f.Shed = nonZero(cur.ConnsRefused), nonZero(cur.CallsRefused), nonZero(cur.Shed)
	before := map[string]*metrics.MethodStats{}
	for i := range prev.Methods {
		before[prev.Methods[i].Method] = &prev.Methods[i]
	}
	var calls, errs, callsBefore, errsBefore uint64
	for i := range cur.Methods {
		m := &cur.Methods[i]
		calls += m.Calls
		errs += m.Errors()
		b := before[m.Method]
		if b == nil {
			b = &metrics.MethodStats{}
		}
		callsBefore += b.Calls
		errsBefore += b.Errors()
		if m.Calls == 0 && m.InFlight == 0 {
			continue
		}
		mf := MethodFigure{Name: m.Method, Calls: m.Calls, Errors: m.Errors(), InFlight: m.InFlight,
			PerSec: rate(m.Calls, b.Calls), ErrorsPerSec: rate(m.Errors(), b.Errors())}
		var delta [metrics.NumBuckets]uint64
		observed := false
		for i := range delta {
			delta[i] = m.Buckets[i] - min(m.Buckets[i], b.Buckets[i])
			observed = observed || delta[i] > 0
		}
		if observed {
			p50, p99 := ms(metrics.Quantile(0.5, delta)), ms(metrics.Quantile(0.99, delta))
			mf.P50MS, mf.P99MS = &p50, &p99
		}
		f.Methods = append(f.Methods, mf)
	}
	f.Calls, f.CallsPerSec, f.ErrorsPerSec = calls, rate(calls, callsBefore), rate(errs, errsBefore)
	slices.SortStableFunc(f.Methods, func(a, b MethodFigure) int {
		switch {
		case a.PerSec > b.PerSec:
			return -1
		case a.PerSec < b.PerSec:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return f
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// nonZero returns the reasons counted at least once.
func nonZero(rs []metrics.ReasonCount) []Row {
	out := []Row{}
	for _, r := range rs {
		if r.N > 0 {
			out = append(out, Row{r.Reason, r.N})
		}
	}
	return out
}

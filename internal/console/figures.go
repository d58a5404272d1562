package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Counts are a server's cumulative counters and current gauges, as the
// figures' source reads them at one moment.
type Counts struct {
	Conns         int            // open connections
	Calls         int            // calls in progress
	CallsTotal    uint64         // calls accepted
	Refused       uint64         // calls refused by a limit or policy
	ConnsRejected uint64         // connections refused
	ConnsShed     uint64         // idle connections shed
	Panics        uint64         // handler panics
	ByTransport   map[string]int // open connections by transport (unix, tcp, tls, ws, ...)
	ByUID         map[int]int    // open connections by peer uid (peers with kernel credentials)
	Methods       []MethodCounts // by method, any order
}

// MethodCounts are one method's cumulative counts: calls ended, those that
// failed, and their durations as a histogram.
type MethodCounts struct {
	Name   string
	Calls  uint64
	Errors uint64
	// Bounds are the histogram's upper bounds in seconds, increasing;
	// Buckets[i] counts the calls that took at most Bounds[i] (and more
	// than Bounds[i-1]), Buckets[len(Bounds)] those that took longer.
	Bounds  []float64
	Buckets []uint64
}

// sample is Counts read at a time.
type sample struct {
	at time.Time
	c  Counts
}

// sampler reads the source at most every minGap and keeps the samples of
// the last window, so that any number of pages polling it compute their
// rates over about one second from the same few reads.
type sampler struct {
	source func() Counts
	mu     sync.Mutex
	ring   []sample // oldest first
}

const (
	minGap = 250 * time.Millisecond
	window = time.Second
	// maxRows bounds the methods and uids listed (the busiest first).
	maxRows = 200
)

func newSampler(source func() Counts) *sampler { return &sampler{source: source} }

// read returns the newest sample and the one about window before it.
func (s *sampler) read(now time.Time) (cur, prev sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.ring); n == 0 || now.Sub(s.ring[n-1].at) >= minGap {
		s.ring = append(s.ring, sample{now, s.source()})
	}
	// Drop what the next reads no longer need: keep one sample older than
	// the window.
	for len(s.ring) > 2 && now.Sub(s.ring[1].at) >= window {
		s.ring = s.ring[1:]
	}
	cur = s.ring[len(s.ring)-1]
	prev = s.ring[0]
	for _, x := range s.ring {
		if cur.at.Sub(x.at) >= window {
			prev = x
		}
	}
	return cur, prev
}

// Figures is the JSON the page polls.
type Figures struct {
	Conns         int            `json:"conns"`
	Calls         int            `json:"calls"`
	CallsTotal    uint64         `json:"calls_total"`
	CallsPerSec   float64        `json:"calls_per_sec"`
	Refused       uint64         `json:"refused"`
	ConnsRejected uint64         `json:"conns_rejected"`
	ConnsShed     uint64         `json:"conns_shed"`
	Panics        uint64         `json:"panics"`
	ByTransport   []Row          `json:"by_transport"`
	ByUID         []Row          `json:"by_uid"`
	Methods       []MethodFigure `json:"methods"`
	Window        float64        `json:"window_s"` // the span rates and percentiles are over
}

// Row is one line of a breakdown.
type Row struct {
	Key   string `json:"key"`
	Conns int    `json:"conns"`
}

// MethodFigure is one method's line: rates and percentiles over the last
// window, totals since the start.
type MethodFigure struct {
	Name     string   `json:"name"`
	Calls    uint64   `json:"calls"`
	Errors   uint64   `json:"errors"`
	PerSec   float64  `json:"per_sec"`
	P50MS    *float64 `json:"p50_ms"` // null without calls in the window
	P99MS    *float64 `json:"p99_ms"`
	ErrorsPS float64  `json:"errors_per_sec"`
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
func figuresOf(cur, prev sample) *Figures {
	c := cur.c
	span := cur.at.Sub(prev.at).Seconds()
	f := &Figures{Conns: c.Conns, Calls: c.Calls, CallsTotal: c.CallsTotal, Refused: c.Refused,
		ConnsRejected: c.ConnsRejected, ConnsShed: c.ConnsShed, Panics: c.Panics, Window: span,
		ByTransport: []Row{}, ByUID: []Row{}, Methods: []MethodFigure{}}
	rate := func(now, before uint64) float64 {
		if span <= 0 || now < before {
			return 0
		}
		return float64(now-before) / span
	}
	f.CallsPerSec = rate(c.CallsTotal, prev.c.CallsTotal)
	for k, n := range c.ByTransport {
		f.ByTransport = append(f.ByTransport, Row{k, n})
	}
	for uid, n := range c.ByUID {
		f.ByUID = append(f.ByUID, Row{strconv.Itoa(uid), n})
	}
	byConns := func(a, b Row) int {
		if a.Conns != b.Conns {
			return b.Conns - a.Conns
		}
		return strings.Compare(a.Key, b.Key)
	}
	slices.SortFunc(f.ByTransport, byConns)
	slices.SortFunc(f.ByUID, byConns)
	f.ByUID = f.ByUID[:min(len(f.ByUID), maxRows)]
	before := map[string]*MethodCounts{}
	for i := range prev.c.Methods {
		before[prev.c.Methods[i].Name] = &prev.c.Methods[i]
	}
	for _, m := range c.Methods {
		mf := MethodFigure{Name: m.Name, Calls: m.Calls, Errors: m.Errors}
		delta := slices.Clone(m.Buckets)
		if b := before[m.Name]; b != nil {
			mf.PerSec, mf.ErrorsPS = rate(m.Calls, b.Calls), rate(m.Errors, b.Errors)
			if len(b.Buckets) == len(delta) {
				for i := range delta {
					delta[i] -= min(delta[i], b.Buckets[i])
				}
			}
		} else {
			mf.PerSec, mf.ErrorsPS = rate(m.Calls, 0), rate(m.Errors, 0)
		}
		mf.P50MS, mf.P99MS = quantile(m.Bounds, delta, 0.50), quantile(m.Bounds, delta, 0.99)
		f.Methods = append(f.Methods, mf)
	}
	sort.Slice(f.Methods, func(i, j int) bool {
		a, b := f.Methods[i], f.Methods[j]
		if a.PerSec != b.PerSec {
			return a.PerSec > b.PerSec
		}
		return a.Name < b.Name
	})
	f.Methods = f.Methods[:min(len(f.Methods), maxRows)]
	return f
}

// quantile estimates the q-quantile, in milliseconds, of a histogram's
// counts (bounds in seconds), interpolating linearly within the bucket it
// falls in as Prometheus's histogram_quantile does; calls beyond the last
// bound count as taking the last bound. nil without counts.
func quantile(bounds []float64, counts []uint64, q float64) *float64 {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total == 0 || len(bounds) == 0 || len(counts) != len(bounds)+1 {
		return nil
	}
	rank := q * float64(total)
	var seen uint64
	for i, n := range counts {
		if n == 0 || float64(seen+n) < rank {
			seen += n
			continue
		}
		if i == len(bounds) {
			break
		}
		lo := 0.0
		if i > 0 {
			lo = bounds[i-1]
		}
		v := (lo + (bounds[i]-lo)*(rank-float64(seen))/float64(n)) * 1000
		return &v
	}
	v := bounds[len(bounds)-1] * 1000
	return &v
}

package metrics

import (
	"sort"
	"time"

	"github.com/warrenipc/warren/status"
)

// Snapshot is a server's figures at one moment: what the console page
// shows, and what expose.go writes. Counters only grow; a reader takes
// rates from two snapshots (calls per second: the difference of Calls
// over the difference of Time).
type Snapshot struct {
	Time     time.Time
	Methods  []MethodStats // by name
	InFlight int64         // calls in flight, all methods

	Conns      []ConnCount // open connections by transport and engine, non-zero ones
	ConnsByUID []UIDCount  // open connections by peer uid, most first, at most MaxUIDs

	ConnsRefused []ReasonCount // connections refused, by reason, every reason
	CallsRefused []ReasonCount // calls refused before they ran, by reason
	Shed         []ReasonCount // connections shed, by reason

	BytesIn, BytesOut uint64 // request and reply message bytes of unary calls

	Files       int64 // descriptors received and not yet closed or handed on
	SharedBytes int64 // bytes of shared messages received and held mapped

	Loop LoopStats // the event loop's figures (zero without EventLoop)
}

// MethodStats are one method's figures.
type MethodStats struct {
	Method   string
	Calls    uint64           // calls ended or refused before they ran (the sum of Codes)
	Codes    [NumCodes]uint64 // the same, by status code
	InFlight int64
	// Buckets counts latencies by Bounds (not cumulative); Sum is their
	// total. Refused calls have no latency.
	Buckets  [NumBuckets]uint64
	Sum      time.Duration
	P50, P99 time.Duration // from Buckets (Quantile)
	BytesIn  uint64
	BytesOut uint64
}

// Errors returns the calls that ended with a code other than OK.
func (m *MethodStats) Errors() uint64 { return m.Calls - m.Codes[status.OK] }

// ConnCount is a number of open connections of one transport ("unix",
// "tcp", "tls", "ws", "wss" or "other") in one engine ("goroutine" or
// "eventloop").
type ConnCount struct {
	Transport, Engine string
	N                 int64
}

// UIDCount is a number of open connections of one peer uid.
type UIDCount struct {
	UID uint32
	N   int
}

// MaxUIDs bounds Snapshot.ConnsByUID.
const MaxUIDs = 64

// ReasonCount is a count for one reason (a label value from a fixed set).
type ReasonCount struct {
	Reason string
	N      uint64
}

// LoopStats are the event loop's own figures.
type LoopStats struct {
	Loops        int64  // loops running
	Hibernations uint64 // sessions dropped while idle
	Wakes        uint64 // sessions rebuilt for a connection that sent something
	Takeovers    uint64 // loops taken over from a call that ran too long inline
}

// Snapshot returns the registry's figures now. A nil Registry gives an
// empty Snapshot with its Time.
func (r *Registry) Snapshot() Snapshot {
	s := Snapshot{Time: time.Now()}
	if r == nil {
		return s
	}
	r.mu.Lock()
	methods := r.sorted
	r.mu.Unlock()
	s.Methods = make([]MethodStats, len(methods))
	for i, m := range methods {
		ms := &s.Methods[i]
		ms.Method = m.name
		for c := range m.codes {
			ms.Codes[c] = m.codes[c].Load()
			ms.Calls += ms.Codes[c]
		}
		ms.InFlight = m.inFlight.Load()
		ms.Buckets, ms.Sum = m.hist.Load()
		ms.P50, ms.P99 = Quantile(0.5, ms.Buckets), Quantile(0.99, ms.Buckets)
		ms.BytesIn, ms.BytesOut = m.bytesIn.Load(), m.bytesOut.Load()
		s.InFlight += ms.InFlight
		s.BytesIn += ms.BytesIn
		s.BytesOut += ms.BytesOut
	}
	s.ConnsRefused = make([]ReasonCount, numConnReasons)
	for i := range s.ConnsRefused {
		s.ConnsRefused[i] = ReasonCount{connReasonNames[i], r.connRefused[i].Load()}
	}
	s.CallsRefused = make([]ReasonCount, numCallReasons)
	for i := range s.CallsRefused {
		s.CallsRefused[i] = ReasonCount{callReasonNames[i], r.callRefused[i].Load()}
	}
	s.Shed = make([]ReasonCount, numShedReasons)
	for i := range s.Shed {
		s.Shed[i] = ReasonCount{shedReasonNames[i], r.shed[i].Load()}
	}
	if f := r.collect.Load(); f != nil {
		(*f)(&s)
	}
	sort.Slice(s.ConnsByUID, func(i, j int) bool {
		a, b := s.ConnsByUID[i], s.ConnsByUID[j]
		return a.N > b.N || a.N == b.N && a.UID < b.UID
	})
	if len(s.ConnsByUID) > MaxUIDs {
		s.ConnsByUID = s.ConnsByUID[:MaxUIDs]
	}
	return s
}

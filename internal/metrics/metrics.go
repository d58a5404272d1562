// Package metrics counts a server's calls, connections, refusals and sheds
// with atomics, and exposes them in the Prometheus text format (format
// 0.0.4, expose.go) and as a Snapshot for the console page.
//
// Series are bounded: a Method is made once per registered method (a peer
// naming an unknown method is counted under a reason, never as a label),
// codes come from the fixed set of status codes, reasons, transports and
// engines from fixed lists, and connections by uid are cut at MaxUIDs.
//
// rpc.Server keeps its Registry in the field met, made by NewServer when
// ServerOptions.Metrics is set (nil otherwise); readers call Snapshot.
package metrics

import (
	"sort"
	"sync"
	"sync/atomic"
	_ "unsafe" // go:linkname

	"github.com/warrenipc/warren/status"
)

// NumCodes is the number of status codes (OK through Unauthenticated);
// a code outside them counts as Unknown.
const NumCodes = 17

// Registry holds one server's series. Its methods are safe for concurrent
// use; a nil *Registry counts nothing.
type Registry struct {
	mu      sync.Mutex
	methods map[string]*Method
	sorted  []*Method // by name; replaced, never changed, on registration

	connRefused [numConnReasons]atomic.Uint64
	callRefused [numCallReasons]atomic.Uint64
	shed        [numShedReasons]atomic.Uint64

	// collect fills the figures kept elsewhere (connections, the event
	// loop, descriptors) at Snapshot time; set once by the server.
	collect atomic.Pointer[func(*Snapshot)]
}

// New returns an empty Registry.
func New() *Registry { return &Registry{methods: map[string]*Method{}} }

// Method returns the series of the method name, made on first use. The
// server calls it when a method is registered, never with a name a peer
// sent.
func (r *Registry) Method(name string) *Method {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.methods[name]; m != nil {
		return m
	}
	m := &Method{name: name}
	r.methods[name] = m
	// A new slice: Snapshot reads the old one without the lock.
	sorted := append(append(make([]*Method, 0, len(r.sorted)+1), r.sorted...), m)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	r.sorted = sorted
	return m
}

// SetCollect sets the function that fills a Snapshot's connections, event
// loop and descriptor figures, which other packages keep.
func (r *Registry) SetCollect(f func(*Snapshot)) {
	if r != nil {
		r.collect.Store(&f)
	}
}

// ConnRefused counts a connection refused for reason.
func (r *Registry) ConnRefused(reason ConnReason) {
	if r != nil && reason < numConnReasons {
		r.connRefused[reason].Add(1)
	}
}

// CallRefused counts a call refused before it ran, for reason.
func (r *Registry) CallRefused(reason CallReason) {
	if r != nil && reason < numCallReasons {
		r.callRefused[reason].Add(1)
	}
}

// Shed counts a connection shed for reason.
func (r *Registry) Shed(reason ShedReason) {
	if r != nil && reason < numShedReasons {
		r.shed[reason].Add(1)
	}
}

// Method is one registered method's series. A nil *Method counts nothing.
type Method struct {
	name     string
	inFlight atomic.Int64
	codes    [NumCodes]atomic.Uint64
	bytesIn  atomic.Uint64
	bytesOut atomic.Uint64
	hist     Histogram
}

// Name returns the method's name.
func (m *Method) Name() string { return m.name }

// Start counts a call of m in flight and returns its start time (zero for
// a nil m): pass it to End.
func (m *Method) Start() int64 {
	if m == nil {
		return 0
	}
	m.inFlight.Add(1)
	return nanotime()
}

// End counts the end of a call that Start began, with its error (nil for
// OK) and the bytes of its request and reply messages.
func (m *Method) End(start int64, err error, in, out int) {
	if m == nil {
		return
	}
	m.inFlight.Add(-1)
	m.hist.Observe(nanotime() - start)
	code := status.OK
	if se, ok := err.(*status.Error); ok {
		code = se.Code // the usual error: no errors.As
	} else if err != nil {
		code = status.CodeOf(err)
	}
	if uint32(code) >= NumCodes {
		code = status.Unknown
	}
	m.codes[code].Add(1)
	if in > 0 {
		m.bytesIn.Add(uint64(in))
	}
	if out > 0 {
		m.bytesOut.Add(uint64(out))
	}
}

// Refused counts a call of m refused before it ran with code (a limit,
// the method's policy): it has no latency.
func (m *Method) Refused(code status.Code) {
	if m == nil {
		return
	}
	if uint32(code) >= NumCodes {
		code = status.Unknown
	}
	m.codes[code].Add(1)
}

// nanotime is the runtime's monotonic clock in nanoseconds: a third of
// time.Now's cost, which also reads the wall clock.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

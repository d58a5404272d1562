package harness

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/warrenipc/warren/bench/report"
	"github.com/warrenipc/warren/bench/systems"
)

// Scenario is one comparison. Adding one is adding a function that lists
// its cases, and an entry in Scenarios (for example the idle-connection
// memory scenario "idle": a case per system whose Run opens many idle
// connections, reads the server's memory, and whose Summarize fills the
// row).
type Scenario struct {
	Name  string
	Doc   string // one line printed above the scenario's table
	Cases func(e *Env) []Case
}

// Case is one configuration measured Reps times. The runner interleaves
// repetitions across a scenario's cases, so that drift in the machine's
// load hits every system alike.
type Case struct {
	// Row is the description of the result (system, scenario, transport,
	// payload, callers...); the runner fills in the measurements.
	Row report.Row
	// Run warms up and measures once.
	Run func(ctx context.Context) (Sample, error)
	// Summarize, if set, replaces the default summary of the samples into
	// the row (which fills calls/s, latencies, GB/s and allocations from
	// what the samples hold).
	Summarize func(row *report.Row, samples []Sample)
}

// Scenarios lists the scenarios in the order they run and print.
var Scenarios = []Scenario{
	{"unary", "Unary echo calls over a unix socket, concurrent callers sharing one connection (drpc: one connection per caller); request and reply of the payload size.", unaryCases},
	{"seqrtt", "Sequential round trip: one caller, 128-byte echo over a unix socket, one call at a time; raw is a bare socket ping-pong of the same bytes.", seqrttCases},
	{"rawlat", "Bare Go sockets, the floor: ping-pong latency of 128 bytes, unix socket against TCP loopback.", rawlatCases},
	{"rawtput", "Bare Go sockets, the floor: one-way throughput in writes of the payload size, unix socket against TCP loopback.", rawtputCases},
	{"large", "Large unary echo over a unix socket, 4 concurrent callers sharing one connection (drpc: one each): warren copying through the socket, warren-memfd copying each request into a new sealed memfd, warren-shared sending a buffer of Client.NewSharedBuffer filled once per caller (zero-copy), and the peers with their message limits raised (ttrpc's 4 MiB limit is fixed); GB/s of payload echoed, each call's payload counted once.", largeCases},
	{"stream", "One bidirectional stream echoing 1 MiB messages over a unix socket (at most 8 in flight), GB/s of messages echoed (each counted once), allocations per message; raw is a bare socket echoing the same bytes.", streamCases},
}

// Params are the sizes of a run; Quick and Full are the two presets.
type Params struct {
	UnaryPayloads []int
	UnaryCallers  int
	UnaryCalls    int
	// UnaryMinTime, if set, raises a unary repetition's calls so that it
	// lasts about this long at the rate its warm-up measured: a fast
	// system's 10,000 calls would otherwise be over in 40 ms, short
	// enough for one garbage collection or scheduling hiccup to move its
	// result by a tenth.
	UnaryMinTime time.Duration
	SeqCalls     int   // seqrtt and rawlat calls
	TputWrites   []int // rawtput write sizes
	TputBytes    int64 // rawtput bytes per repetition
	StreamMsgs   int   // stream messages per repetition
	// LargePayloads, LargeCallers, LargeCalls and LargeMinTime are the
	// large scenario's unary sizes, as the Unary ones.
	LargePayloads []int
	LargeCallers  int
	LargeCalls    int
	LargeMinTime  time.Duration
	Reps          int
}

var (
	Full = Params{
		UnaryPayloads: []int{1024, 10240, 102400, 1024000},
		UnaryCallers:  16,
		UnaryCalls:    10000,
		UnaryMinTime:  500 * time.Millisecond,
		SeqCalls:      10000,
		TputWrites:    []int{64 << 10, 512 << 10, 16 << 20},
		TputBytes:     1 << 30,
		StreamMsgs:    1000,
		LargePayloads: []int{1 << 20, 16 << 20, 64 << 20},
		LargeCallers:  4,
		LargeCalls:    16,
		LargeMinTime:  time.Second,
		Reps:          3,
	}
	// Quick proves the harness in well under two minutes on two cores:
	// every scenario and system, fewer calls and payloads, two repetitions.
	Quick = Params{
		UnaryPayloads: []int{1024, 102400},
		UnaryCallers:  16,
		UnaryCalls:    2000,
		SeqCalls:      2000,
		TputWrites:    []int{64 << 10, 512 << 10, 16 << 20},
		TputBytes:     128 << 20,
		StreamMsgs:    64,
		LargePayloads: []int{1 << 20, 16 << 20},
		LargeCallers:  4,
		LargeCalls:    8,
		Reps:          2,
	}
)

// callCase is a case that runs unary (echo calls) for sys.
func (e *Env) callCase(scenario string, sys systems.System, network string, size, callers, calls int, minTime time.Duration) Case {
	row := e.row(scenario, sys.Name(), network)
	row.PayloadBytes, row.Concurrency, row.Calls, row.Conns = size, callers, calls, 1
	if sys.OneCallPerConn() {
		row.Conns = callers
		if callers > 1 {
			row.Note = fmt.Sprintf("one call at a time per connection: %d connections", callers)
		}
	}
	return Case{Row: row, Run: func(ctx context.Context) (Sample, error) {
		srv, err := e.servers.get(ctx, sys)
		if err != nil {
			return Sample{}, err
		}
		return unary(ctx, sys, srv, network, size, callers, calls, minTime)
	}}
}

func unaryCases(e *Env) []Case {
	var cs []Case
	for _, size := range e.P.UnaryPayloads {
		for _, sys := range e.withRing() {
			if sys.Name() != "raw" {
				cs = append(cs, e.callCase("unary", sys, "unix", size, e.P.UnaryCallers, e.P.UnaryCalls, e.P.UnaryMinTime))
			}
		}
	}
	return cs
}

// withRing is e.Systems with warren-shm after warren (Linux: elsewhere it
// would be warren again).
func (e *Env) withRing() []systems.System {
	var syss []systems.System
	for _, sys := range e.Systems {
		syss = append(syss, sys)
		if sys.Name() == "warren" && runtime.GOOS == "linux" {
			syss = append(syss, systems.Warren{Ring: true})
		}
	}
	return syss
}

func seqrttCases(e *Env) []Case {
	var cs []Case
	for _, sys := range e.withRing() {
		cs = append(cs, e.callCase("seqrtt", sys, "unix", 128, 1, e.P.SeqCalls, 0))
	}
	return append(cs, e.iceoryxCases()...)
}

func rawlatCases(e *Env) []Case {
	if !e.has("raw") {
		return nil
	}
	return []Case{
		e.callCase("rawlat", systems.Raw{}, "unix", 128, 1, e.P.SeqCalls, 0),
		e.callCase("rawlat", systems.Raw{}, "tcp", 128, 1, e.P.SeqCalls, 0),
	}
}

func rawtputCases(e *Env) []Case {
	if !e.has("raw") {
		return nil
	}
	var cs []Case
	for _, size := range e.P.TputWrites {
		for _, network := range []string{"unix", "tcp"} {
			row := e.row("rawtput", "raw", network)
			row.PayloadBytes = size
			cs = append(cs, Case{Row: row, Run: func(ctx context.Context) (Sample, error) {
				srv, err := e.servers.get(ctx, systems.Raw{})
				if err != nil {
					return Sample{}, err
				}
				return sink(ctx, srv, network, size, e.P.TputBytes)
			}})
		}
	}
	return cs
}

func streamCases(e *Env) []Case {
	var cs []Case
	for _, sys := range e.Systems {
		if sys.Name() == "netrpc" { // net/rpc has no streams
			continue
		}
		row := e.row("stream", sys.Name(), "unix")
		row.PayloadBytes, row.Calls = 1<<20, e.P.StreamMsgs
		cs = append(cs, Case{Row: row, Run: func(ctx context.Context) (Sample, error) {
			srv, err := e.servers.get(ctx, sys)
			if err != nil {
				return Sample{}, err
			}
			return stream(ctx, sys, srv, "unix", 1<<20, e.P.StreamMsgs)
		}})
	}
	return cs
}

func largeCases(e *Env) []Case {
	var syss []systems.System
	for _, sys := range e.Systems {
		switch sys.Name() {
		case "raw", "ttrpc":
		case "warren":
			syss = append(syss, sys, systems.Warren{Memfd: true}, systems.Warren{Shared: true})
		default:
			syss = append(syss, sys)
		}
	}
	var cs []Case
	for _, size := range e.P.LargePayloads {
		for _, sys := range syss {
			c := e.callCase("large", sys, "unix", size, e.P.LargeCallers, e.P.LargeCalls, e.P.LargeMinTime)
			if sys.Name() == "warren-shared" {
				c.Row.Note = "request in a buffer of Client.NewSharedBuffer, filled once per caller"
			}
			run := c.Run
			c.Run = func(ctx context.Context) (Sample, error) {
				s, err := run(ctx)
				s.Bytes = int64(s.Calls) * int64(size)
				return s, err
			}
			cs = append(cs, c)
		}
	}
	return cs
}

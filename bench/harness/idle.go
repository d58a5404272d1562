package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/warrenipc/warren/bench/idle"
	"github.com/warrenipc/warren/bench/report"
	"github.com/warrenipc/warren/bench/stats"
)

// The idle-connection scenarios measure warren alone, in its two server
// modes (see package idle); each measurement starts its own server process,
// so they do not use the shared server children.
func init() {
	Scenarios = append(Scenarios,
		Scenario{"idle", "Idle connections: the server's resident memory (after GC) and the kernel's slab memory (both ends) per idle connection, goroutine-per-connection mode against event-loop mode; a fresh server process per measurement, raw clients that only exchange prefaces. With -quick, 1,000 connections only.", idleCases},
		Scenario{"accept", "Connections accepted and handshaken per second over a unix socket (in the calls/s column): 2 dialers each connecting 32 sockets and sending their prefaces before reading the server's.", acceptCases},
	)
}

// idleConns returns the connection counts to measure.
func (e *Env) idleConns() []int {
	if e.P.UnaryCalls <= Quick.UnaryCalls {
		return []int{1000}
	}
	return []int{1000, 10000, 19000}
}

func idleCases(e *Env) []Case {
	if !e.has("warren") {
		return nil
	}
	limit, _ := idle.RaiseFileLimit()
	var cs []Case
	for _, n := range e.idleConns() {
		for _, network := range idle.Networks {
			for _, mode := range idle.Modes {
				row := e.row("idle", "warren", network)
				row.Mode, row.Conns = mode, n
				if uint64(n)+64 > limit {
					row.Note = fmt.Sprintf("skipped: the open-file limit is %d", limit)
					cs = append(cs, Case{Row: row, Run: func(context.Context) (Sample, error) { return Sample{}, nil }, Summarize: func(*report.Row, []Sample) {}})
					continue
				}
				var results []idle.Result
				cs = append(cs, Case{
					Row: row,
					Run: func(ctx context.Context) (Sample, error) {
						start := time.Now()
						r, err := idle.Measure(mode, network, n, 2*time.Second, false)
						if err != nil {
							return Sample{}, err
						}
						results = append(results, r)
						return Sample{Elapsed: time.Since(start), Calls: n}, nil
					},
					Summarize: func(row *report.Row, _ []Sample) {
						if len(results) == 0 {
							return
						}
						med := func(f func(idle.Result) float64) float64 { return idle.Median(results, f) }
						row.Reps = len(results)
						row.ServerBytesPerConn = med(func(r idle.Result) float64 { return r.ServerBytesPerConn })
						row.KernelBytesPerConn = med(func(r idle.Result) float64 { return r.KernelBytesPerConn })
						row.Note = fmt.Sprintf("heap %s B, stacks %s B per conn; %d goroutines",
							report.Sig3(med(func(r idle.Result) float64 { return r.HeapBytesPerConn })),
							report.Sig3(med(func(r idle.Result) float64 { return r.StackBytesPerConn })),
							results[len(results)-1].Goroutines)
					},
				})
			}
		}
	}
	return cs
}

func acceptCases(e *Env) []Case {
	if !e.has("warren") {
		return nil
	}
	const n, parallel, batch = 15000, 2, 32
	var cs []Case
	for _, mode := range idle.Modes {
		row := e.row("accept", "warren", "unix")
		row.Mode, row.Conns, row.Concurrency = mode, n, parallel
		cs = append(cs, Case{Row: row, Run: func(ctx context.Context) (Sample, error) {
			rate, err := idle.AcceptRate(mode, n, parallel, batch)
			if err != nil {
				return Sample{}, err
			}
			return Sample{Elapsed: time.Duration(float64(n) / rate * float64(time.Second)), Calls: n}, nil
		}, Summarize: func(row *report.Row, samples []Sample) {
			var rates []float64
			for _, s := range samples {
				if sec := s.Elapsed.Seconds(); sec > 0 {
					rates = append(rates, float64(s.Calls)/sec)
				}
			}
			row.Reps = len(rates)
			if len(rates) > 0 {
				sp := stats.Of(rates)
				row.RPS, row.RPSMin, row.RPSMax = sp.Median, sp.Min, sp.Max
			}
		}})
	}
	return cs
}

// Package harness runs the comparison: it starts each system's echo server
// (in a child process by default), runs the scenarios' cases with
// warm-ups and interleaved repetitions, and summarizes them into report
// rows.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warrenipc/warren/bench/report"
	"github.com/warrenipc/warren/bench/stats"
	"github.com/warrenipc/warren/bench/systems"
)

// Config says what to run.
type Config struct {
	Params
	// InProcess runs the servers in this process instead of children.
	InProcess bool
	// Only restricts the systems (names from systems.Names); empty is all.
	Only []string
	// Scenarios restricts the scenarios by name; empty is all.
	Scenarios []string
	// Child returns the command that re-executes this program as the
	// server child for system, with its sockets in dir (see ServeChild).
	// It is required unless InProcess is set.
	Child func(system, dir string) *exec.Cmd
	// Progress receives a progress line, \r-updated if it is a terminal.
	Progress io.Writer
}

// Env is what scenarios build their cases from.
type Env struct {
	P       Params
	Systems []systems.System // the systems selected, in systems.All order
	mode    string
	servers *servers
}

func (e *Env) has(name string) bool {
	return slices.ContainsFunc(e.Systems, func(s systems.System) bool { return s.Name() == name })
}

// row starts a result row with what every case has.
func (e *Env) row(scenario, system, network string) report.Row {
	return report.Row{Scenario: scenario, System: system, Transport: network, Mode: e.mode}
}

// Harness runs one comparison. Close releases everything it started.
type Harness struct {
	cfg       Config
	env       *Env
	scenarios []Scenario
	dir       string
	closeOnce sync.Once
}

// New checks cfg and makes the directory for the sockets.
func New(cfg Config) (*Harness, error) {
	e := &Env{P: cfg.Params, mode: "separate"}
	if cfg.InProcess {
		e.mode = "inprocess"
	} else if cfg.Child == nil {
		return nil, errors.New("harness: Config.Child is needed for servers in their own process")
	}
	for _, name := range cfg.Only {
		if _, err := systems.ByName(name); err != nil {
			return nil, err
		}
	}
	for _, s := range systems.All() {
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, s.Name()) {
			e.Systems = append(e.Systems, s)
		}
	}
	if slices.Contains(cfg.Only, "warren-metrics") { // not in All: asked for by name
		e.Systems = append(e.Systems, systems.Warren{Metrics: true})
	}
	var scs []Scenario
	for _, name := range cfg.Scenarios {
		if !slices.ContainsFunc(Scenarios, func(s Scenario) bool { return s.Name == name }) {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(ScenarioNames(), ", "))
		}
	}
	for _, s := range Scenarios {
		if len(cfg.Scenarios) == 0 || slices.Contains(cfg.Scenarios, s.Name) {
			scs = append(scs, s)
		}
	}
	if cfg.Reps < 1 {
		return nil, errors.New("harness: at least one repetition")
	}
	// A short directory: unix socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "wbench")
	if err != nil {
		return nil, err
	}
	e.servers = &servers{dir: dir, inProcess: cfg.InProcess, child: cfg.Child}
	return &Harness{cfg: cfg, env: e, scenarios: scs, dir: dir}, nil
}

// ScenarioNames lists the registered scenarios.
func ScenarioNames() []string {
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return names
}

// Close stops every server (children included) and removes the socket
// directory. It is safe to call more than once and from another goroutine
// than Run's (on an interrupt); Run then fails.
func (h *Harness) Close() {
	h.closeOnce.Do(func() {
		h.env.servers.close()
		os.RemoveAll(h.dir)
	})
}

// Result is one scenario's rows.
type Result struct {
	Scenario Scenario
	Rows     []report.Row
}

// Run runs the selected scenarios. A case that fails is reported in its
// row's note and in the returned error, and the run goes on; an interrupt
// (ctx ending) stops it.
func (h *Harness) Run(ctx context.Context) ([]Result, error) {
	type planned struct {
		sc    Scenario
		cases []Case
	}
	var plan []planned
	total := 0
	for _, sc := range h.scenarios {
		cs := sc.Cases(h.env)
		plan = append(plan, planned{sc, cs})
		total += len(cs) * h.cfg.Reps
	}
	prog := newProgress(h.cfg.Progress, total)
	defer prog.finish()

	var results []Result
	var errs []error
	for _, p := range plan {
		samples := make([][]Sample, len(p.cases))
		failed := make([]error, len(p.cases))
		for rep := range h.cfg.Reps {
			for i, c := range p.cases {
				prog.step(fmt.Sprintf("%s %s %s rep %d/%d", p.sc.Name, c.Row.System, caseLabel(c.Row), rep+1, h.cfg.Reps))
				if failed[i] != nil {
					continue
				}
				s, err := c.Run(ctx)
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				if err != nil {
					failed[i] = err
					errs = append(errs, fmt.Errorf("%s %s %s: %w", p.sc.Name, c.Row.System, caseLabel(c.Row), err))
					prog.log("FAILED: %v", errs[len(errs)-1])
					continue
				}
				samples[i] = append(samples[i], s)
			}
		}
		res := Result{Scenario: p.sc}
		for i, c := range p.cases {
			row := c.Row
			switch {
			case failed[i] != nil:
				row.Note = "FAILED: " + failed[i].Error()
			case c.Summarize != nil:
				c.Summarize(&row, samples[i])
			default:
				Summarize(&row, samples[i])
			}
			res.Rows = append(res.Rows, row)
		}
		results = append(results, res)
	}
	return results, errors.Join(errs...)
}

func caseLabel(r report.Row) string {
	var parts []string
	if r.Transport != "" {
		parts = append(parts, r.Transport)
	}
	if r.PayloadBytes > 0 {
		parts = append(parts, report.Size(r.PayloadBytes))
	}
	return strings.Join(parts, " ")
}

// Summarize is the default summary of a case's samples: medians across
// repetitions of calls/s, GB/s, latency mean and percentiles and
// allocations per call, the spread of calls/s and GB/s, and the fastest and
// slowest single call.
func Summarize(row *report.Row, samples []Sample) {
	var rps, gbps, mean, p50, p99, allocs, allocBytes []float64
	minUS, maxUS := math.Inf(1), 0.0
	for _, s := range samples {
		sec := s.Elapsed.Seconds()
		if sec <= 0 {
			continue
		}
		if len(s.Lat) > 0 {
			rps = append(rps, float64(s.Calls)/sec)
			l := stats.Summarize(s.Lat)
			mean, p50, p99 = append(mean, l.Mean), append(p50, l.P50), append(p99, l.P99)
			minUS, maxUS = min(minUS, l.Min), max(maxUS, l.Max)
		}
		if s.Bytes > 0 {
			gbps = append(gbps, float64(s.Bytes)/sec/1e9)
		}
		if s.HaveAllocs && s.Calls > 0 {
			allocs = append(allocs, float64(s.Allocs)/float64(s.Calls))
			allocBytes = append(allocBytes, float64(s.AllocBytes)/float64(s.Calls))
		}
	}
	row.Reps = len(samples)
	if calls := callCounts(samples); len(calls) > 0 {
		row.Calls = int(stats.Of(calls).Median) // raised by a minimum time, the calls differ
	}
	if len(rps) > 0 {
		sp := stats.Of(rps)
		row.RPS, row.RPSMin, row.RPSMax = sp.Median, sp.Min, sp.Max
		row.MeanUS, row.P50US, row.P99US = stats.Of(mean).Median, stats.Of(p50).Median, stats.Of(p99).Median
		row.MinUS, row.MaxUS = minUS, maxUS
	}
	if len(gbps) > 0 {
		sp := stats.Of(gbps)
		row.GBps, row.GBpsMin, row.GBpsMax = sp.Median, sp.Min, sp.Max
	}
	if len(allocs) > 0 {
		row.AllocsPerCall = report.Float(stats.Of(allocs).Median)
		row.BytesPerCall = report.Float(stats.Of(allocBytes).Median)
	}
}

// callCounts lists the calls of the samples that timed calls.
func callCounts(samples []Sample) []float64 {
	var n []float64
	for _, s := range samples {
		if len(s.Lat) > 0 {
			n = append(n, float64(s.Calls))
		}
	}
	return n
}

// progress shows "[12/84 0:42] unary grpc unix 1 KiB rep 2/3" on one line
// of a terminal (rewritten with \r), or, when the output is not a
// terminal (CI logs), one line each time the scenario or repetition
// changes.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	n     int
	start time.Time
	last  string // last printed prefix, for the non-terminal case
	width int
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) step(label string) {
	if p.w == nil {
		return
	}
	p.n++
	el := time.Since(p.start).Round(time.Second)
	line := fmt.Sprintf("[%d/%d %d:%02d] %s", p.n, p.total, int(el.Minutes()), int(el.Seconds())%60, label)
	if p.tty {
		pad := max(p.width-len(line), 0)
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		p.width = len(line)
		return
	}
	// Scenario name and repetition, without system and payload.
	f := strings.Fields(label)
	key := f[0] + " " + strings.Join(f[len(f)-2:], " ")
	if key != p.last {
		p.last = key
		fmt.Fprintln(p.w, line)
	}
}

// log prints a message on its own line, above the progress line.
func (p *progress) log(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.tty {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
		p.width = 0
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) finish() {
	if p.w == nil {
		return
	}
	el := time.Since(p.start).Round(time.Second)
	p.log("done: %d measurements in %s", p.n, el)
}

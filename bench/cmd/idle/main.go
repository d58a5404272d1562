// Command idle measures what idle connections cost a warren server, in the
// goroutine-per-connection mode and in the event-loop mode
// (rpc.ServerOptions.EventLoop), over a unix socket, TCP loopback and
// WebSocket over TCP loopback: the server's resident memory and the
// kernel's slab memory per connection with N connections open and idle,
// and the rate at which the server accepts and handshakes unix-socket
// connections. Over WebSocket, two other servers can be measured next to
// warren: nbio and gobwas-epoll (see package idle). Each measurement starts
// a fresh server child process; they run one at a time.
//
//	cd bench && go run ./cmd/idle [-conns 1000,10000,19000] [-systems warren] [-modes goroutine,eventloop] [-networks unix,tcp] [-accept 15000] [-json FILE]
//	cd bench && go run ./cmd/idle -systems warren,nbio,gobwas-epoll -networks ws -accept 0
//
// Each combination of system, mode and network that package idle supports
// is measured (idle.Supported): nbio and gobwas-epoll in mode eventloop
// over ws only, whatever -modes says, and warren in modes goroutine and
// eventloop over ws; the others are skipped.
//
// The open-file limit bounds the connections (both processes raise their
// soft limit to the hard one). See BENCHMARKS.md, "Idle connections".
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenipc/warren/bench/idle"
	_ "github.com/warrenipc/warren/bench/idle/nbiopeer" // the system nbio
	"github.com/warrenipc/warren/bench/report"
)

func main() { os.Exit(run()) }

func run() int {
	connsF := flag.String("conns", "1000,10000,19000", "comma-separated numbers of idle `connections`")
	systemsF := flag.String("systems", "warren", "`systems`: "+strings.Join(idle.Systems, ", ")+" (all but warren over ws only, in their own event loops)")
	modesF := flag.String("modes", strings.Join(idle.Modes, ","), "warren's server `modes`: goroutine, eventloop, bare (unix and tcp only)")
	netsF := flag.String("networks", strings.Join(idle.Networks, ","), "`networks`: "+strings.Join(idle.AllNetworks, ", ")+" (WebSocket over TCP loopback)")
	settle := flag.Duration("settle", 2*time.Second, "how long the connections stay idle before the server's memory is read")
	acceptN := flag.Int("accept", 15000, "connections opened to measure the accept rate over a unix socket (0: skip)")
	parallel := flag.Int("parallel", 2, "concurrent dialers for the accept rate")
	batch := flag.Int("batch", 32, "connections each dialer opens (sending their prefaces) before it reads the server's prefaces")
	jsonFile := flag.String("json", "", "write the rows as JSON to `FILE`")
	verbose := flag.Bool("v", false, "print the slab caches that grew most")
	reps := flag.Int("reps", 3, "repetitions of each measurement; the table shows medians")
	call := flag.Bool("call", false, "have every connection make one call before it goes idle (the measurement then waits for the server's idle workers to exit)")
	flag.Parse()

	machine := report.CollectMachine(".", os.Args)
	limit, err := idle.RaiseFileLimit()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		return 1
	}
	var conns []int
	for _, f := range strings.Split(*connsF, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "idle: bad connection count %q\n", f)
			return 2
		}
		if uint64(n)+64 > limit {
			fmt.Fprintf(os.Stderr, "idle: %d connections need more than the open-file limit %d allows\n", n, limit)
			return 2
		}
		conns = append(conns, n)
	}
	modes, nets, systems := strings.Split(*modesF, ","), strings.Split(*netsF, ","), strings.Split(*systemsF, ",")
	for _, s := range systems {
		if !slices.Contains(idle.Systems, s) {
			fmt.Fprintf(os.Stderr, "idle: unknown system %q (want one of %s)\n", s, strings.Join(idle.Systems, ", "))
			return 2
		}
	}
	for _, nw := range nets {
		if !slices.Contains(idle.AllNetworks, nw) {
			fmt.Fprintf(os.Stderr, "idle: unknown network %q (want one of %s)\n", nw, strings.Join(idle.AllNetworks, ", "))
			return 2
		}
	}
	// The measurements: each system, mode and network that can be measured.
	type combo struct{ system, mode, network string }
	var combos []combo
	for _, network := range nets {
		for _, system := range systems {
			sysModes := modes
			if system != "warren" {
				sysModes = []string{"eventloop"} // their own loops, whatever -modes says
			}
			for _, mode := range sysModes {
				if idle.Supported(system, mode, network) && (!*call || system == "warren" && network != "ws") {
					combos = append(combos, combo{system, mode, network})
				} else if system == "warren" || network == "ws" {
					fmt.Fprintf(os.Stderr, "idle: skipping %s in mode %s over %s: not measured\n", system, mode, network)
				}
			}
		}
	}
	if len(combos) == 0 {
		fmt.Fprintln(os.Stderr, "idle: nothing to measure with these -systems, -modes and -networks")
		return 2
	}

	var rows []report.Row
	status := 0
	scenario := "idle"
	if *call {
		scenario = "idle-after-call"
	}
	for _, n := range conns {
		for _, cb := range combos {
			system, mode, network := cb.system, cb.mode, cb.network
			var results []idle.Result
			for rep := range *reps {
				fmt.Fprintf(os.Stderr, "%s %s %s %d connections, rep %d/%d... ", system, mode, network, n, rep+1, *reps)
				r, err := idle.MeasureSystem(system, mode, network, n, *settle, *call)
				if err != nil {
					fmt.Fprintln(os.Stderr, "FAILED:", err)
					status = 1
					continue
				}
				fmt.Fprintf(os.Stderr, "%.0f B/conn server (heap %.0f, stacks %.0f), %.0f B/conn kernel, %d goroutines\n",
					r.ServerBytesPerConn, r.HeapBytesPerConn, r.StackBytesPerConn, r.KernelBytesPerConn, r.Goroutines)
				if *verbose {
					fmt.Fprintf(os.Stderr, "  slab growth per connection: %s\n", strings.Join(r.TopKernel, ", "))
				}
				results = append(results, r)
			}
			if len(results) == 0 {
				continue
			}
			med := func(f func(idle.Result) float64) float64 { return idle.Median(results, f) }
			srv := med(func(r idle.Result) float64 { return r.ServerBytesPerConn })
			lo := slices.MinFunc(results, func(a, b idle.Result) int { return cmp.Compare(a.ServerBytesPerConn, b.ServerBytesPerConn) })
			hi := slices.MaxFunc(results, func(a, b idle.Result) int { return cmp.Compare(a.ServerBytesPerConn, b.ServerBytesPerConn) })
			perConn := ""
			if results[0].Goroutines >= n {
				// A goroutine or more per connection: the goroutine mode,
				// or a mode that falls back to it.
				perConn = fmt.Sprintf(" (%.1f per connection)", float64(results[0].Goroutines)/float64(n))
			}
			rows = append(rows, report.Row{
				System: system, Scenario: scenario, Transport: network, Mode: mode, Conns: n, Reps: len(results),
				ServerBytesPerConn: srv,
				KernelBytesPerConn: med(func(r idle.Result) float64 { return r.KernelBytesPerConn }),
				Note: fmt.Sprintf("server [%s-%s]; heap %s B, stacks %s B per conn; %d goroutines%s",
					report.Sig3(lo.ServerBytesPerConn), report.Sig3(hi.ServerBytesPerConn),
					report.Sig3(med(func(r idle.Result) float64 { return r.HeapBytesPerConn })),
					report.Sig3(med(func(r idle.Result) float64 { return r.StackBytesPerConn })), results[0].Goroutines, perConn),
			})
		}
	}
	if *call {
		fmt.Println("## Idle connections, after one call each")
	} else {
		fmt.Println("## Idle connections")
	}
	fmt.Println()
	report.Table(os.Stdout, rows)

	if *acceptN > 0 && slices.Contains(systems, "warren") {
		var acc []report.Row
		for _, mode := range modes {
			if !idle.Supported("warren", mode, "unix") {
				continue
			}
			var rates []float64
			for rep := range *reps {
				fmt.Fprintf(os.Stderr, "accept rate, %s, %d connections, %d dialers in batches of %d, rep %d/%d... ", mode, *acceptN, *parallel, *batch, rep+1, *reps)
				rate, err := idle.AcceptRate(mode, *acceptN, *parallel, *batch)
				if err != nil {
					fmt.Fprintln(os.Stderr, "FAILED:", err)
					status = 1
					continue
				}
				fmt.Fprintf(os.Stderr, "%.0f/s\n", rate)
				rates = append(rates, rate)
			}
			if len(rates) == 0 {
				continue
			}
			slices.Sort(rates)
			acc = append(acc, report.Row{
				System: "warren", Scenario: "accept", Transport: "unix", Mode: mode, Conns: *acceptN, Concurrency: *parallel, Reps: len(rates),
				RPS: rates[len(rates)/2], RPSMin: rates[0], RPSMax: rates[len(rates)-1],
				Note: "connections accepted and handshaken per second (calls/s column)",
			})
		}
		fmt.Println()
		fmt.Println("## Accept rate")
		fmt.Println()
		report.Table(os.Stdout, acc)
		rows = append(rows, acc...)
	}
	if *jsonFile != "" {
		f, err := os.Create(*jsonFile)
		if err == nil {
			err = report.WriteJSON(f, &report.File{Machine: machine, Rows: rows})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "idle:", err)
			status = 1
		}
	}
	return status
}

// Command compare runs warren and its peers (gRPC-Go, ttrpc, drpc,
// net/rpc, raw sockets) side by side on the same echo service and prints a
// markdown table per scenario with warren's ratio against each peer.
//
//	cd bench && go run ./cmd/compare [-quick] [-json FILE] [-svg FILE] [-only warren,grpc,...]
//
// Servers run in a child process (this program re-executed) unless
// -inprocess is given. See BENCHMARKS.md in the repository root for the
// method.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warrenipc/warren/bench/harness"
	"github.com/warrenipc/warren/bench/report"
	"github.com/warrenipc/warren/bench/systems"
)

// childFlag makes this program a server child (hidden: the parent passes
// it, with the system and the socket directory).
const childFlag = "-serve-child"

func main() {
	if len(os.Args) == 4 && os.Args[1] == childFlag {
		if err := harness.ServeChild(os.Args[2], os.Args[3], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "compare server child:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(run())
}

func run() int {
	quick := flag.Bool("quick", false, "a short run (under 2 minutes): fewer calls, payloads and repetitions, every scenario and system")
	jsonFile := flag.String("json", "", "write the results as JSON to `FILE`")
	svgFile := flag.String("svg", "", "write a chart of unary calls/s by payload size to `FILE`")
	only := flag.String("only", "", "comma-separated `systems` to run ("+strings.Join(systems.Names(), ",")+"); default all")
	scen := flag.String("scenarios", "", "comma-separated `scenarios` to run ("+strings.Join(harness.ScenarioNames(), ",")+"); default all")
	inProcess := flag.Bool("inprocess", false, "run the servers in this process instead of a child process")
	reps := flag.Int("reps", 0, "repetitions of each measurement (default 3, 2 with -quick)")
	calls := flag.Int("calls", 0, "unary calls per repetition (default 10,000, 2,000 with -quick); see -mintime")
	minTime := flag.Duration("mintime", -1, "raise a unary repetition's calls so that it lasts at least this long at its warm-up's rate (default 500ms, none with -quick; 0: none)")
	payloads := flag.String("payloads", "", "comma-separated unary payload `sizes` in bytes (default 1024,10240,102400,1024000; 1024,102400 with -quick)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "compare: unexpected arguments %q\n", flag.Args())
		return 2
	}

	cfg := harness.Config{Params: harness.Full, InProcess: *inProcess, Progress: os.Stderr}
	if *quick {
		cfg.Params = harness.Quick
	}
	if *reps > 0 {
		cfg.Reps = *reps
	}
	if *calls > 0 {
		cfg.UnaryCalls = *calls
	}
	if *minTime >= 0 {
		cfg.UnaryMinTime = *minTime
	}
	if *payloads != "" {
		cfg.UnaryPayloads = nil
		for _, f := range split(*payloads) {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "compare: bad payload size %q\n", f)
				return 2
			}
			cfg.UnaryPayloads = append(cfg.UnaryPayloads, n)
		}
	}
	cfg.Only = split(*only)
	cfg.Scenarios = split(*scen)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 1
	}
	cfg.Child = func(system, dir string) *exec.Cmd { return exec.Command(exe, childFlag, system, dir) }

	h, err := harness.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		return 2
	}
	defer h.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// On an interrupt Run stops at its next step; should a call hang
	// anyway, this still stops the children and removes the sockets.
	go func() {
		<-ctx.Done()
		time.Sleep(10 * time.Second)
		h.Close()
		fmt.Fprintln(os.Stderr, "compare: interrupted")
		os.Exit(130)
	}()

	machine := report.CollectMachine(".", os.Args)
	results, runErr := h.Run(ctx)
	h.Close()
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "compare: interrupted")
		return 130
	}

	file := &report.File{Machine: machine}
	printHeader(os.Stdout, machine, cfg)
	for _, r := range results {
		file.Rows = append(file.Rows, r.Rows...)
		fmt.Printf("\n## %s\n\n%s\n\n", r.Scenario.Name, r.Scenario.Doc)
		if len(r.Rows) == 0 {
			fmt.Println("(no systems selected for this scenario)")
			continue
		}
		report.Table(os.Stdout, r.Rows)
	}
	fmt.Println("\nratio: warren's calls/s (or GB/s) over the other system's in the same configuration; above 1x warren is faster.")

	status := 0
	if *jsonFile != "" {
		if err := writeFile(*jsonFile, func(w io.Writer) error { return report.WriteJSON(w, file) }); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			status = 1
		}
	}
	if *svgFile != "" {
		if err := writeFile(*svgFile, chart(file, cfg).SVG); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			status = 1
		}
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "compare: some measurements failed:\n"+runErr.Error())
		status = 1
	}
	return status
}

func split(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func printHeader(w io.Writer, m report.Machine, cfg harness.Config) {
	mode := "each server in its own process"
	if cfg.InProcess {
		mode = "servers in the same process as the clients"
	}
	fmt.Fprintf(w, "# warren and its peers, side by side\n\n")
	fmt.Fprintf(w, "%s, %d cores (GOMAXPROCS %d), %s %s, kernel %s, %s; load average at start %s.\n",
		m.CPU, m.Cores, m.GOMAXPROCS, m.OS, m.Arch, m.Kernel, m.GoVersion, m.LoadAvg)
	fmt.Fprintf(w, "warren %s (%s); ", m.WarrenRevision, m.Modules["github.com/warrenipc/warren"])
	for _, p := range []string{"google.golang.org/grpc", "github.com/containerd/ttrpc", "storj.io/drpc", "google.golang.org/protobuf"} {
		fmt.Fprintf(w, "%s %s; ", p, m.Modules[p])
	}
	fmt.Fprintf(w, "\n%s; medians of %d repetitions, [min-max] across them; allocations are client and server together.\n", mode, cfg.Reps)
}

func chart(f *report.File, cfg harness.Config) report.Chart {
	var rows []report.Row
	for _, r := range f.Rows {
		if r.Scenario == "unary" {
			rows = append(rows, r)
		}
	}
	where := "server in its own process"
	if cfg.InProcess {
		where = "server in the same process"
	}
	return report.Chart{
		Title: fmt.Sprintf("Unary echo over a unix socket, %d concurrent callers: calls per second", cfg.UnaryCallers),
		Subtitle: fmt.Sprintf("%s; median of %d reps, bars min-max; %d cores, %s, %s",
			where, cfg.Reps, f.Machine.Cores, f.Machine.GoVersion, strings.SplitN(f.Machine.Date, "T", 2)[0]),
		Rows:  rows,
		Order: systems.Names(),
	}
}

// writeFile writes a file through fn, reporting errors of both.
func writeFile(name string, fn func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	return errors.Join(fn(f), f.Close())
}

// Package soak is `warren bench soak`: a server and many client processes
// making a random mix of calls for a while, with faults, accounting for
// every call.
//
// The clients make unary calls (checked echoes), calls with deadlines and
// with cancels, server streams (some read slowly), client streams, bidi
// streams, calls failing on purpose, and bursts over the server's
// per-connection call limit. Every call ends in exactly one outcome, a
// checked reply or a status error; stream messages are checked in order.
// Meanwhile chaos clients, doing the same, are killed with SIGKILL at
// random moments. At the end the server must be back to its starting
// goroutines and descriptors. The report ends with "lost N duplicated N";
// Main fails if either is not 0, if a reply was wrong, or if the server
// leaked.
package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warrenipc/warren/rpc"
)

const (
	cmdSoak   = "soak"
	cmdServer = "soak-server"
	cmdClient = "soak-client"
)

// IsCommand reports whether name is a command of Main: soak, or one of
// the child processes it starts.
func IsCommand(name string) bool {
	return name == cmdSoak || name == cmdServer || name == cmdClient
}

// Main runs args[0] (see IsCommand) with the rest of args.
func Main(args []string, stdout, stderr io.Writer) error {
	switch args[0] {
	case cmdServer:
		return runServer(args[1:], stdout)
	case cmdClient:
		return runClient(args[1:], stdout)
	}
	fset := flag.NewFlagSet("soak", flag.ContinueOnError)
	fset.SetOutput(stderr)
	duration := fset.Duration("duration", time.Minute, "how long the clients call")
	clients := fset.Int("clients", 4, "client processes accounted for")
	workers := fset.Int("workers", 8, "concurrent callers in each client process")
	chaos := fset.Duration("kill-every", time.Second, "start a client and kill it with SIGKILL at a random moment, this often (0: never)")
	fset.Usage = func() {
		fmt.Fprint(stderr, `usage: warren bench soak [--duration D] [--clients N] [--workers N] [--kill-every D]

Runs a soak server and client processes for D: unary calls, deadlines,
cancels, every stream kind, slow readers, bursts over the call limit, and
clients killed with SIGKILL. Reports calls, outcomes by code, p99 latency,
the server's goroutines, descriptors and RSS at the start, peak and end, and
ends with "lost N duplicated N". Exits 1 if either is not 0, if a reply was
wrong, or if the server leaked goroutines or descriptors.

`)
		fset.PrintDefaults()
	}
	if err := fset.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return run(exe, *duration, *clients, *workers, *chaos, stdout, stderr)
}

type proc struct {
	cmd *exec.Cmd
	out *strings.Builder
}

func start(exe string, stderr io.Writer, args ...string) (*proc, error) {
	cmd := exec.Command(exe, append([]string{"bench"}, args...)...)
	out := new(strings.Builder)
	cmd.Stdout, cmd.Stderr = out, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{cmd, out}, nil
}

type extremes struct{ start, peak, end ServerStats }

func (e *extremes) see(s ServerStats) {
	e.peak.Goroutines = max(e.peak.Goroutines, s.Goroutines)
	e.peak.FDs = max(e.peak.FDs, s.FDs)
	e.peak.RSS = max(e.peak.RSS, s.RSS)
	e.peak.Conns = max(e.peak.Conns, s.Conns)
}

func run(exe string, duration time.Duration, clients, workers int, chaos time.Duration, stdout, stderr io.Writer) error {
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr} // the children's output is copied in from several goroutines
	}
	dir, err := os.MkdirTemp("", "soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "soak.sock")

	// The server.
	srvCmd := exec.Command(exe, "bench", cmdServer, addr)
	srvCmd.Stderr = stderr
	pipe, err := srvCmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := srvCmd.Start(); err != nil {
		return err
	}
	defer srvCmd.Process.Kill()
	if line, _ := bufio.NewReader(pipe).ReadString('\n'); line != "ready\n" {
		return fmt.Errorf("soak server did not start: %q", line)
	}
	go io.Copy(io.Discard, pipe)
	mon, err := rpc.Dial(addr, nil)
	if err != nil {
		return err
	}
	defer mon.Close()
	stats := func() (ServerStats, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := rpc.Call[rpc.Empty, ServerStats](ctx, mon, "Soak.Stats", &rpc.Empty{})
		if err != nil {
			return ServerStats{}, err
		}
		return *s, nil
	}
	var ext extremes
	if ext.start, err = stats(); err != nil {
		return fmt.Errorf("server stats: %w", err)
	}
	ext.peak = ext.start
	fmt.Fprintf(stdout, "soak: %v, %d client processes x %d callers, a client killed with SIGKILL every %v; server pid %d on %s\n",
		duration, clients, workers, chaos, srvCmd.Process.Pid, addr)

	// The accounted clients.
	var procs []*proc
	for i := range clients {
		p, err := start(exe, stderr, cmdClient, addr, strconv.Itoa(workers), strconv.Itoa(i+1))
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	// Chaos: clients killed with SIGKILL at random moments.
	var chaosWG sync.WaitGroup
	kills := 0
	stop := make(chan struct{})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	began := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var nextChaos time.Time
	if chaos > 0 {
		nextChaos = began.Add(chaos)
	}
	lastReport := began
	var statErr error
	for time.Since(began) < duration {
		<-tick.C
		if s, err := stats(); err == nil {
			ext.see(s)
		} else {
			statErr = err
		}
		if !nextChaos.IsZero() && time.Now().After(nextChaos) {
			nextChaos = nextChaos.Add(chaos)
			p, err := start(exe, io.Discard, cmdClient, addr, strconv.Itoa(workers), strconv.Itoa(1000+kills))
			if err != nil {
				return err
			}
			kills++
			life := time.Duration(100+rng.IntN(900)) * time.Millisecond
			chaosWG.Add(1)
			go func() {
				defer chaosWG.Done()
				select {
				case <-time.After(life):
				case <-stop:
				}
				p.cmd.Process.Signal(syscall.SIGKILL)
				p.cmd.Wait()
			}()
		}
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			fmt.Fprintf(stderr, "soak: %v: server %d goroutines, %d fds, %.1f MiB RSS, %d conns, %d clients killed\n",
				time.Since(began).Round(time.Second), ext.peak.Goroutines, ext.peak.FDs, float64(ext.peak.RSS)/(1<<20), ext.peak.Conns, kills)
		}
	}
	close(stop)
	chaosWG.Wait()
	for _, p := range procs {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	var total Report
	total.Outcomes = map[string]int64{}
	var problems []string
	for i, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			problems = append(problems, fmt.Sprintf("client %d: %v", i+1, err))
		}
		var r Report
		if err := json.Unmarshal([]byte(p.out.String()), &r); err != nil {
			problems = append(problems, fmt.Sprintf("client %d: no report (%v)", i+1, err))
			continue
		}
		total.Started += r.Started
		total.Wrong += r.Wrong
		total.Lost += r.Lost
		total.Duplicated += r.Duplicated
		for k, v := range r.Outcomes {
			total.Outcomes[k] += v
		}
		total.Latencies = append(total.Latencies, r.Latencies...)
	}
	// The server must come back to where it started (idle workers retire
	// after 10 s).
	settle := time.Now()
	for {
		s, err := stats()
		if err == nil {
			ext.end = s
			if s.Conns <= ext.start.Conns && s.Goroutines <= ext.start.Goroutines+goroutineSlack && s.FDs <= ext.start.FDs+fdSlack {
				break
			}
		}
		if time.Since(settle) > 20*time.Second {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	recovered := time.Since(settle)
	mon.Close()
	srvCmd.Process.Signal(syscall.SIGTERM)
	srvErr := srvCmd.Wait()

	// The report.
	var calls int64
	for _, v := range total.Outcomes {
		calls += v
	}
	fmt.Fprintf(stdout, "calls %d (started %d) in %v by %d client processes; %d more clients killed with SIGKILL\n",
		calls, total.Started, duration, clients, kills)
	keys := make([]string, 0, len(total.Outcomes))
	for k := range total.Outcomes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return total.Outcomes[keys[i]] > total.Outcomes[keys[j]] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, total.Outcomes[k]))
	}
	fmt.Fprintf(stdout, "outcomes: %s\n", strings.Join(parts, ", "))
	slices.Sort(total.Latencies)
	if n := len(total.Latencies); n > 0 {
		q := func(p float64) time.Duration { return time.Duration(total.Latencies[min(n-1, int(p*float64(n)))]) }
		fmt.Fprintf(stdout, "unary echo latency: p50 %v, p99 %v, max %v (sample of %d)\n",
			q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond), n)
	}
	fmt.Fprintf(stdout, "server       start    peak     end\n")
	fmt.Fprintf(stdout, "goroutines %7d %7d %7d\n", ext.start.Goroutines, ext.peak.Goroutines, ext.end.Goroutines)
	fmt.Fprintf(stdout, "fds        %7d %7d %7d\n", ext.start.FDs, ext.peak.FDs, ext.end.FDs)
	fmt.Fprintf(stdout, "rss MiB    %7.1f %7.1f %7.1f\n", mib(ext.start.RSS), mib(ext.peak.RSS), mib(ext.end.RSS))
	fmt.Fprintf(stdout, "conns      %7d %7d %7d   (the monitor's own connection included; back to start %v after the clients ended)\n",
		ext.start.Conns, ext.peak.Conns, ext.end.Conns, recovered.Round(10*time.Millisecond))
	if ext.end.Goroutines > ext.start.Goroutines+goroutineSlack || ext.end.FDs > ext.start.FDs+fdSlack || ext.end.Conns > ext.start.Conns {
		problems = append(problems, fmt.Sprintf("server leaked: goroutines %d -> %d, fds %d -> %d, conns %d -> %d",
			ext.start.Goroutines, ext.end.Goroutines, ext.start.FDs, ext.end.FDs, ext.start.Conns, ext.end.Conns))
	}
	if total.Wrong > 0 {
		problems = append(problems, fmt.Sprintf("%d wrong replies", total.Wrong))
	}
	if statErr != nil && ext.end.Goroutines == 0 {
		problems = append(problems, "server stats: "+statErr.Error())
	}
	if srvErr != nil {
		problems = append(problems, fmt.Sprintf("server exit: %v", srvErr))
	}
	if calls == 0 {
		problems = append(problems, "no calls were made")
	}
	fmt.Fprintf(stdout, "wrong %d\n", total.Wrong)
	fmt.Fprintf(stdout, "lost %d duplicated %d\n", total.Lost, total.Duplicated)
	if total.Lost != 0 || total.Duplicated != 0 {
		problems = append(problems, fmt.Sprintf("lost %d, duplicated %d", total.Lost, total.Duplicated))
	}
	if len(problems) > 0 {
		return fmt.Errorf("soak failed: %s", strings.Join(problems, "; "))
	}
	return nil
}

// Slack in the leak check: the monitor's calls and the runtime's own.
const (
	goroutineSlack = 8
	fdSlack        = 2
)

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

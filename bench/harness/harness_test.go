package harness

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/bench/report"
	"github.com/warrenipc/warren/bench/systems"
)

// childEnv makes the test binary a server child, as -serve-child makes
// cmd/compare one.
const childEnv = "BENCH_HARNESS_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		system, dir, _ := strings.Cut(v, ":")
		if err := ServeChild(system, dir, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func testChild(system, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+system+":"+dir)
	return cmd
}

var tiny = Params{
	UnaryPayloads: []int{1024, 100 << 10},
	UnaryCallers:  4,
	UnaryCalls:    40,
	SeqCalls:      20,
	TputWrites:    []int{64 << 10},
	TputBytes:     1 << 20,
	StreamMsgs:    4,
	Reps:          2,
}

// TestRunInProcess runs every scenario and system for a few calls and
// checks the rows.
func TestRunInProcess(t *testing.T) {
	// The scenarios of this file's checks; others (idle) have their own tests.
	results := runTiny(t, Config{Params: tiny, InProcess: true, Scenarios: []string{"unary", "seqrtt", "rawlat", "rawtput", "stream"}})
	checkResults(t, results, "inprocess")
}

// TestRunSeparate runs servers in child processes (this test binary
// re-executed), and checks that Close stops them and removes the sockets.
func TestRunSeparate(t *testing.T) {
	results := runTiny(t, Config{Params: tiny, Only: []string{"warren", "drpc", "raw"}, Scenarios: []string{"unary", "rawtput", "stream"}, Child: testChild})
	checkResults(t, results, "separate")
}

func runTiny(t *testing.T, cfg Config) []Result {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close() // also on failure
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	results, err := h.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var children []*exec.Cmd
	for _, s := range h.env.servers.m {
		if s.cmd != nil {
			children = append(children, s.cmd)
		}
	}
	if !cfg.InProcess && len(children) == 0 {
		t.Error("no server child was started")
	}
	h.Close()
	h.Close() // idempotent
	for _, c := range children {
		if c.ProcessState == nil || !c.ProcessState.Exited() || c.ProcessState.ExitCode() != 0 {
			t.Errorf("server child %v: %v", c.Args, c.ProcessState)
		}
	}
	if _, err := os.Stat(h.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket directory left behind: %v", err)
	}
	return results
}

func checkResults(t *testing.T, results []Result, mode string) {
	t.Helper()
	for _, res := range results {
		if len(res.Rows) == 0 {
			t.Errorf("scenario %s has no rows", res.Scenario.Name)
		}
		for _, r := range res.Rows {
			name := res.Scenario.Name + "/" + r.System + "/" + r.Transport + "/" + report.Size(r.PayloadBytes)
			if r.Scenario != res.Scenario.Name || r.Mode != mode || r.Reps != tiny.Reps || r.Note != "" && strings.HasPrefix(r.Note, "FAILED") {
				t.Errorf("%s: row %+v", name, r)
			}
			switch r.Scenario {
			case "unary", "seqrtt", "rawlat":
				peer := strings.HasPrefix(r.System, "iceoryx2-") // python3 processes: no allocation counts
				if r.RPS <= 0 || r.P50US <= 0 || r.P99US < r.P50US || r.MinUS > r.P50US || r.MaxUS < r.P99US || r.AllocsPerCall == nil && !peer {
					t.Errorf("%s: row %+v", name, r)
				}
				if r.System == "warren" && *r.AllocsPerCall < 0.5 {
					t.Errorf("%s: %.2f allocations per call, client and server: the server's are not counted", name, *r.AllocsPerCall)
				}
			case "rawtput", "stream":
				if r.GBps <= 0 {
					t.Errorf("%s: row %+v", name, r)
				}
			}
			if r.System == "drpc" && r.Scenario == "unary" && r.Conns != tiny.UnaryCallers {
				t.Errorf("%s: drpc with %d connections for %d callers", name, r.Conns, tiny.UnaryCallers)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Params: tiny, InProcess: true, Only: []string{"corba"}},
		{Params: tiny, InProcess: true, Scenarios: []string{"nope"}},
		{Params: tiny}, // no Child
		{Params: Params{Reps: 0}, InProcess: true}, // no repetitions
	} {
		if h, err := New(cfg); err == nil {
			h.Close()
			t.Errorf("New(%+v) did not fail", cfg)
		}
	}
}

// liar is a system whose echo returns the right length with the wrong
// bytes after the first calls: the harness must refuse its numbers.
type liar struct{ systems.Raw }

func (liar) Name() string { return "liar" }

func (l liar) Dial(ctx context.Context, network, address string) (systems.Conn, error) {
	c, err := l.Raw.Dial(ctx, network, address)
	return liarConn{c}, err
}

type liarConn struct{ systems.Conn }

func (c liarConn) Caller() systems.Caller { return &liarCaller{Caller: c.Conn.Caller()} }

type liarCaller struct {
	systems.Caller
	n int
}

func (c *liarCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	if c.n++; c.n > 8 {
		return make([]byte, len(req)), nil
	}
	return c.Caller.Echo(ctx, req)
}

func TestBrokenEchoIsCaught(t *testing.T) {
	dir := t.TempDir()
	srv, err := serve(systems.Raw{}, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	_, err = unary(context.Background(), liar{}, srv, "unix", 128, 1, 200, 0)
	if err == nil || !strings.Contains(err.Error(), "different bytes") {
		t.Errorf("a lying echo gave %v", err)
	}
}

// TestCancel checks that canceling the context ends a run promptly, even
// for net/rpc, whose calls take no context.
func TestCancel(t *testing.T) {
	p := tiny
	p.UnaryCalls = 1_000_000 // about a minute
	h, err := New(Config{Params: p, InProcess: true, Only: []string{"netrpc"}, Scenarios: []string{"unary"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := h.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v to stop", d)
	}
}

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	samples := []Sample{
		{Elapsed: time.Second, Calls: 4, Lat: ms(1, 2, 3, 4), HaveAllocs: true, Allocs: 8, AllocBytes: 400},
		{Elapsed: 2 * time.Second, Calls: 4, Lat: ms(2, 2, 2, 2), HaveAllocs: true, Allocs: 4, AllocBytes: 40},
		{Elapsed: time.Second / 2, Calls: 4, Lat: ms(1, 1, 1, 9), HaveAllocs: true, Allocs: 40, AllocBytes: 4000},
	}
	var r report.Row
	Summarize(&r, samples)
	if r.RPS != 4 || r.RPSMin != 2 || r.RPSMax != 8 || r.Reps != 3 || r.Calls != 4 {
		t.Errorf("rps %v [%v-%v] reps %d calls %d", r.RPS, r.RPSMin, r.RPSMax, r.Reps, r.Calls)
	}
	if r.MinUS != 1000 || r.MaxUS != 9000 || r.P50US != 1000*2 || r.MeanUS != 2500 {
		t.Errorf("latency min %v max %v p50 %v mean %v", r.MinUS, r.MaxUS, r.P50US, r.MeanUS)
	}
	if *r.AllocsPerCall != 2 || *r.BytesPerCall != 100 {
		t.Errorf("allocs %v bytes %v", *r.AllocsPerCall, *r.BytesPerCall)
	}
	var tp report.Row
	Summarize(&tp, []Sample{{Elapsed: time.Second, Bytes: 3e9}, {Elapsed: time.Second, Bytes: 1e9}})
	if tp.GBps != 2 || tp.GBpsMin != 1 || tp.GBpsMax != 3 || tp.RPS != 0 || tp.AllocsPerCall != nil {
		t.Errorf("throughput row %+v", tp)
	}
}

func TestCallsFor(t *testing.T) {
	for _, c := range []struct {
		calls, callers, n int
		d, min            time.Duration
		want              int
	}{
		{10000, 16, 1600, 10 * time.Millisecond, 0, 10000},                      // no minimum
		{10000, 16, 1600, 10 * time.Millisecond, 500 * time.Millisecond, 80000}, // 160,000/s for 0.5 s
		{10000, 16, 1000, 10 * time.Millisecond, 500 * time.Millisecond, 50000}, // 100,000/s
		{10000, 16, 1001, 10 * time.Millisecond, 500 * time.Millisecond, 50064}, // rounded up to 16s
		{10000, 16, 160, 100 * time.Millisecond, 500 * time.Millisecond, 10000}, // slow: calls last longer already
		{10000, 16, 0, 0, 500 * time.Millisecond, 10000},                        // no warm-up measured
	} {
		if got := callsFor(c.calls, c.callers, c.n, c.d, c.min); got != c.want {
			t.Errorf("callsFor(%d, %d, %d, %v, %v) = %d, want %d", c.calls, c.callers, c.n, c.d, c.min, got, c.want)
		}
	}
}

// TestServeChildProtocol drives a child in this process through its pipes.
func TestServeChildProtocol(t *testing.T) {
	dir := t.TempDir()
	inR, inW := net.Pipe()
	outR, outW := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- ServeChild("warren", dir, inR, outW); outW.Close() }()
	buf := make([]byte, 256)
	n, _ := outR.Read(buf)
	if line := string(buf[:n]); !strings.HasPrefix(line, "ready unix="+filepath.Join(dir, "warren.sock")+" tcp=127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	inW.Write([]byte("mem\n"))
	n, _ = outR.Read(buf)
	if f := strings.Fields(string(buf[:n])); len(f) != 6 || f[0] != "mem" {
		t.Errorf("mem answer %q", buf[:n])
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "warren.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
}

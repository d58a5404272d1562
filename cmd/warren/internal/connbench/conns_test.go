//go:build linux

package connbench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testSys runs the children as this test binary (see TestMain).
func testSys(env ...string) sysDeps {
	s := defaultSys(os.Args[0], nil)
	s.env = append([]string{childEnv + "=1"}, env...)
	return s
}

// syncBuffer is a bytes.Buffer safe for concurrent writes, with a hook
// called with each write.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.onLine != nil {
		b.onLine(string(p))
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newBench is runConns with the bench kept, so that tests can look at its
// children and directory afterwards.
func newBench(t *testing.T, sys sysDeps, stdout, stderr *syncBuffer, args ...string) *bench {
	t.Helper()
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		t.Fatal(err)
	}
	return &bench{cfg: cfg, sys: sys, out: stdout, errw: stderr, connCost: priorConnCost, procCost: priorProcCost}
}

// checkCleanedUp checks that every child has exited and been reaped and
// that the socket directory is gone.
func checkCleanedUp(t *testing.T, b *bench) {
	t.Helper()
	for _, c := range b.children {
		select {
		case <-c.done:
		default:
			t.Errorf("%s is still running", c.name)
		}
		if err := syscall.Kill(c.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: kill(pid, 0) = %v, want ESRCH", c.name, err)
		}
	}
	if b.dir == "" {
		t.Error("no socket directory was made")
	} else if _, err := os.Stat(b.dir); !os.IsNotExist(err) {
		t.Errorf("socket directory %s: %v, want it removed", b.dir, err)
	}
}

// TestPipeline runs the whole benchmark small: 2000 connections over two
// shards of at most 1000, in two steps, two rounds each.
func TestPipeline(t *testing.T) {
	var stdout, stderr syncBuffer
	b := newBench(t, testSys(), &stdout, &stderr,
		"--total", "2000", "--per-shard", "1000", "--rounds", "2", "--window", "64",
		"--settle", "300ms", "--timeout", "50s", "--margin", "64MiB")
	err := b.run(context.Background())
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatal(err)
	}
	checkCleanedUp(t, b)
	if len(b.children) != 4 {
		t.Errorf("%d children, want 4 (2 servers, 2 clients)", len(b.children))
	}
	if len(b.rows) != 2 || b.rows[0].conns != 1000 || b.rows[0].shards != 1 || b.rows[1].conns != 2000 || b.rows[1].shards != 2 {
		t.Fatalf("rows %+v, want steps 1000 (1 shard) and 2000 (2 shards)", b.rows)
	}
	for _, s := range b.shards {
		if s.conns != 1000 {
			t.Errorf("%s: %d connections, want 1000", s.cli.name, s.conns)
		}
	}
	// Every round checked the servers' counts; the log says so.
	for _, want := range []string{
		"round 0: 1000 calls", "round 1: 1000 calls", "round 2: 2000 calls", "round 3: 2000 calls",
		"add up to 2000 = connections",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if !strings.Contains(stdout.String(), "All 2000 connections were live in every round.") {
		t.Error("stdout lacks the verdict")
	}
	checkChildrenQuiet(t, stderr.String())
}

// checkChildrenQuiet checks that no child reported an error or had to be
// forced out.
func checkChildrenQuiet(t *testing.T, stderr string) {
	t.Helper()
	for _, bad := range []string{"error:", "input closed: exiting", "level=WARN", "level=ERROR"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("stderr has %q", bad)
		}
	}
}

// TestPipelineNetworks runs the benchmark small over tcp and WebSocket:
// each shard's server on a port of its own, each client from a source
// address of its own, every connection live every round.
func TestPipelineNetworks(t *testing.T) {
	for _, network := range []string{netTCP, netWS} {
		t.Run(network, func(t *testing.T) {
			var stdout, stderr syncBuffer
			b := newBench(t, testSys(), &stdout, &stderr, "--network", network,
				"--total", "300", "--per-shard", "150", "--rounds", "2", "--window", "32",
				"--settle", "0", "--timeout", "30s", "--margin", "64MiB")
			err := b.run(context.Background())
			if err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
			}
			checkCleanedUp(t, b)
			if len(b.rows) != 1 || b.rows[0].conns != 300 || b.rows[0].shards != 2 {
				t.Errorf("rows %+v, want one step of 300 connections over 2 shards", b.rows)
			}
			for _, want := range []string{"round 0: 300 calls", "round 1: 300 calls", "add up to 300 = connections"} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q", want)
				}
			}
			out := stdout.String()
			for _, want := range []string{"300 " + network + " connections over 2 shards", "(127.0.1.1, 127.0.2.1, ...", "All 300 connections were live in every round."} {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			checkChildrenQuiet(t, stderr.String())
		})
	}
}

// TestPipelineGoroutineMode runs the servers a goroutine per connection.
func TestPipelineGoroutineMode(t *testing.T) {
	var stdout, stderr syncBuffer
	b := newBench(t, testSys(), &stdout, &stderr,
		"--total", "300", "--per-shard", "200", "--mode", "goroutine", "--rounds", "1",
		"--settle", "0", "--timeout", "30s", "--margin", "64MiB")
	err := b.run(context.Background())
	if err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	checkCleanedUp(t, b)
	if len(b.rows) != 1 || b.rows[0].shards != 2 || b.rows[0].goroutines < 300 {
		t.Errorf("rows %+v, want one step over 2 shards with a goroutine per connection", b.rows)
	}
	checkChildrenQuiet(t, stderr.String())
}

// TestMemoryGuardRefuses: with MemAvailable just over the margin, the first
// step's estimate does not fit and the run refuses before starting a
// process.
func TestMemoryGuardRefuses(t *testing.T) {
	sys := testSys()
	sys.memAvailable = func() (uint64, error) { return 2<<30 + 10<<20, nil }
	var stdout, stderr syncBuffer
	b := newBench(t, sys, &stdout, &stderr, "--total", "2000", "--per-shard", "1000", "--timeout", "20s")
	err := b.run(context.Background())
	if !errors.Is(err, errLowMemory) || !strings.Contains(err.Error(), "refusing to go to 1000 connections") {
		t.Fatalf("run = %v, want a refusal for lack of memory", err)
	}
	t.Log(err)
	if len(b.children) != 0 {
		t.Errorf("%d children started, want none", len(b.children))
	}
	checkCleanedUp(t, b)
}

// TestMemoryEstimate: the guard's estimate of a connection is what the
// step measured (+25%), with the drop of MemAvailable counted up to twice
// that: others' memory on a shared machine does not stop the run.
func TestMemoryEstimate(t *testing.T) {
	b := &bench{}
	for _, tt := range []struct {
		peak uint64
		want uint64
	}{{0, 12500}, {5000, 12500}, {15000, 18750}, {1 << 20, 25000}} {
		b.estimate(row{kernel: 9000, srvRSS: 900, cliRSS: 100}, tt.peak)
		if b.connCost != tt.want {
			t.Errorf("peak %d: estimate %d, want %d", tt.peak, b.connCost, tt.want)
		}
	}
	b.estimate(row{}, 3000)
	if b.connCost != 3750 {
		t.Errorf("no measurement, peak 3000: estimate %d, want 3750", b.connCost)
	}
}

// TestMemoryGuardStops: the estimate from the first step refuses the
// second, and the run stops after the first, cleaning up.
func TestMemoryGuardStops(t *testing.T) {
	sys := testSys()
	var mu sync.Mutex
	avail := uint64(3 << 30)
	sys.memAvailable = func() (uint64, error) {
		mu.Lock()
		defer mu.Unlock()
		return avail, nil
	}
	// The connections of the first step cost 512 KiB each, in the kernel.
	var slab uint64
	sys.meminfo = func() (map[string]uint64, error) {
		m, err := readKB("/proc/meminfo")
		mu.Lock()
		defer mu.Unlock()
		m["Slab"] += slab
		return m, err
	}
	var stdout, stderr syncBuffer
	stderr.onLine = func(s string) {
		if strings.Contains(s, "connections open") {
			mu.Lock()
			avail -= 200 * 512 << 10
			slab += 200 * 512 << 10
			mu.Unlock()
		}
	}
	b := newBench(t, sys, &stdout, &stderr, "--total", "2000", "--steps", "200", "--per-shard", "1000",
		"--rounds", "1", "--settle", "250ms", "--timeout", "30s")
	err := b.run(context.Background())
	if !errors.Is(err, errLowMemory) || !strings.Contains(err.Error(), "refusing to go to 2000 connections") {
		t.Fatalf("run = %v, want a refusal of the second step", err)
	}
	t.Log(err)
	if len(b.rows) != 1 {
		t.Errorf("%d steps measured, want 1", len(b.rows))
	}
	checkCleanedUp(t, b)
}

// TestChildDies: a server that dies in the middle of the run stops it, and
// the rest are cleaned up.
func TestChildDies(t *testing.T) {
	var stdout, stderr syncBuffer
	b := newBench(t, testSys(dieEnv+"=1"), &stdout, &stderr,
		"--total", "100", "--per-shard", "50", "--rounds", "3", "--settle", "0", "--timeout", "30s")
	err := b.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("run = %v, want a child that exited", err)
	}
	t.Log(err)
	checkCleanedUp(t, b)
}

// TestInterrupted: cancelling the run (Ctrl-C) in the middle stops and
// cleans up.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	stderr.onLine = func(s string) {
		if strings.Contains(s, "round 0:") {
			cancel()
		}
	}
	b := newBench(t, testSys(), &stdout, &stderr,
		"--total", "100", "--per-shard", "50", "--rounds", "3", "--settle", "10s", "--timeout", "30s")
	start := time.Now()
	err := b.run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("run took %v to stop", d)
	}
	checkCleanedUp(t, b)
}

func TestParseConfig(t *testing.T) {
	var stderr syncBuffer
	cfg, err := parseConfig(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1000, 10000, 100000, 1000000}; !equalInts(cfg.steps, want) || cfg.margin != 2<<30 || cfg.perShard != 19000 || cfg.mode != modeEventLoop {
		t.Errorf("defaults %+v", cfg)
	}
	cfg, err = parseConfig([]string{"--total", "2500", "--steps", "10,2000", "--margin", "512MiB"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !equalInts(cfg.steps, []int{10, 2000, 2500}) || cfg.margin != 512<<20 {
		t.Errorf("got %+v", cfg)
	}
	for _, args := range [][]string{
		{"--mode", "threads"}, {"--network", "udp"}, {"--steps", "100,50"}, {"--total", "10", "--steps", "20"}, {"--margin", "lots"}, {"--total", "0"}, {"extra"},
	} {
		if _, err := parseConfig(args, &stderr); err == nil {
			t.Errorf("parseConfig(%q) succeeded", args)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

package connbench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func mainOS(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || !IsCommand(args[0]) {
		return fmt.Errorf("connbench: unknown command %q (want %s)", strings.Join(args[:min(len(args), 1)], ""), cmdConns)
	}
	switch args[0] {
	case cmdServer:
		return childMain(serverMain, args[1:], stdout, stderr)
	case cmdClient:
		return childMain(clientMain, args[1:], stdout, stderr)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to run its children: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runConns(ctx, args[1:], stdout, stderr, defaultSys(exe, []string{"bench"}))
}

// childGrace is how long a child may take to finish its command once its
// stdin has closed before it exits anyway.
const childGrace = 15 * time.Second

// childMain runs a child's main function with os.Stdin, and makes sure the
// process ends soon after its stdin closes (the orchestrator is gone or
// stopping) or it gets SIGTERM (its parent-death signal) or SIGINT, even if
// a command is still running: the function sees the end of its input, and
// has childGrace to return (a server closes its listener, which removes the
// socket file).
func childMain(fn func(args []string, stdin io.Reader, stdout, stderr io.Writer) error, args []string, stdout, stderr io.Writer) error {
	r, w := io.Pipe()
	end := sync.OnceFunc(func() {
		w.Close()
		time.AfterFunc(childGrace, func() {
			fmt.Fprintln(stderr, "input closed: exiting")
			os.Exit(3)
		})
	})
	go func() {
		io.Copy(w, os.Stdin)
		end()
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		end()
	}()
	return fn(args, r, stdout, stderr)
}

// sysDeps is what the orchestrator takes from its environment, so that
// tests can replace it.
type sysDeps struct {
	exe          string   // the program to run as children
	prefix       []string // arguments before the child command
	env          []string // added to the children's environment
	memAvailable func() (uint64, error)
	meminfo      func() (map[string]uint64, error)
	noFile       func() (uint64, error) // raises RLIMIT_NOFILE, returns the soft limit
}

func defaultSys(exe string, prefix []string) sysDeps {
	return sysDeps{
		exe: exe, prefix: prefix,
		memAvailable: memAvailable,
		meminfo:      func() (map[string]uint64, error) { return readKB("/proc/meminfo") },
		noFile:       raiseNoFile,
	}
}

const (
	priorConnCost = 32 << 10
	priorProcCost = 32 << 20
	reserveFDs    = 64 // descriptors each child keeps for itself
)

// errLowMemory is why the run stopped for lack of memory.
var errLowMemory = errors.New("not enough memory")

// shard is one server process and its client process.
type shard struct {
	path            string
	srv, cli        *child
	srvBase         procMem
	cliBase         procMem
	conns           int // connections open
	rss, anon       uint64
	cliRSS, cliAnon uint64
	goroutines      int
}

// bench is one run of `bench conns`.
type bench struct {
	cfg    config
	sys    sysDeps
	out    io.Writer
	errw   io.Writer
	logMu  sync.Mutex // serializes writes to errw (progress and the children's stderr)
	ctx    context.Context
	cancel context.CancelCauseFunc
	dir    string

	shards   []*shard
	children []*child
	round    uint32 // the next round's number

	connCost, procCost uint64 // estimates, bytes
	limits             kernelLimits
	raisedNoFile       string // how RLIMIT_NOFILE was raised, if it was
	ct0                uint64 // nf_conntrack_count at the start
	minAvail           atomic.Uint64
	mem0               map[string]uint64
	avail0             uint64
	slab0              map[string]int64
	rows               []row
}

// row is what one step measured.
type row struct {
	conns, shards      int
	connectRate        float64
	roundMin, roundMax time.Duration
	srvRSS, srvAnon    float64 // bytes per connection
	cliRSS             float64
	kernel             float64
	kernelSock         float64 // the socket caches' part of kernel (-1: unknown)
	availDrop          float64
	goroutines         int
	slab               []slabDelta
}

type slabDelta struct {
	name    string
	aliases []string // socket caches merged into this one
	bytes   int64
}

func runConns(parent context.Context, args []string, stdout, stderr io.Writer, sys sysDeps) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	b := &bench{cfg: cfg, sys: sys, out: stdout, errw: stderr, connCost: priorConnCost, procCost: priorProcCost}
	return b.run(parent)
}

func (b *bench) logf(format string, args ...any) {
	b.logMu.Lock()
	defer b.logMu.Unlock()
	fmt.Fprintf(b.errw, "conns: "+format+"\n", args...)
}

func (b *bench) run(parent context.Context) (err error) {
	cfg := &b.cfg
	ctx, cancelTimeout := context.WithTimeoutCause(parent, cfg.timeout, fmt.Errorf("the run time limit (--timeout %v) was reached", cfg.timeout))
	defer cancelTimeout()
	b.ctx, b.cancel = context.WithCancelCause(ctx)
	defer b.cancel(nil)

	// Descriptors: each shard's processes hold its connections, one end
	// each; the system holds both ends of every connection.
	defer func() {
		done, rerr := b.limits.restore()
		if done != "" {
			fmt.Fprintf(b.out, "limits restored: %s\n", done)
		}
		err = errors.Join(err, rerr)
	}()
	if cfg.raiseNoFile {
		if b.raisedNoFile, err = b.limits.noFile(uint64(min(cfg.perShard, cfg.total) + reserveFDs)); err != nil {
			return err
		}
	}
	nofile, err := b.sys.noFile()
	if err != nil {
		return err
	}
	if nofile <= reserveFDs {
		return fmt.Errorf("the open-file limit (RLIMIT_NOFILE) is %d: too low to hold connections", nofile)
	}
	if fit := int(nofile - reserveFDs); cfg.perShard > fit {
		b.logf("--per-shard %d lowered to %d to fit the open-file limit %d", cfg.perShard, fit, nofile)
		cfg.perShard = fit
	}
	nshards := (cfg.total + cfg.perShard - 1) / cfg.perShard
	if err := b.raiseLimits(nshards); err != nil {
		return err
	}

	b.dir, err = os.MkdirTemp(cfg.dir, "warren-conns-")
	if err != nil {
		return err
	}
	defer func() {
		n := len(b.children)
		stopChildren(b.children, childGrace+5*time.Second)
		if rerr := os.RemoveAll(b.dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		b.logf("stopped %d processes, removed %s", n, b.dir)
	}()

	fmt.Fprintf(b.out, "warren bench conns: %d %s connections over %s (a server process and a client process each) of at most %d connections\n",
		cfg.total, cfg.network, plural(nshards, "shard"), cfg.perShard)
	if cfg.network != netUnix {
		fmt.Fprintf(b.out, "each shard: a server port of its own on 127.0.0.1; its client connects from source addresses of its own (%s, %s, ... and the next address every %d connections)\n",
			sourceAddr(0), sourceAddr(1), perSource)
	}
	if b.raisedNoFile != "" || len(b.limits.changed) > 0 {
		fmt.Fprintf(b.out, "limits raised for the run: %s\n", strings.Trim(b.raisedNoFile+", "+joinChanges(b.limits.changed), ", "))
	}
	fmt.Fprintf(b.out, "open-file limit per process %d (soft limit raised to the hard one); server mode %s; %d rounds per step; window %d; memory margin %s\n\n",
		nofile, cfg.mode, cfg.rounds, cfg.window, fmtBytes(float64(cfg.margin)))

	if b.mem0, err = b.sys.meminfo(); err != nil {
		return err
	}
	if b.avail0, err = b.sys.memAvailable(); err != nil {
		return err
	}
	b.slab0, _ = slabCaches()
	b.minAvail.Store(b.avail0)
	stopWatch := b.watchMemory()
	defer stopWatch()

	b.printHeader()
	start := time.Now()
	defer func() { fmt.Fprintf(b.out, "run time %v\n", time.Since(start).Round(time.Second)) }()
	for _, n := range cfg.steps {
		if err := b.step(n); err != nil {
			b.report(false)
			if c := context.Cause(b.ctx); c != nil && !errors.Is(err, c) {
				err = fmt.Errorf("%w (%v)", err, c)
			}
			return fmt.Errorf("stopped at the step to %d connections: %w", n, err)
		}
	}
	b.report(true)
	return nil
}

// watchMemory samples MemAvailable until the returned function is called:
// it keeps the lowest value seen (for the next estimate), and cancels the
// run if the value falls under the margin.
func (b *bench) watchMemory() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			b.sampleMem()
		}
	})
	return func() { close(done); wg.Wait() }
}

// sampleMem reads MemAvailable, keeps the lowest value seen and cancels the
// run if it is under the margin.
func (b *bench) sampleMem() {
	v, err := b.sys.memAvailable()
	if err != nil {
		return
	}
	for {
		m := b.minAvail.Load()
		if v >= m || b.minAvail.CompareAndSwap(m, v) {
			break
		}
	}
	if v < b.cfg.margin {
		b.cancel(fmt.Errorf("%w: MemAvailable fell to %s, under the margin %s", errLowMemory, fmtBytes(float64(v)), fmtBytes(float64(b.cfg.margin))))
	}
}

// step brings the run to n connections, runs the rounds and measures.
func (b *bench) step(n int) error {
	cfg := &b.cfg
	cur := 0
	for _, s := range b.shards {
		cur += s.conns
	}
	added := n - cur
	k := (n + cfg.perShard - 1) / cfg.perShard
	newProcs := 2 * max(0, k-len(b.shards))

	// The memory guard.
	avail, err := b.sys.memAvailable()
	if err != nil {
		return err
	}
	need := uint64(added)*b.connCost + uint64(newProcs)*b.procCost
	if avail < cfg.margin || avail-cfg.margin < need {
		return fmt.Errorf("%w: refusing to go to %d connections: it needs about %s (%d connections x %s + %d processes x %s, estimated %s), MemAvailable is %s and the margin (--margin) %s",
			errLowMemory, n, fmtBytes(float64(need)), added, fmtBytes(float64(b.connCost)), newProcs, fmtBytes(float64(b.procCost)),
			b.estimateSource(), fmtBytes(float64(avail)), fmtBytes(float64(cfg.margin)))
	}
	b.logf("step to %d connections over %s: needs about %s, MemAvailable %s", n, plural(k, "shard"), fmtBytes(float64(need)), fmtBytes(float64(avail)))

	// New shards.
	for len(b.shards) < k {
		if err := b.startShard(len(b.shards)); err != nil {
			return err
		}
	}
	afterProcs, err := b.sys.memAvailable()
	if err != nil {
		return err
	}
	if newProcs > 0 && afterProcs < avail {
		b.procCost = max((avail-afterProcs)/uint64(newProcs)*5/4, 4<<20)
	}
	b.minAvail.Store(afterProcs)

	if err := b.raiseConntrack(added); err != nil {
		return err
	}

	// Connect: top up each shard towards an even share of n.
	add := make([]int, k)
	left := added
	for i := 0; i < k && left > 0; i++ {
		target := n / k
		if i < n%k {
			target++
		}
		add[i] = min(max(0, target-b.shards[i].conns), left)
		left -= add[i]
	}
	b.logf("connecting %d more connections", added)
	start := time.Now()
	err = b.parallel(k, func(i int) error {
		if add[i] == 0 {
			return nil
		}
		s := b.shards[i]
		f, err := s.cli.call(b.ctx, fmt.Sprintf("connect %d", add[i]))
		if err != nil {
			return err
		}
		if got, _ := strconv.Atoi(f[0]); got != s.conns+add[i] {
			return fmt.Errorf("%s has %d connections, want %d", s.cli.name, got, s.conns+add[i])
		}
		s.conns = s.conns + add[i]
		return nil
	})
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	r := row{conns: n, shards: k, connectRate: float64(added) / time.Since(start).Seconds()}
	b.logf("%d connections open (%.0f connections/s)", n, r.connectRate)

	// Rounds.
	for range cfg.rounds {
		d, err := b.runRound(n, k)
		if err != nil {
			return err
		}
		if r.roundMin == 0 || d < r.roundMin {
			r.roundMin = d
		}
		r.roundMax = max(r.roundMax, d)
	}
	b.sampleMem()
	peak := uint64(0) // the drop of MemAvailable during the step, per connection added
	if m := b.minAvail.Load(); m < afterProcs && added > 0 {
		peak = (afterProcs - m) / uint64(added)
	}

	// Memory, once the sessions and workers of the rounds are gone.
	b.logf("waiting %v for the servers to go idle, then measuring memory", cfg.settle)
	select {
	case <-time.After(cfg.settle):
	case <-b.ctx.Done():
		return context.Cause(b.ctx)
	}
	if err := b.measure(&r); err != nil {
		return err
	}
	b.estimate(r, peak)
	b.rows = append(b.rows, r)
	b.printRow(r)
	return nil
}

// estimate sets the cost of a connection for the memory guard from the
// step just measured: what the run's own processes and the kernel were
// measured to hold per connection, +25%. The drop of MemAvailable during
// the step (peak) counts only as far as it is not more than twice that: on
// a shared machine, MemAvailable also falls with everyone else's memory,
// which no estimate of the run's can include (the watchdog still stops the
// run if MemAvailable falls under the margin).
func (b *bench) estimate(r row, peak uint64) {
	own := max(r.kernel, 0) + max(r.srvRSS, 0) + max(r.cliRSS, 0)
	if own <= 0 {
		own = float64(peak)
	}
	b.connCost = max(uint64(max(own, min(float64(peak), 2*own))*5/4), 1<<10)
}

func (b *bench) estimateSource() string {
	if len(b.rows) == 0 {
		return "a deliberately high guess before any measurement"
	}
	return fmt.Sprintf("from the step to %d connections, +25%%", b.rows[len(b.rows)-1].conns)
}

func (b *bench) startShard(i int) error {
	s := &shard{path: filepath.Join(b.dir, fmt.Sprintf("s%d.sock", i))}
	addr := "unix://" + s.path
	switch b.cfg.network {
	case netTCP:
		addr = "tcp://127.0.0.1:0"
	case netWS:
		addr = "ws://127.0.0.1:0/conns"
	}
	start := func(name string, args ...string) (*child, []string, error) {
		c, err := startChild(name, b.sys.exe, append(slices.Clip(b.sys.prefix), args...), b.sys.env,
			&linePrefixer{mu: &b.logMu, w: b.errw, prefix: name + ": "}, func(err error) { b.cancel(err) })
		if err != nil {
			return nil, nil, err
		}
		b.children = append(b.children, c)
		f, err := c.reply(b.ctx)
		if err == nil && len(f) < 2 || strings.HasPrefix(name, "server") && len(f) < 4 {
			err = fmt.Errorf("%s: bad ready line %q", c.name, f)
		}
		return c, f, err
	}
	var f []string
	var err error
	srvArgs := []string{cmdServer, "--addr", addr, "--mode", b.cfg.mode}
	if b.cfg.heapDir != "" {
		srvArgs = append(srvArgs, "--heap-profile", filepath.Join(b.cfg.heapDir, fmt.Sprintf("server-%d", i)))
	}
	if s.srv, f, err = start(fmt.Sprintf("server %d", i), srvArgs...); err != nil {
		return err
	}
	s.srvBase = procMem{RSS: atou(f[0]), Anon: atou(f[1])}
	cliArgs := []string{cmdClient, "--addr", f[3], "--window", strconv.Itoa(b.cfg.window), "--io-timeout", b.cfg.ioTimeout.String()}
	if b.cfg.network != netUnix {
		cliArgs = append(cliArgs, "--source", sourceAddr(i).String())
	}
	if s.cli, f, err = start(fmt.Sprintf("client %d", i), cliArgs...); err != nil {
		return err
	}
	s.cliBase = procMem{RSS: atou(f[0]), Anon: atou(f[1])}
	b.shards = append(b.shards, s)
	return nil
}

// runRound makes every connection call Conns.Tick once and checks that each
// server counted exactly the calls of its shard's connections.
func (b *bench) runRound(n, k int) (time.Duration, error) {
	r := b.round
	b.round++
	start := time.Now()
	err := b.parallel(k, func(i int) error {
		s := b.shards[i]
		f, err := s.cli.call(b.ctx, fmt.Sprintf("round %d", r))
		if err != nil {
			return err
		}
		if got, _ := strconv.Atoi(f[0]); got != s.conns {
			return fmt.Errorf("%s made %d calls, want %d", s.cli.name, got, s.conns)
		}
		return nil
	})
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("round %d: %w", r, err)
	}
	counts := make([]int, k)
	err = b.parallel(k, func(i int) error {
		f, err := b.shards[i].srv.call(b.ctx, "count")
		if err == nil {
			counts[i], err = strconv.Atoi(f[0])
		}
		return err
	})
	if err != nil {
		return d, fmt.Errorf("round %d: %w", r, err)
	}
	sum := 0
	for i, c := range counts {
		sum += c
		if c != b.shards[i].conns {
			return d, fmt.Errorf("round %d: %s counted %d calls, want %d (its connections)", r, b.shards[i].srv.name, c, b.shards[i].conns)
		}
	}
	if sum != n {
		return d, fmt.Errorf("round %d: the servers counted %d calls in all, want %d", r, sum, n)
	}
	b.logf("round %d: %d calls in %v; the servers' counts add up to %d = connections", r, n, d.Round(time.Millisecond), sum)
	return d, nil
}

// measure reads the memory of every process and of the kernel into r.
func (b *bench) measure(r *row) error {
	k := r.shards
	err := b.parallel(k, func(i int) error {
		s := b.shards[i]
		f, err := s.srv.call(b.ctx, "mem")
		if err != nil {
			return err
		}
		if len(f) < 4 {
			return fmt.Errorf("%s: bad mem reply %q", s.srv.name, f)
		}
		s.rss, s.anon, s.goroutines = atou(f[0]), atou(f[1]), int(atou(f[3]))
		if conns := int(atou(f[2])); conns != s.conns {
			return fmt.Errorf("%s has %d connections, want %d", s.srv.name, conns, s.conns)
		}
		if f, err = s.cli.call(b.ctx, "mem"); err != nil {
			return err
		}
		s.cliRSS, s.cliAnon = atou(f[0]), atou(f[1])
		return nil
	})
	if err != nil {
		return fmt.Errorf("measuring memory: %w", err)
	}
	var srvRSS, srvAnon, cliRSS int64
	for _, s := range b.shards[:k] {
		srvRSS += int64(s.rss) - int64(s.srvBase.RSS)
		srvAnon += int64(s.anon) - int64(s.srvBase.Anon)
		cliRSS += int64(s.cliRSS) - int64(s.cliBase.RSS)
		r.goroutines += s.goroutines
	}
	n := float64(r.conns)
	r.srvRSS, r.srvAnon, r.cliRSS = float64(srvRSS)/n, float64(srvAnon)/n, float64(cliRSS)/n
	mem, err := b.sys.meminfo()
	if err != nil {
		return err
	}
	r.kernel = (float64(kernelBytes(mem)) - float64(kernelBytes(b.mem0))) / n
	r.availDrop = (float64(b.avail0) - float64(mem["MemAvailable"])) / n
	r.kernelSock = -1
	if slab, ok := slabCaches(); ok && b.slab0 != nil {
		groups := slabGroups()
		var sock int64
		for name, v := range slab {
			d := v - b.slab0[name]
			as := slabAliases(groups, name, socketCaches)
			if len(as) > 0 {
				sock += d
			}
			if d > 0 {
				r.slab = append(r.slab, slabDelta{name, as, d})
			}
		}
		if groups != nil {
			r.kernelSock = float64(sock) / n
		}
		slices.SortFunc(r.slab, func(x, y slabDelta) int { return cmp.Compare(y.bytes, x.bytes) })
		r.slab = r.slab[:min(len(r.slab), 6)]
	}
	return nil
}

// parallel runs fn(0..n-1) concurrently and returns the first error by
// index.
func (b *bench) parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

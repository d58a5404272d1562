package main

import (
	"bytes"
	"context"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

var demoHelp = help{
	usage: "warren demo [-calls N | -duration D] [-callers N] [-addr ADDR]",
	text: `
Start the counter service on a socket in a new private temporary directory
and drive it: concurrent callers increment one counter over warren RPC (all
on one connection), then over HTTP (Connect protocol, POST /Counter.Inc),
then over both while a Counter.Watch stream follows the counter. A progress
line shows on a terminal. The summary gives, per transport, the calls per
second, the p50 and p99 latency and the allocations per call (client and
server together, both in this process).

The demo checks its work and exits 1 if anything is wrong: a failed call,
a final count that is not the number of increments, a watch that did not
see the final value, a socket file left behind.`,
	examples: `  warren demo
  warren demo -calls 2000
  warren demo -duration 10s -callers 64`,
}

const demoCounter = "demo"

func cmdDemo(e *env, args []string) error {
	fset := newFlagSet("demo")
	addr := fset.String("addr", "", "address to serve on (default: a socket in a new private temporary directory)")
	calls := fset.Int("calls", 0, "Counter.Inc calls in all, split between the three phases (0: run for -duration)")
	duration := fset.Duration("duration", 3*time.Second, "how long to drive the service when -calls is 0 (a third per phase)")
	callers := fset.Int("callers", 16, "concurrent callers in each phase")
	_, err := parseArgs(e, fset, demoHelp, args, 0, 0)
	if err != nil {
		return err
	}
	if *calls < 0 || *callers < 1 || *duration <= 0 {
		return &usageError{cmd: "demo", msg: "-calls must be at least 0, -callers at least 1 and -duration positive"}
	}
	d := &demo{
		out:     e.stdout,
		tty:     isTerminal(e.stdout),
		calls:   int64(*calls),
		phase:   *duration / 3,
		callers: *callers,
	}
	return d.run(*addr)
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

type demo struct {
	out     io.Writer
	tty     bool
	calls   int64         // increments in all; 0: timed phases
	phase   time.Duration // length of a timed phase
	callers int

	client *rpc.Client
	http   *http.Client // rpc.HTTPClient: dials the server's address
}

// phaseResult is the outcome of one phase.
type phaseResult struct {
	name    string
	calls   int64 // calls made (messages received, for the watch)
	rpc     int64 // of which over rpc
	http    int64 // of which over http
	elapsed time.Duration
	lat     histogram
	allocs  uint64 // mallocs during the phase, whole process
}

func (d *demo) run(addr string) (err error) {
	if addr == "" {
		dir, err := os.MkdirTemp("", "warren-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		addr = "unix://" + filepath.Join(dir, "warren.sock")
	}
	l, err := transport.Listen(addr, nil) // mode 0600, same-user policy at accept
	if err != nil {
		a, perr := transport.ParseAddr(addr)
		if perr != nil {
			return &usageError{cmd: "demo", msg: trimWarren(perr.Error())}
		}
		return listenError(a, err)
	}
	// The rpc policy only records who connects: the listener has already
	// applied the same-user policy.
	var seen atomic.Pointer[peer.Peer]
	// Warnings only: the report is the demo's output, not the drain's record.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := rpc.NewServer(&rpc.ServerOptions{Logger: logger, Policy: peer.PolicyFunc(func(p *peer.Peer) error {
		seen.CompareAndSwap(nil, p)
		return nil
	})})
	store := counter.New()
	store.Register(srv)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		if d.client != nil {
			d.client.Close()
		}
		if d.http != nil {
			d.http.CloseIdleConnections()
		}
		store.Shutdown()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			return fmt.Errorf("graceful shutdown: %w", err)
		}
		if err := <-served; !errors.Is(err, rpc.ErrServerClosed) {
			return err
		}
		return nil
	}
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	fmt.Fprintf(d.out, "counter service on %s (socket mode 0600, same-user policy), over warren RPC and HTTP\n", l.Endpoint())

	d.client, err = rpc.Dial(addr, nil)
	if err != nil {
		return err
	}
	d.http = rpc.HTTPClient(addr, nil)
	d.http.Timeout = time.Minute
	if tr, ok := d.http.Transport.(*http.Transport); ok {
		tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, d.callers) // one connection per caller, kept
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.tour(ctx, &seen); err != nil {
		return err
	}
	if err := d.probeHTTP(ctx); err != nil {
		return err
	}

	// The three phases. With -calls, the increments are split 40/30/30.
	var nRPC, nHTTP, nMixed int64
	if d.calls > 0 {
		nRPC, nHTTP = d.calls*4/10, d.calls*3/10
		nMixed = d.calls - nRPC - nHTTP
	}
	if d.calls > 0 {
		fmt.Fprintf(d.out, "driving it: %d Counter.Inc calls from %d concurrent callers per phase\n", d.calls, d.callers)
	} else {
		fmt.Fprintf(d.out, "driving it for %v with %d concurrent callers per phase\n", 3*d.phase, d.callers)
	}
	var results []*phaseResult
	var total int64 // successful increments

	if d.calls == 0 || nRPC > 0 {
		r, err := d.runPhase(ctx, "rpc", nRPC, func(int) leg { return leg{d.rpcInc, false} })
		if r != nil {
			total += r.calls
		}
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	if d.calls == 0 || nHTTP > 0 {
		r, err := d.runPhase(ctx, "http", nHTTP, func(int) leg { return leg{d.httpInc, true} })
		if r != nil {
			total += r.calls
		}
		if err != nil {
			return err
		}
		results = append(results, r)
	}
	w, err := d.watchPhase(ctx, nMixed, total, results)
	if w != nil {
		total += w.incs
	}
	if err != nil {
		return err
	}
	results = append(results, &w.phaseResult)

	// Check the work.
	final, err := rpc.Call[counter.GetRequest, counter.Entry](ctx, d.client, "Counter.Get", &counter.GetRequest{Name: demoCounter})
	if err != nil {
		return fmt.Errorf("Counter.Get after the run: %w", err)
	}
	d.summary(results, w)
	if final.Value != total {
		return fmt.Errorf("the counter ended at %d after %d increments: increments were lost", final.Value, total)
	}
	fmt.Fprintf(d.out, "counter %q = %d = the number of increments; the watch saw it\n", demoCounter, final.Value)

	if err := stop(); err != nil {
		return err
	}
	if a, err := transport.ParseAddr(addr); err == nil && a.Scheme == transport.SchemeUnix && !strings.HasPrefix(a.Address, "@") {
		if _, err := os.Lstat(a.Address); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("socket file %s still exists after shutdown (%v)", a.Address, err)
		}
		fmt.Fprintln(d.out, "server shut down gracefully; socket removed")
	} else {
		fmt.Fprintln(d.out, "server shut down gracefully")
	}
	return nil
}

// tour makes a few single calls that show what the service and warren do.
func (d *demo) tour(ctx context.Context, seen *atomic.Pointer[peer.Peer]) error {
	set, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, d.client, "Counter.Set", &counter.SetRequest{Name: demoCounter})
	if err != nil {
		return fmt.Errorf("Counter.Set: %w", err)
	}
	fmt.Fprintf(d.out, "  Counter.Set {\"name\":%q,\"value\":0} -> %s\n", demoCounter, mustJSON(set))
	if p := seen.Load(); p != nil && p.HasCred {
		fmt.Fprintf(d.out, "  the server read the caller's identity from the kernel: uid %d, gid %d, pid %d (this process is pid %d)\n",
			p.UID, p.GID, p.PID, os.Getpid())
	}
	_, err = rpc.Call[counter.GetRequest, counter.Entry](ctx, d.client, "Counter.Get", &counter.GetRequest{Name: "nope"})
	if status.CodeOf(err) != status.NotFound {
		return fmt.Errorf("Counter.Get of a missing counter: got %v, want a not_found error", err)
	}
	fmt.Fprintf(d.out, "  Counter.Get {\"name\":\"nope\"} -> error %s: %s\n", status.CodeOf(err), status.FromError(err).Message)
	list, err := rpc.Call[rpc.Empty, rpc.MethodList](ctx, d.client, rpc.IntrospectionMethod, &rpc.Empty{})
	if err != nil {
		return fmt.Errorf("%s: %w", rpc.IntrospectionMethod, err)
	}
	names := make([]string, len(list.Methods))
	for i, m := range list.Methods {
		names[i] = m.Name
	}
	fmt.Fprintf(d.out, "  methods: %s\n", strings.Join(names, " "))
	return nil
}

func mustJSON(v any) string {
	b, err := codec.JSON.Append(nil, v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// A caller makes one increment and returns the counter's new value.
type caller func(ctx context.Context) (int64, error)

// A leg is a caller and whether it goes over HTTP.
type leg struct {
	call caller
	http bool
}

var incReq = &counter.IncRequest{Name: demoCounter}

func (d *demo) rpcInc(ctx context.Context) (int64, error) {
	var c counter.Entry
	if err := d.client.Invoke(ctx, "Counter.Inc", incReq, &c); err != nil {
		return 0, fmt.Errorf("Counter.Inc over rpc: %w", err)
	}
	return c.Value, nil
}

var incBody = []byte(`{"name":"` + demoCounter + `"}`)

func (d *demo) httpInc(ctx context.Context) (int64, error) {
	c, err := httpCall(ctx, d.http, "Counter.Inc", incBody)
	if err != nil {
		return 0, fmt.Errorf("Counter.Inc over http: %w", err)
	}
	return c.Value, nil
}

// httpCall makes a unary Connect-protocol call with a JSON body through hc,
// whose transport dials the server, and decodes a Counter.
func httpCall(ctx context.Context, hc *http.Client, method string, body []byte) (*counter.Entry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://warren/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &httpStatusError{code: resp.StatusCode, body: b}
	}
	c := new(counter.Entry)
	if err := codec.JSON.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("decoding the reply %q: %w", b, err)
	}
	return c, nil
}

type httpStatusError struct {
	code int
	body []byte
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.code, strings.TrimSpace(string(e.body)))
}

// probeHTTP makes one HTTP call, to fail early and clearly if the server
// does not answer HTTP.
func (d *demo) probeHTTP(ctx context.Context) error {
	c, err := httpCall(ctx, d.http, "Counter.Get", []byte(`{"name":"`+demoCounter+`"}`))
	switch {
	case err != nil:
		return fmt.Errorf("Counter.Get over HTTP: %w", err)
	case c.Name != demoCounter:
		return fmt.Errorf("Counter.Get over HTTP: got %+v, want counter %q", c, demoCounter)
	}
	return nil
}

// runPhase runs d.callers callers, caller i making calls with pick(i), n
// calls in all (0: for d.phase). It returns the phase's result; on a failed
// call it stops and returns the error too.
func (d *demo) runPhase(ctx context.Context, name string, n int64, pick func(i int) leg) (*phaseResult, error) {
	return d.phaseLoop(ctx, name, n, pick, nil)
}

// phaseLoop is runPhase with a hook called after each successful call
// with the call's start time and the value it returned.
func (d *demo) phaseLoop(ctx context.Context, name string, n int64, pick func(i int) leg, after func(start time.Time, v int64)) (*phaseResult, error) {
	res := &phaseResult{name: name}
	hists := make([]histogram, d.callers)
	var (
		issued, done, nHTTP atomic.Int64
		stopFlag            atomic.Bool
		firstErr            error
		errOnce             sync.Once
		wg                  sync.WaitGroup
	)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var before, after0 runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if n == 0 {
		t := time.AfterFunc(d.phase, func() { stopFlag.Store(true) })
		defer t.Stop()
	}
	for i := range d.callers {
		lg := pick(i)
		call, isHTTP := lg.call, lg.http
		h := &hists[i]
		wg.Go(func() {
			for !stopFlag.Load() {
				if n > 0 && issued.Add(1) > n {
					return
				}
				t0 := time.Now()
				v, err := call(pctx)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					stopFlag.Store(true)
					cancel()
					return
				}
				h.record(time.Since(t0))
				done.Add(1)
				if isHTTP {
					nHTTP.Add(1)
				}
				if after != nil {
					after(t0, v)
				}
			}
		})
	}
	quit, progressDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(progressDone)
		d.progress(name, start, &done, quit)
	}()
	wg.Wait()
	res.elapsed = time.Since(start)
	runtime.ReadMemStats(&after0)
	close(quit)
	<-progressDone
	res.allocs = after0.Mallocs - before.Mallocs
	res.calls = done.Load()
	res.http = nHTTP.Load()
	res.rpc = res.calls - res.http
	for i := range hists {
		res.lat.merge(&hists[i])
	}
	d.progressLine(name, res.calls, res.elapsed, true)
	if firstErr != nil {
		return res, firstErr
	}
	return res, nil
}

// progress shows the phase's progress until quit is closed: a line
// redrawn ten times a second on a terminal, a plain line every two
// seconds otherwise.
func (d *demo) progress(name string, start time.Time, done *atomic.Int64, quit <-chan struct{}) {
	every := 2 * time.Second
	if d.tty {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
			d.progressLine(name, done.Load(), time.Since(start), false)
		}
	}
}

func (d *demo) progressLine(name string, calls int64, el time.Duration, final bool) {
	rate := float64(calls) / max(el.Seconds(), 1e-9)
	line := fmt.Sprintf("  %-5s %9d calls in %5.2fs  %8.0f calls/s", name, calls, el.Seconds(), rate)
	switch {
	case d.tty && final:
		fmt.Fprintf(d.out, "\r\x1b[K%s\n", line)
	case d.tty:
		fmt.Fprintf(d.out, "\r\x1b[K%s", line)
	case final:
		fmt.Fprintln(d.out, line)
	default:
		fmt.Fprintln(d.out, line+" so far")
	}
}

// watchResult is the watch phase: increments over rpc and http while a
// Watch stream follows the counter.
type watchResult struct {
	phaseResult       // the watch's row: messages received and their latency
	incs        int64 // increments made in the phase
	final       int64 // the last value the watch saw
}

// watchPhase opens a Watch on the counter (at value base), runs callers over
// rpc and http and checks that the watch sees the final value. The watch's
// latency is from the start of an Inc call to the
// watch delivering the value that call set; the watch skips values it
// cannot keep up with, which have no latency.
func (d *demo) watchPhase(ctx context.Context, n, base int64, prev []*phaseResult) (*watchResult, error) {
	w := &watchResult{}
	w.name = "watch"
	// Room for the start times of the increments, indexed by value-base.
	size := n
	if n == 0 {
		var best float64
		for _, r := range prev {
			best = max(best, float64(r.calls)/r.elapsed.Seconds())
		}
		size = int64(2*best*d.phase.Seconds()) + 1<<16
	}
	size = min(size, 1<<23)
	sent := make([]atomic.Int64, size+1) // start of the Inc that set base+i, unix ns
	got := make([]int64, size+1)         // when the watch saw base+i, unix ns

	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ws, err := rpc.NewStream[counter.WatchRequest, counter.Entry](wctx, d.client, "Counter.Watch")
	if err != nil {
		return nil, fmt.Errorf("Counter.Watch: %w", err)
	}
	defer ws.Close()
	if err := ws.Send(&counter.WatchRequest{Name: demoCounter}); err != nil {
		return nil, fmt.Errorf("Counter.Watch: %w", err)
	}
	if err := ws.CloseSend(); err != nil {
		return nil, fmt.Errorf("Counter.Watch: %w", err)
	}
	first, err := ws.Recv()
	if err != nil {
		return nil, fmt.Errorf("Counter.Watch: %w", err)
	}
	if first.Value != base {
		return nil, fmt.Errorf("Counter.Watch started at %d, want the current value %d", first.Value, base)
	}
	var last, msgs atomic.Int64
	last.Store(first.Value)
	watchErr := make(chan error, 1)
	joined := false // the receiving goroutine has ended
	defer func() {
		if !joined {
			wcancel()
			ws.Close()
			<-watchErr
		}
	}()
	go func() {
		for {
			c, err := ws.Recv()
			if err != nil {
				watchErr <- err
				return
			}
			now := time.Now().UnixNano()
			if i := c.Value - base; i > 0 && i <= size {
				got[i] = now
			}
			msgs.Add(1)
			last.Store(c.Value)
		}
	}()

	pick := func(i int) leg {
		if i%2 == 1 {
			return leg{d.httpInc, true}
		}
		return leg{d.rpcInc, false}
	}
	r, err := d.phaseLoop(ctx, "mixed", n, pick, func(start time.Time, v int64) {
		if i := v - base; i > 0 && i <= size {
			sent[i].Store(start.UnixNano())
		}
	})
	if r != nil {
		w.incs = r.calls
	}
	if err != nil {
		return w, err
	}
	want := base + r.calls
	deadline := time.Now().Add(5 * time.Second)
	for last.Load() != want && time.Now().Before(deadline) {
		select {
		case err := <-watchErr:
			joined = true
			return w, fmt.Errorf("Counter.Watch ended early: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	wcancel()
	ws.Close()
	<-watchErr // the receiving goroutine has ended: got is ours
	joined = true
	w.final = last.Load()
	if w.final != want {
		return w, fmt.Errorf("the watch missed the final value: it saw %d last, the counter is at %d", w.final, want)
	}
	w.calls = msgs.Load()
	w.elapsed = r.elapsed
	w.rpc, w.http = r.rpc, r.http
	w.allocs = r.allocs
	for i := int64(1); i <= min(r.calls, size); i++ {
		if s := sent[i].Load(); s != 0 && got[i] != 0 {
			w.lat.record(time.Duration(got[i] - s))
		}
	}
	return w, nil
}

// summary prints the table.
func (d *demo) summary(results []*phaseResult, w *watchResult) {
	perCall := map[string]float64{}
	fmt.Fprintln(d.out)
	tw := tabwriter.NewWriter(d.out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tcalls\tcalls/s\tp50\tp99\tallocs/call\t")
	for _, r := range results {
		allocs := float64(r.allocs) / float64(max(r.calls, 1))
		unit := ""
		if r.name == "watch" && w != nil {
			// The phase's allocations, less those of its Inc calls (at the
			// rates of the rpc and http rows), per watch message.
			incs := float64(w.rpc)*perCall["rpc"] + float64(w.http)*perCall["http"]
			allocs = max(float64(r.allocs)-incs, 0) / float64(max(r.calls, 1))
			unit = " msgs"
		} else {
			perCall[r.name] = allocs
		}
		fmt.Fprintf(tw, "%s\t%d%s\t%.0f\t%s\t%s\t%.1f\t\n", r.name, r.calls, unit,
			float64(r.calls)/r.elapsed.Seconds(), fmtDur(r.lat.quantile(0.50)), fmtDur(r.lat.quantile(0.99)), allocs)
	}
	tw.Flush()
	fmt.Fprintf(d.out, "rpc: %d callers on one connection; http: %d clients, keep-alive", d.callers, d.callers)
	fmt.Fprintln(d.out)
	if w != nil {
		fmt.Fprintf(d.out, "watch: messages received while %d callers made %d increments (rpc %d, http %d); latency from the start of\n"+
			"       an Inc call to the watch delivering its value; a watch skips values it cannot keep up with\n",
			d.callers, w.incs, w.rpc, w.http)
	}
	fmt.Fprintln(d.out, "allocations: client and server together (one process), from runtime.MemStats")
}

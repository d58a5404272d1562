package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/fleet"
	"github.com/warrenipc/warren/internal/grpcunary"
	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// The rolling-restart test: three `warren serve` processes in the server's
// namespace, 32 callers in the client's making Counter.Inc calls through a
// load balancer (HAProxy, nginx) or the Go client's own balancing, while
// each server is stopped with SIGTERM and started again, one after another,
// twice. No call may fail except by its own deadline, and the increments
// the servers report as they exit ("counter increments applied") must add
// up to the calls the callers saw succeed: nothing lost, nothing applied
// twice.

const (
	rollingToken   = "rolling-restart-test-token-01234"
	rollingCallers = 32
	rollingRounds  = 2
	rollingDL      = 5 * time.Second // each call's deadline
	rollingPause   = 2 * time.Millisecond
)

// rollingReport is what the callers' process prints when told to stop.
type rollingReport struct {
	Calls    int64    `json:"calls"`    // calls made (not counting retries)
	OK       int64    `json:"ok"`       // succeeded
	Retried  int64    `json:"retried"`  // retried by the caller as never processed
	Fresh    int64    `json:"fresh"`    // retried after NotFound from a server whose counter was not yet created
	Dials    int64    `json:"dials"`    // connections the warren clients made (reconnections included)
	Deadline int64    `json:"deadline"` // failed by their own deadline
	Failed   int64    `json:"failed"`   // failed otherwise: visible failures
	Errors   []string `json:"errors"`   // the first few failures
}

// TestRollingRestart runs the three paths over one set of namespaces.
func TestRollingRestart(t *testing.T) {
	if rawio.RaceEnabled {
		// It makes hundreds of thousands of calls from a helper process;
		// .ci/run runs it on its own, with -v for the figures.
		t.Skip("not under the race detector: go test ./cmd/warren -run TestRollingRestart -v")
	}
	needNetns(t)
	haproxy := requireTool(t, "haproxy")
	nginx := requireTool(t, "nginx")
	l := newVethLink(t)
	cliNS := nsArgv(l.cli)
	var addrs []string
	for i := range 3 {
		addrs = append(addrs, fmt.Sprintf("%s:%d", l.srvIP, 7101+i))
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)

	// HAProxy and nginx run in the client's namespace, in front of the
	// servers across the veth pair.
	hpCfg := filepath.Join(dir, "haproxy.cfg")
	const hpGRPC, hpTCP, ngGRPC = "127.0.0.1:8080", "127.0.0.1:7000", "127.0.0.1:8081"
	// The runtime API, to take a server out of the gRPC backend.
	hpSock := filepath.Join(dir, "haproxy.sock")
	hpText := fleet.Replace(t, fleet.HAProxyConfig(t, "../../examples/haproxy/haproxy.cfg", addrs, hpGRPC, hpTCP, rollingToken),
		[2]string{"\nglobal\n", "\nglobal\n    stats socket " + hpSock + " level admin\n"})
	if err := os.WriteFile(hpCfg, []byte(hpText), 0o644); err != nil {
		t.Fatal(err)
	}
	hp := fleet.StartProc(t, syscall.SIGUSR1, append(cliNS, haproxy, "-db", "-f", hpCfg)...)
	ng := startRollingNginx(t, nginx, dir, cliNS, addrs, ngGRPC)
	for _, p := range []struct {
		proc *fleet.Proc
		addr string
	}{{hp, hpTCP}, {hp, hpGRPC}, {ng, ngGRPC}} {
		p.proc.WaitDial(t, func() error {
			host, port, _ := strings.Cut(p.addr, ":")
			_, err := ipCmd(append(cliNS, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port))...)
			return err
		})
	}

	noLog := func() string { return "" }
	ngLog := func() string {
		a, _ := os.ReadFile(filepath.Join(dir, "access.log"))
		e, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return string(e) + string(a)
	}
	// nginx open source has no active health checks: an operator takes a
	// server out of the upstream (down) and reloads before stopping it,
	// and puts it back once it runs again.
	ngConf := filepath.Join(dir, "grpc.conf")
	ngSet := func(down int) {
		conf := fleet.NginxGRPCConfig(t, "../../examples/nginx/grpc.conf", addrs, ngGRPC)
		if down >= 0 {
			conf = fleet.Replace(t, conf, [2]string{"server " + addrs[down] + " ", "server " + addrs[down] + " down "})
		}
		if err := os.WriteFile(ngConf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		ng.Reload(t)
		t.Logf("nginx reload: %v", time.Since(t0).Round(time.Millisecond))
	}
	hpCmd := func(cmd string) {
		c, err := net.Dial("unix", hpSock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(cmd + "\n")); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		if strings.TrimSpace(string(b)) != "" {
			t.Fatalf("haproxy %q: %s", cmd, b)
		}
	}
	paths := []struct {
		name, proto, addr string
		lbLog             func() string
		out, in           func(i int)   // around each restart, if set
		settle            time.Duration // after each restart
		needHTTP2Drain    bool
		failuresReported  bool // calls failing visibly are counted, not an error
	}{
		// (a) the Go client's own balancing: each caller's client keeps a
		// connection to every server.
		{name: "client-balancing", proto: "warren", addr: "tcp://" + strings.Join(addrs, ",tcp://"), lbLog: noLog, settle: time.Second},
		// (b) HAProxy, warren's protocol per connection (mode tcp).
		// Long enough for HAProxy to take a server back (two checks 500 ms
		// apart) before the next one stops.
		{name: "haproxy-tcp", proto: "warren", addr: "tcp://" + hpTCP, lbLog: hp.Output, settle: 1500 * time.Millisecond},
		// (b') HAProxy, gRPC per request (mode http): the server disabled
		// through the runtime API before SIGTERM, enabled after.
		{name: "haproxy-grpc", proto: "grpc", addr: hpGRPC, lbLog: hp.Output,
			out: func(i int) {
				hpCmd(fmt.Sprintf("disable server warren_grpc/w%d", i+1))
				time.Sleep(100 * time.Millisecond)
			},
			in: func(i int) { hpCmd(fmt.Sprintf("enable server warren_grpc/w%d", i+1)) }, settle: 1500 * time.Millisecond},
		// (c) nginx, gRPC per request: out of the upstream by a reload,
		// then SIGTERM.
		{name: "nginx-grpc", proto: "grpc", addr: ngGRPC, lbLog: ngLog,
			out: func(i int) { ngSet(i) }, in: func(int) { ngSet(-1) }, settle: 300 * time.Millisecond},
		// (c') nginx left to find out by itself: SIGTERM alone. nginx
		// leaves a server out for fail_timeout (2 s) after a failure. It
		// sends gRPC request bodies unbuffered, so it cannot send again a
		// call refused by a GOAWAY once its body went out: such calls fail
		// visibly (502), never processed. Reported, not required; nothing
		// lost or applied twice is still checked.
		{name: "nginx-grpc-sigterm-only", proto: "grpc", addr: ngGRPC, lbLog: ngLog, settle: 2500 * time.Millisecond, needHTTP2Drain: true, failuresReported: true},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			if p.needHTTP2Drain {
				requireHTTP2Drain(t)
			}
			rollingPath(t, l, addrs, p.proto, p.addr, p.lbLog, p.out, p.in, p.settle, p.failuresReported)
		})
	}
}

// requireHTTP2Drain skips a gRPC path unless `warren serve` sends an
// HTTP/2 GOAWAY when it drains: without it, a load balancer that speaks
// HTTP/2 to the servers cannot tell a call refused unprocessed from one cut
// off, and calls fail (issue 29, "Shutdown that drains", over HTTP/2).
func requireHTTP2Drain(t *testing.T) {
	s := fleet.Start(t, nil, warrenBin, "--addr", fmt.Sprintf("tcp://127.0.0.1:%d", fleet.FreePort(t)), "--token", rollingToken)
	if !s.DrainsHTTP2(t) {
		t.Skip("warren serve closes HTTP/2 connections at shutdown without a GOAWAY: a gRPC load balancer in front cannot retry safely (PROTOCOL.md, issue 29)")
	}
}

// startRollingNginx starts nginx with examples/nginx/grpc.conf in ns.
func startRollingNginx(t *testing.T, nginx, dir string, ns, addrs []string, listen string) *fleet.Proc {
	tmp := filepath.Join(dir, "nginx-tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o777)
	include := filepath.Join(dir, "grpc.conf")
	if err := os.WriteFile(include, []byte(fleet.NginxGRPCConfig(t, "../../examples/nginx/grpc.conf", addrs, listen)), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fleet.NginxMain("user nobody nogroup;", dir, tmp, include, `$status $upstream_addr`)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{nginx, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	if out, err := ipCmd(append(append(append([]string{}, ns...), args...), "-t")...); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	return fleet.StartProc(t, syscall.SIGQUIT, append(append([]string{}, ns...), args...)...)
}

// rollingPath starts the servers and the callers, restarts each server
// twice, stops everything and checks the sums.
func rollingPath(t *testing.T, l *vethLink, addrs []string, proto, target string, lbLog func() string, out, in func(int), settle time.Duration, failuresReported bool) {
	srvNS := nsArgv(l.srv)
	start := func(i int) *fleet.Server {
		s := fleet.Start(t, srvNS, warrenBin, "--addr", "tcp://"+addrs[i], "--token", rollingToken)
		// The counter is set on each new process as soon as it listens,
		// for servers whose Inc does not create one (Set is not an
		// increment; a caller that gets there first retries NotFound).
		if r := l.run(t, l.cli, "call", "--token", rollingToken, s.Addr, "Counter.Set", `{"name":"c"}`); r.code != 0 {
			t.Fatalf("Set on a new server: %s", r)
		}
		return s
	}
	servers := []*fleet.Server{start(0), start(1), start(2)}
	var applied []fleet.Applied
	var slowest time.Duration // the longest drain, SIGTERM to exit
	stop := func(i int) {
		t0 := time.Now()
		a, err := servers[i].Stop()
		slowest = max(slowest, time.Since(t0))
		if err != nil {
			t.Fatal(err)
		}
		applied = append(applied, a)
	}
	logBefore := len(lbLog())

	env := cmdEnv(t, "WARREN_NETNS_HELPER=rolling", "WARREN_HELPER_ADDR="+target, "WARREN_HELPER_PROTO="+proto)
	c := l.start(t, l.cli, env, os.Args[0], "-test.run=^TestNetnsHelper$")
	if line := c.line(); line != "calling" {
		t.Fatalf("callers: %q; stderr:\n%s", line, c.stderr)
	}
	time.Sleep(500 * time.Millisecond)
	begin := time.Now()
	for range rollingRounds {
		for i := range servers {
			if out != nil {
				out(i)
			}
			stop(i)
			servers[i] = start(i)
			if in != nil {
				in(i)
			}
			time.Sleep(settle)
		}
	}
	restarts := time.Since(begin)
	c.signal(syscall.SIGUSR1)
	var rep rollingReport
	if err := json.Unmarshal([]byte(c.line()), &rep); err != nil {
		t.Fatalf("callers' report: %v; stderr:\n%s", err, c.stderr)
	}
	c.wait()
	for i := range servers {
		stop(i)
	}
	var sum int64
	for _, a := range applied {
		sum += a.Sum
		if a.Calls != a.Sum {
			t.Errorf("a server applied %d calls adding %d: every call adds 1", a.Calls, a.Sum)
		}
	}
	lbRetried := lbRetries(lbLog()[logBefore:])
	t.Logf("%s, %s: %d restarts in %v (the longest drain %v); calls made %d, succeeded %d, retried by the callers %d (%d more after NotFound), by the load balancer %d, connections made by warren clients %d, failed by their deadline %d, failed %d; increments applied by the servers %d (%d processes), seen by the callers %d",
		t.Name(), target, rollingRounds*len(servers), restarts.Round(time.Millisecond), slowest.Round(time.Millisecond), rep.Calls, rep.OK, rep.Retried, rep.Fresh, lbRetried, rep.Dials, rep.Deadline, rep.Failed, sum, len(applied), rep.OK)
	switch {
	case rep.Failed != 0 && failuresReported:
		t.Logf("%d calls failed visibly (never processed: see the counter check), for example: %q", rep.Failed, rep.Errors)
	case rep.Failed != 0:
		t.Errorf("%d calls failed visibly, for example: %q", rep.Failed, rep.Errors)
		t.Logf("the load balancer's log says:\n%s", lbErrors(lbLog()[logBefore:]))
	}
	if rep.OK == 0 || rep.Calls != rep.OK+rep.Deadline+rep.Failed {
		t.Errorf("calls do not add up: %+v", rep)
	}
	if rep.Deadline == 0 && sum != rep.OK {
		t.Errorf("the servers applied %d increments; the callers saw %d succeed", sum, rep.OK)
	}
	if rep.Deadline != 0 && (sum < rep.OK || sum > rep.OK+rep.Deadline) {
		// A call that failed by its deadline may or may not have run.
		t.Errorf("the servers applied %d increments; the callers saw %d succeed and %d time out", sum, rep.OK, rep.Deadline)
	}
}

// lbRetries counts the calls (HAProxy in mode tcp: connections) a load
// balancer's log shows it sent to a second server: nginx's access log lines
// ("$status $upstream_addr") listing more than one server, HAProxy's log
// lines whose retries counter (the fifth of actconn/feconn/beconn/srv_conn/
// retries) is not 0 ("+N" when redispatched).
func lbRetries(log string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && len(f[0]) == 3 && f[0][0] >= '1' && f[0][0] <= '5' && strings.Contains(line, ", ") {
			n++ // nginx
			continue
		}
		if !strings.Contains(line, "warren_tcp/") && !strings.Contains(line, "warren_grpc/") {
			continue
		}
		// The counters are the 5-part field just before the 2-part queues
		// (timers, also 5 parts in the HTTP log, come before the status).
		for j := 0; j+1 < len(f); j++ {
			if c := strings.Split(f[j], "/"); len(c) == 5 && len(strings.Split(f[j+1], "/")) == 2 {
				if c[4] != "0" {
					n++
				}
				break
			}
		}
	}
	return n
}

// lbErrors returns the first lines of a load balancer's log that report an
// error.
func lbErrors(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if len(out) < 12 && (strings.Contains(line, "[error]") || strings.Contains(line, "[warn]") || strings.Contains(line, " 50")) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// helperRolling runs rollingCallers callers against addr until SIGUSR1,
// then prints a rollingReport and exits. proto is "warren" (a warren
// client per caller, over TCP: one connection each) or "grpc" (a gRPC
// client per caller over h2c).
func helperRolling(addr string) error {
	stopSig := make(chan os.Signal, 1)
	signal.Notify(stopSig, syscall.SIGUSR1)
	var rep rollingReport
	var calls, ok, retried, fresh, deadline, failed atomic.Int64
	var mu sync.Mutex
	fail := func(err error) {
		failed.Add(1)
		mu.Lock()
		if len(rep.Errors) < 5 {
			rep.Errors = append(rep.Errors, err.Error())
		}
		mu.Unlock()
	}
	var dials atomic.Int64
	inc, closeAll, err := rollingClients(os.Getenv("WARREN_HELPER_PROTO"), addr, &dials)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range rollingCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				ctx, cancel := context.WithTimeout(context.Background(), rollingDL)
				for {
					err := inc[i](ctx)
					switch {
					case err == nil:
						ok.Add(1)
					case ctx.Err() != nil:
						deadline.Add(1)
					case neverProcessed(err):
						retried.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					case status.CodeOf(err) == status.NotFound:
						// A restarted server reached before the test
						// created its counter: the store applied nothing.
						fresh.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					default:
						fail(err)
					}
					break
				}
				cancel()
				// A short pause: the callers keep calls crossing every
				// drain without taking both cores from CI's other tests.
				time.Sleep(rollingPause)
			}
		}()
	}
	fmt.Println("calling")
	<-stopSig
	close(stop)
	wg.Wait()
	closeAll()
	rep.Calls, rep.OK, rep.Retried, rep.Fresh, rep.Deadline, rep.Failed = calls.Load(), ok.Load(), retried.Load(), fresh.Load(), deadline.Load(), failed.Load()
	rep.Dials = dials.Load()
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	os.Exit(0)
	return nil
}

// neverProcessed reports a warren call the server refused unprocessed
// because it was draining (PROTOCOL.md's retry rule): the client retries
// such a call once on a new connection by itself; this is a second refusal.
func neverProcessed(err error) bool {
	var ga *rpc.GoAwayError
	return errors.As(err, &ga) && (ga.Code == status.OK || ga.Code == status.Unavailable)
}

// rollingClients returns one Counter.Inc function per caller.
func rollingClients(proto, addr string, dials *atomic.Int64) (inc []func(context.Context) error, closeAll func(), err error) {
	// Every connection a warren client makes, counted: the reconnections
	// after drains are what the client's own retries ride on.
	dialer := func(ctx context.Context, a string) (net.Conn, error) {
		dials.Add(1)
		c, err := transport.Dial(ctx, a, nil)
		if c == nil {
			return nil, err
		}
		return c, err
	}
	var closers []func()
	closeAll = func() {
		for _, c := range closers {
			c()
		}
	}
	for range rollingCallers {
		switch proto {
		case "warren":
			c, err := rpc.Dial(addr, &rpc.ClientOptions{Token: rollingToken, WaitForReady: true, Dialer: dialer,
				MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			cc := counter.NewCounterClient(c)
			closers = append(closers, func() { c.Close() })
			inc = append(inc, func(ctx context.Context) error {
				_, err := cc.Inc(ctx, &counter.IncRequest{Name: "c"})
				return err
			})
		case "grpc":
			g := grpcunary.New(addr, http.Header{"Authorization": {"Bearer " + rollingToken}})
			closers = append(closers, g.Close)
			inc = append(inc, func(ctx context.Context) error {
				return g.Call(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "c"}, &counter.Entry{})
			})
		default:
			return nil, nil, fmt.Errorf("unknown WARREN_HELPER_PROTO %q", proto)
		}
	}
	return inc, closeAll, nil
}

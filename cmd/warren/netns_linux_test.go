package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// The tests in this file run warren across two network namespaces joined by
// a veth pair: the server in one, the client in the other (ip netns exec),
// as on two hosts. They need root and iproute2 ("ip"; "tc" and the kernel's
// netem for the latency check). Without root they are skipped; as root with
// WARREN_REQUIRE_TOOLS set (CI), a missing tool or a namespace that cannot
// be created fails them.

// netnsPrefix starts the name of every namespace these tests create:
// warren-t-PID-N-s and warren-t-PID-N-c.
const netnsPrefix = "warren-t-"

// vethLink is a pair of network namespaces, srv and cli, joined by a veth
// pair whose ends are srvIP (device dev in srv) and cliIP.
type vethLink struct {
	t            *testing.T
	srv, cli     string
	srvIP, cliIP string
	dev          string
}

var netnsSeq atomic.Int32

// ipCmd runs ip (or tc) with args and returns its combined output.
func ipCmd(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// needNetns skips the test unless it can create network namespaces: root
// and ip. With WARREN_REQUIRE_TOOLS set and root, it fails instead.
func needNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (ip netns add); run as root, as CI does")
	}
	requireTool(t, "ip")
}

// newVethLink creates the namespaces and the veth pair, and removes them at
// the end of the test (and any left by an earlier run that died).
func newVethLink(t *testing.T) *vethLink {
	t.Helper()
	needNetns(t)
	removeStaleNetns(t)
	n := netnsSeq.Add(1)
	base := fmt.Sprintf("%s%d-%d-", netnsPrefix, os.Getpid(), n)
	// Addresses exist only inside the namespaces; they still differ per
	// run so that two runs never look alike in logs.
	subnet := fmt.Sprintf("10.213.%d", (os.Getpid()+int(n))%250+1)
	l := &vethLink{t: t, srv: base + "s", cli: base + "c", srvIP: subnet + ".1", cliIP: subnet + ".2", dev: "wv0"}
	fail := func(err error) {
		t.Helper()
		msg := fmt.Sprintf("cannot set up network namespaces joined by veth: %v", err)
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, ns := range []string{l.srv, l.cli} {
		if _, err := ipCmd("ip", "netns", "add", ns); err != nil {
			fail(err)
		}
		t.Cleanup(func() {
			if _, err := ipCmd("ip", "netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	// The veth pair is created inside the namespaces: nothing is added to
	// the host's own network, even for a moment.
	for _, args := range [][]string{
		{"ip", "-n", l.srv, "link", "add", l.dev, "type", "veth", "peer", "name", "wv1", "netns", l.cli},
		{"ip", "-n", l.srv, "addr", "add", l.srvIP + "/24", "dev", l.dev},
		{"ip", "-n", l.cli, "addr", "add", l.cliIP + "/24", "dev", "wv1"},
		{"ip", "-n", l.srv, "link", "set", "lo", "up"},
		{"ip", "-n", l.cli, "link", "set", "lo", "up"},
		{"ip", "-n", l.srv, "link", "set", l.dev, "up"},
		{"ip", "-n", l.cli, "link", "set", "wv1", "up"},
	} {
		if _, err := ipCmd(args...); err != nil {
			fail(err)
		}
	}
	return l
}

// removeStaleNetns deletes namespaces with netnsPrefix whose test process
// is gone (a run killed before its cleanup).
func removeStaleNetns(t *testing.T) {
	out, err := ipCmd("ip", "netns", "list")
	if err != nil {
		return
	}
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, netnsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if _, err := ipCmd("ip", "netns", "del", name); err != nil {
			t.Logf("removing the stale namespace %s: %v", name, err)
		}
	}
}

// link sets the server's end of the veth pair up or down.
func (l *vethLink) link(state string) {
	l.t.Helper()
	if _, err := ipCmd("ip", "-n", l.srv, "link", "set", l.dev, state); err != nil {
		l.t.Fatal(err)
	}
}

// exec returns argv run in namespace ns.
func nsArgv(ns string, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", ns}, argv...)
}

// run runs warren in namespace ns for test t and waits for it.
func (l *vethLink) run(t *testing.T, ns string, args ...string) result {
	t.Helper()
	return runArgv(t, nil, nil, "", nsArgv(ns, append([]string{warrenBin}, args...)...)...)
}

// start starts argv in namespace ns for test t. Its standard input stays
// open until the end of the test.
func (l *vethLink) start(t *testing.T, ns string, env []string, argv ...string) *proc {
	t.Helper()
	a := nsArgv(ns, argv...)
	cmd := exec.Command(a[0], a[1:]...)
	if env == nil {
		env = cmdEnv(t)
	}
	cmd.Env = env
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = r
	p := startProc(t, cmd)
	r.Close()
	t.Cleanup(func() { w.Close() })
	return p
}

// serve starts `warren serve` in the server's namespace.
func (l *vethLink) serve(args ...string) *server {
	l.t.Helper()
	p := l.start(l.t, l.srv, nil, append([]string{warrenBin, "serve"}, args...)...)
	line := p.line()
	addr, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		l.t.Fatalf("serve printed %q; stderr:\n%s", line, p.stderr)
	}
	return &server{proc: p, addr: addr}
}

// concatFiles writes the concatenation of files to a new file.
func concatFiles(t *testing.T, out string, files ...string) string {
	var b []byte
	for _, f := range files {
		d, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, d...)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNetnsTLS runs `warren serve` on tls:// in one namespace, with client
// certificates required, and clients in the other.
func TestNetnsTLS(t *testing.T) {
	l := newVethLink(t)
	ip := l.srvIP
	good := certsIn(t, "--host", ip)
	// intruder: signed by a CA the server trusts, with a name the policy
	// does not allow. stranger: signed by a CA it does not trust.
	intruder := certsIn(t, "--host", ip, "--client-name", "intruder")
	stranger := certsIn(t, "--host", ip)
	clientCA := concatFiles(t, filepath.Join(t.TempDir(), "client-ca.pem"),
		filepath.Join(good, "ca.pem"), filepath.Join(intruder, "ca.pem"))
	s := l.serve("--addr", "tls://"+net.JoinHostPort(ip, "7443"),
		"--cert", filepath.Join(good, "server.pem"), "--key", filepath.Join(good, "server-key.pem"),
		"--client-ca", clientCA, "--allow-cn", "client")
	if want := "tls://" + ip + ":7443"; s.addr != want {
		t.Fatalf("serve listens on %s, want %s", s.addr, want)
	}
	cli := tlsClient(good)
	callIn := func(t *testing.T, flags []string, args ...string) result {
		return l.run(t, l.cli, append(append([]string{"call", "-timeout", "10s"}, flags...), append([]string{s.addr}, args...)...)...)
	}

	t.Run("calls and streams", func(t *testing.T) {
		if r := callIn(t, cli, "Counter.Set", `{"name":"a","value":1}`); r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"a","value":"1"}` {
			t.Fatalf("call across the veth: %s", r)
		}
		w := l.start(t, l.cli, nil, append(append([]string{warrenBin, "call"}, cli...), s.addr, "Counter.Watch", `{"name":"a"}`)...)
		wantOut(t, "watched", w.line(), `{"name":"a","value":"1"}`)
		for i := 2; i <= 4; i++ {
			if r := callIn(t, cli, "Counter.Inc", `{"name":"a"}`); r.code != 0 {
				t.Fatalf("Inc: %s", r)
			}
			wantOut(t, "watched", w.line(), fmt.Sprintf(`{"name":"a","value":"%d"}`, i))
		}
		w.signal(os.Interrupt)
		if code := w.wait(); code != 0 {
			t.Fatalf("watch exit %d: %s", code, w.stderr)
		}
		if r := l.run(t, l.cli, append(append([]string{"ping", "-n", "20"}, cli...), s.addr)...); r.code != 0 {
			t.Fatalf("ping: %s", r)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		ca := filepath.Join(good, "ca.pem")
		wantFail(t, "no client certificate", callIn(t, []string{"--ca", ca}, "Counter.Get", `{"name":"a"}`), 1,
			"error: unavailable: the server at "+s.addr+" requires a client certificate: pass --cert and --key")
		wantFail(t, "client certificate from another CA",
			callIn(t, []string{"--ca", ca, "--cert", filepath.Join(stranger, "client.pem"), "--key", filepath.Join(stranger, "client-key.pem")}, "Counter.Get", `{"name":"a"}`), 1,
			"error: unavailable: the server at "+s.addr+" refused your client certificate: it is not signed by the CA the server trusts")
		wantFail(t, "name not allowed",
			callIn(t, []string{"--ca", ca, "--cert", filepath.Join(intruder, "client.pem"), "--key", filepath.Join(intruder, "client-key.pem")}, "Counter.Get", `{"name":"a"}`), 1,
			"error: permission_denied: the server at "+s.addr+" does not allow your client certificate",
			"certificate common names (intruder) not among the allowed common names [client]")
		wantFail(t, "server not trusted", callIn(t, tlsClient(stranger), "Counter.Get", `{"name":"a"}`), 1,
			"presented a certificate not signed by a CA you trust")
		s.waitStderr("cn=intruder")
	})

	t.Run("link down", func(t *testing.T) {
		// A client process that makes a call every 100 ms with a 1 s
		// deadline and reports each outcome.
		env := cmdEnv(t, "WARREN_NETNS_HELPER=loop", "WARREN_HELPER_ADDR="+s.addr, "WARREN_HELPER_CERTS="+good)
		c := l.start(t, l.cli, env, os.Args[0], "-test.run=^TestNetnsHelper$")
		defer func() {
			c.cmd.Process.Kill()
			c.wait()
		}()
		// Every increment that succeeds is seen in order: each reply's
		// value is above the last one's (a call that timed out may
		// still have been applied once its bytes got through).
		var last int64
		next := func() loopResult {
			t.Helper()
			var r loopResult
			if err := json.Unmarshal([]byte(c.line()), &r); err != nil {
				t.Fatal(err)
			}
			if r.OK {
				if r.Value <= last {
					t.Fatalf("Counter.Inc returned %d after %d", r.Value, last)
				}
				last = r.Value
			}
			return r
		}
		for ok := 0; ok < 3; {
			if r := next(); r.OK {
				ok++
			} else if r.Code != "unavailable" { // while the first connection is made
				t.Fatalf("before the link went down: %+v", r)
			}
		}
		l.link("down")
		down := time.Now()
		var failed int
		for time.Since(down) < 3*time.Second {
			r := next()
			if r.OK {
				if r.Start.Before(down) {
					continue // sent and answered before the link went down
				}
				t.Fatalf("a call succeeded with the link down: %+v", r)
			}
			// Every call fails by its deadline: neither sooner with a
			// confusing error nor much later (slack for a loaded
			// machine and the race detector).
			if r.Code != "deadline_exceeded" || r.Ms < 900 || r.Ms > 2500 {
				t.Fatalf("a call with the link down: %+v, want deadline_exceeded after about 1000 ms", r)
			}
			failed++
		}
		if failed < 2 {
			t.Fatalf("%d calls failed while the link was down", failed)
		}
		l.link("up")
		up := time.Now()
		for {
			r := next()
			if r.OK && r.Start.After(up) {
				t.Logf("link down for %v: %d calls failed by their deadline; calls succeed again %v after the link came back",
					up.Sub(down).Round(time.Millisecond), failed, time.Since(up).Round(time.Millisecond))
				break
			}
			if time.Since(up) > 20*time.Second {
				t.Fatalf("no call succeeded within 20 s of the link coming back: last %+v", r)
			}
		}
		// Three more in a row: the client has resumed, not just squeezed
		// one call through.
		for range 3 {
			if r := next(); !r.OK {
				t.Fatalf("after the link came back: %+v", r)
			}
		}
	})

	t.Run("latency", func(t *testing.T) {
		tc, err := exec.LookPath("tc")
		if err != nil {
			if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
				t.Fatalf("tc is required (WARREN_REQUIRE_TOOLS is set): %v", err)
			}
			t.Skip("tc not installed (iproute2)")
		}
		const delay = 20 * time.Millisecond
		if _, err := ipCmd("ip", "netns", "exec", l.srv, tc, "qdisc", "add", "dev", l.dev, "root", "netem", "delay", "20ms"); err != nil {
			// netem is a kernel module: a kernel without it (as in some
			// containers) cannot add latency, whatever is installed.
			t.Skipf("this kernel cannot add latency with netem: %v", err)
		}
		r := l.run(t, l.cli, append(append([]string{"ping", "-n", "10"}, cli...), s.addr)...)
		if r.code != 0 {
			t.Fatalf("ping: %s", r)
		}
		// "10 pings to ADDR: min 20.1ms  p50 ..."
		f := strings.Fields(r.stdout)
		i := slices.Index(f, "min")
		if i < 0 || i+1 >= len(f) {
			t.Fatalf("ping printed %q", r.stdout)
		}
		min, err := time.ParseDuration(f[i+1])
		if err != nil || min < delay {
			t.Fatalf("ping min %s with %v of added latency: %s", f[i+1], delay, r.stdout)
		}
		// Nothing is lost: 50 concurrent increments all land.
		var wg sync.WaitGroup
		var bad atomic.Int32
		callIn(t, cli, "Counter.Set", `{"name":"lat","value":0}`)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if r := callIn(t, cli, "Counter.Inc", `{"name":"lat"}`); r.code != 0 {
						bad.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		got := callIn(t, cli, "Counter.Get", `{"name":"lat"}`)
		if bad.Load() != 0 || strings.TrimSpace(got.stdout) != `{"name":"lat","value":"50"}` {
			t.Fatalf("with latency: %d calls failed; counter %s", bad.Load(), got)
		}
		t.Logf("with %v of netem delay: %s", delay, strings.TrimSpace(r.stdout))
	})
}

// loopResult is one call of the "loop" helper.
type loopResult struct {
	OK    bool      `json:"ok"`
	Code  string    `json:"code,omitempty"`
	Ms    int64     `json:"ms"`
	Start time.Time `json:"start"`
	Value int64     `json:"value,omitempty"`
}

// helperClientTLS is the TLS configuration of a helper's client, from the
// certificates in dir.
func helperClientTLS(dir string) (*tls.Config, error) {
	kp, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem"))
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b)
	return &tls.Config{Certificates: []tls.Certificate{kp}, RootCAs: roots, MinVersion: tls.VersionTLS13}, nil
}

// TestNetnsHelper is not a test: the tests above run the test binary with
// WARREN_NETNS_HELPER set, in a namespace, as a long-lived client or
// server. It exits when its standard input closes or it is killed.
func TestNetnsHelper(t *testing.T) {
	mode := os.Getenv("WARREN_NETNS_HELPER")
	if mode == "" {
		t.Skip("a helper process of the netns tests, run by them")
	}
	go func() {
		bufio.NewReader(os.Stdin).ReadByte()
		os.Exit(0)
	}()
	err := runHelper(mode, os.Getenv("WARREN_HELPER_ADDR"), os.Getenv("WARREN_HELPER_CERTS"))
	fmt.Fprintln(os.Stderr, "helper:", err)
	os.Exit(1)
}

func runHelper(mode, addr, certs string) error {
	switch mode {
	case "loop":
		return helperLoop(addr, certs)
	case "bench-server":
		return helperBenchServer(addr, certs)
	case "bench-client":
		return helperBenchClient(addr, certs)
	case "rolling":
		return helperRolling(addr)
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

func helperDial(addr, certs string) (*rpc.Client, error) {
	opts := &rpc.ClientOptions{MinBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}
	if certs != "" {
		conf, err := helperClientTLS(certs)
		if err != nil {
			return nil, err
		}
		opts.Dial = &transport.DialConfig{TLS: conf}
	}
	return rpc.Dial(addr, opts)
}

// helperLoop calls Counter.Inc every 100 ms with a 1 s deadline and prints
// each outcome as a JSON line.
func helperLoop(addr, certs string) error {
	c, err := helperDial(addr, certs)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		reply, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "link"})
		cancel()
		r := loopResult{OK: err == nil, Ms: time.Since(start).Milliseconds(), Start: start}
		if err != nil {
			r.Code = status.CodeOf(err).String()
			if status.CodeOf(err) == status.NotFound {
				// The first call: create the counter.
				_, err = rpc.Call[counter.SetRequest, counter.Entry](context.Background(), c, "Counter.Set", &counter.SetRequest{Name: "link"})
				if err != nil {
					return err
				}
				continue
			}
		} else {
			r.Value = reply.Value
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
		time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
	}
}

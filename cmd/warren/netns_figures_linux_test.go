package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// figures is what the "bench-client" helper measures against a
// "bench-server": round trips (protocol pings, as warren ping) and 1 KiB
// raw-codec echo calls, from one caller and from 16 on one connection.
type figures struct {
	Pings      int           `json:"pings"`
	PingMin    time.Duration `json:"ping_min"`
	PingP50    time.Duration `json:"ping_p50"`
	PingP99    time.Duration `json:"ping_p99"`
	Calls1     float64       `json:"calls_per_s_1"`  // one caller
	Calls16    float64       `json:"calls_per_s_16"` // 16 concurrent callers
	CallErrors int64         `json:"call_errors"`
}

// figureSeconds is how long each call loop runs: 0.5 s, or
// WARREN_FIGURES_SECONDS.
func figureSeconds() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("WARREN_FIGURES_SECONDS"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 500 * time.Millisecond
}

// TestNetnsFigures measures round trips and 1 KiB calls/s over tcp and tls
// across the veth pair, and over a unix socket on the same machine, with
// the same client and server processes (bench/results/remote.md). It
// checks only that every call succeeds; the figures are logged (-v).
//
//	WARREN_FIGURES_SECONDS=3 WARREN_FIGURES_ROUNDS=3 go test ./cmd/warren -run TestNetnsFigures -v
func TestNetnsFigures(t *testing.T) {
	l := newVethLink(t)
	certs := certsIn(t, "--host", l.srvIP)
	sock := "unix://" + filepath.Join(shortTempDir(t), "b.sock")
	rows := []struct{ name, ns, addr string }{
		{"unix (same machine)", l.srv, sock},
		{"tcp (veth)", l.srv, "tcp://" + l.srvIP + ":7000"},
		{"tls (veth)", l.srv, "tls://" + l.srvIP + ":7443"},
	}
	// Rounds (WARREN_FIGURES_ROUNDS, default 1) go through the rows in
	// turn, so that a busy moment of the machine spreads over all of
	// them; the table shows each figure's median.
	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("WARREN_FIGURES_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	got := make([][]figures, len(rows))
	for range rounds {
		for i, row := range rows {
			got[i] = append(got[i], measureRow(t, l, row.ns, row.addr, certs, row.addr == sock))
		}
	}
	t.Logf("%d round(s) of %v per call loop; medians", rounds, figureSeconds())
	t.Logf("%-20s %10s %10s %10s %14s %14s", "transport", "ping min", "ping p50", "ping p99", "1 KiB calls/s", "x16 callers")
	for i, row := range rows {
		med := func(f func(figures) float64) float64 {
			v := make([]float64, len(got[i]))
			for j, g := range got[i] {
				v[j] = f(g)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		dur := func(f func(figures) time.Duration) string {
			return fmtDur(time.Duration(med(func(g figures) float64 { return float64(f(g)) })))
		}
		t.Logf("%-20s %10s %10s %10s %14.0f %14.0f", row.name,
			dur(func(g figures) time.Duration { return g.PingMin }),
			dur(func(g figures) time.Duration { return g.PingP50 }),
			dur(func(g figures) time.Duration { return g.PingP99 }),
			med(func(g figures) float64 { return g.Calls1 }),
			med(func(g figures) float64 { return g.Calls16 }))
	}
}

// measureRow runs a bench server at addr in namespace ns and a bench
// client against it, in the client's namespace unless local.
func measureRow(t *testing.T, l *vethLink, ns, addr, certs string, local bool) figures {
	t.Helper()
	srvEnv := cmdEnv(t, "WARREN_NETNS_HELPER=bench-server", "WARREN_HELPER_ADDR="+addr, "WARREN_HELPER_CERTS="+certs)
	srv := l.start(t, ns, srvEnv, os.Args[0], "-test.run=^TestNetnsHelper$")
	defer func() {
		srv.cmd.Process.Kill()
		srv.wait()
	}()
	line := srv.line()
	ep, ok := strings.CutPrefix(line, "listening on ")
	if !ok {
		t.Fatalf("bench server: %q; stderr:\n%s", line, srv.stderr)
	}
	clientNS := l.cli
	if local {
		clientNS = ns
	}
	cliEnv := cmdEnv(t, "WARREN_NETNS_HELPER=bench-client", "WARREN_HELPER_ADDR="+ep, "WARREN_HELPER_CERTS="+certs,
		"WARREN_FIGURES_SECONDS="+strconv.FormatFloat(figureSeconds().Seconds(), 'f', -1, 64))
	c := l.start(t, clientNS, cliEnv, os.Args[0], "-test.run=^TestNetnsHelper$")
	defer func() {
		c.cmd.Process.Kill()
		c.wait()
	}()
	var f figures
	if err := json.Unmarshal([]byte(c.line()), &f); err != nil {
		t.Fatalf("%s: %v; stderr:\n%s", addr, err, c.stderr)
	}
	if f.CallErrors != 0 || f.Calls1 == 0 || f.Calls16 == 0 {
		t.Fatalf("%s: %+v", addr, f)
	}
	return f
}

// helperBenchServer serves Test.EchoRaw on addr (tls: with client
// certificates from certs required) and prints "listening on ADDR".
func helperBenchServer(addr, certs string) error {
	cfg := &transport.ListenConfig{}
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return err
	}
	if isTLS(a) {
		kp, err := tls.LoadX509KeyPair(filepath.Join(certs, "server.pem"), filepath.Join(certs, "server-key.pem"))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(b)
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	}
	ln, err := transport.Listen(addr, cfg)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(nil)
	rpc.HandleRaw(srv, "Test.EchoRaw", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	fmt.Printf("listening on %s\n", ln.Endpoint())
	return srv.Serve(ln)
}

// helperBenchClient measures figures against a bench server and prints
// them as one JSON line.
func helperBenchClient(addr, certs string) error {
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return err
	}
	if !isTLS(a) {
		certs = ""
	}
	c, err := helperDial(addr, certs)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var f figures
	const pings = 2000
	rtts := make([]time.Duration, 0, pings)
	for i := range pings + 100 {
		rtt, err := c.Ping(ctx)
		if err != nil {
			return err
		}
		if i >= 100 { // warm-up
			rtts = append(rtts, rtt)
		}
	}
	slices.Sort(rtts)
	f.Pings, f.PingMin, f.PingP50, f.PingP99 = len(rtts), rtts[0], quantile(rtts, 0.5), quantile(rtts, 0.99)

	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte(i)
	}
	d := figureSeconds()
	var errs atomic.Int64
	loop := func(callers int) float64 {
		var total atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		start := time.Now()
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var resp []byte
				n := int64(0)
				for time.Now().Before(stop) {
					if err := c.Invoke(ctx, "Test.EchoRaw", payload, &resp); err != nil || len(resp) != len(payload) {
						errs.Add(1)
					}
					n++
				}
				total.Add(n)
			}()
		}
		wg.Wait()
		return float64(total.Load()) / time.Since(start).Seconds()
	}
	var resp []byte
	for range 200 { // warm-up
		if err := c.Invoke(ctx, "Test.EchoRaw", payload, &resp); err != nil {
			return err
		}
	}
	f.Calls1 = loop(1)
	f.Calls16 = loop(16)
	f.CallErrors = errs.Load()
	return json.NewEncoder(os.Stdout).Encode(f)
}

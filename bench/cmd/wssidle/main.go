// Command wssidle measures what an idle WebSocket connection costs a warren
// server with and without TLS: the server's resident memory and Go heap per
// connection with N connections open and idle, over ws:// in goroutine and
// event-loop mode and over wss:// in goroutine mode (the only mode a wss
// listener has: rpc.ServerOptions.EventLoop falls back to goroutines for
// it). The difference between wss and ws in goroutine mode is the TLS state
// an event loop would have to keep per connection (BENCHMARKS.md, and
// bench/results/remote.md).
//
//	cd bench && go run ./cmd/wssidle [-conns 2000] [-reps 3]
//
// Each measurement runs a fresh server child process (this program with
// WSSIDLE_CHILD set); the parent dials with the warren Go client (TLS 1.3,
// ECDSA P-256 certificate), pings once on each connection, and then leaves
// them idle. Linux only (it reads /proc).
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenipc/warren/bench/idle"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// usage is the child's answer to "stats": its memory after a GC.
type usage struct {
	RSS       int64 `json:"rss"`        // resident set, bytes
	HeapInuse int64 `json:"heap_inuse"` // Go heap spans in use
	Stack     int64 `json:"stack"`      // goroutine stacks
	Conns     int   `json:"conns"`
}

func main() {
	if os.Getenv("WSSIDLE_CHILD") != "" {
		if err := child(os.Getenv("WSSIDLE_CHILD")); err != nil {
			fmt.Fprintln(os.Stderr, "wssidle child:", err)
			os.Exit(1)
		}
		return
	}
	conns := flag.Int("conns", 2000, "idle connections per measurement")
	reps := flag.Int("reps", 3, "repetitions; the table shows medians")
	settle := flag.Duration("settle", 2*time.Second, "idle time before reading the server's memory")
	flag.Parse()
	if _, err := idle.RaiseFileLimit(); err != nil {
		fmt.Fprintln(os.Stderr, "wssidle:", err)
		os.Exit(1)
	}
	cert, pool, err := selfSigned()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wssidle:", err)
		os.Exit(1)
	}
	certFile, err := writeTemp(cert)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wssidle:", err)
		os.Exit(1)
	}
	defer os.Remove(certFile)
	fmt.Printf("%d idle connections, medians of %d runs; per connection: server RSS, Go heap in use, goroutine stacks\n", *conns, *reps)
	fmt.Printf("%-22s %12s %12s %12s\n", "server", "RSS/conn", "heap/conn", "stack/conn")
	for _, mode := range []string{"ws goroutine", "ws eventloop", "wss goroutine", "wss eventloop"} {
		var rss, heap, stack []float64
		for range *reps {
			u0, u1, err := measure(mode, certFile, pool, *conns, *settle)
			if err != nil {
				fmt.Fprintf(os.Stderr, "wssidle: %s: %v\n", mode, err)
				os.Exit(1)
			}
			n := float64(*conns)
			rss = append(rss, float64(u1.RSS-u0.RSS)/n)
			heap = append(heap, float64(u1.HeapInuse-u0.HeapInuse)/n)
			stack = append(stack, float64(u1.Stack-u0.Stack)/n)
		}
		fmt.Printf("%-22s %10.0f B %10.0f B %10.0f B\n", mode, median(rss), median(heap), median(stack))
	}
	fmt.Println("(wss eventloop: rpc.ServerOptions.EventLoop set; Serve falls back to a goroutine per connection for wss)")
	var heap []float64
	for range *reps {
		h, err := tlsConnHeap(cert, pool, *conns)
		if err != nil {
			fmt.Fprintln(os.Stderr, "wssidle: tls.Conn:", err)
			os.Exit(1)
		}
		heap = append(heap, h)
	}
	fmt.Printf("%-22s %12s %10.0f B %12s\n", "tls.Conn alone", "", median(heap), "")
	fmt.Println("(tls.Conn alone: Go heap held by a server-side crypto/tls connection after its handshake and one")
	fmt.Println(" small record each way, measured in this process over net.Pipe: the state an event loop would keep)")
}

// tlsConnHeap returns the Go heap that n idle server-side tls.Conns hold,
// per connection, after their handshakes and one record each way.
func tlsConnHeap(certPEM []byte, pool *x509.CertPool, n int) (float64, error) {
	kp, err := tls.X509KeyPair(certPEM, certPEM)
	if err != nil {
		return 0, err
	}
	srvConf := &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS13}
	cliConf := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	heapInuse := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse)
	}
	servers := make([]*tls.Conn, n)
	before := heapInuse()
	for i := range servers {
		a, b := net.Pipe()
		srv, cli := tls.Server(a, srvConf), tls.Client(b, cliConf)
		errc := make(chan error, 1)
		go func() {
			buf := make([]byte, 16)
			if _, err := io.ReadFull(srv, buf); err != nil {
				errc <- err
				return
			}
			_, err := srv.Write(buf)
			errc <- err
		}()
		msg := make([]byte, 16)
		if _, err := cli.Write(msg); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(cli, msg); err != nil {
			return 0, err
		}
		if err := <-errc; err != nil {
			return 0, err
		}
		servers[i] = srv // the client side is dropped
	}
	after := heapInuse()
	runtime.KeepAlive(servers)
	return float64(after-before) / float64(n), nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// measure starts a child server in mode, reads its memory, opens n
// connections, lets them idle and reads it again.
func measure(mode, certFile string, pool *x509.CertPool, n int, settle time.Duration) (before, after usage, err error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "WSSIDLE_CHILD="+mode, "WSSIDLE_CERT="+certFile)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return before, after, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return before, after, err
	}
	if err := cmd.Start(); err != nil {
		return before, after, err
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	out := bufio.NewScanner(outPipe)
	if !out.Scan() {
		return before, after, fmt.Errorf("the child said nothing")
	}
	addr := out.Text()
	stats := func() (usage, error) {
		var u usage
		if _, err := fmt.Fprintln(in, "stats"); err != nil {
			return u, err
		}
		if !out.Scan() {
			return u, fmt.Errorf("the child ended")
		}
		return u, json.Unmarshal(out.Bytes(), &u)
	}
	if before, err = stats(); err != nil {
		return before, after, err
	}
	opts := &rpc.ClientOptions{Dial: &transport.DialConfig{TLS: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}}}
	clients := make([]*rpc.Client, 0, n)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range n {
		c, err := rpc.Dial(addr, opts)
		if err != nil {
			return before, after, err
		}
		clients = append(clients, c)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Ping(ctx)
		cancel()
		if err != nil {
			return before, after, fmt.Errorf("ping %s: %w", addr, err)
		}
	}
	time.Sleep(settle)
	after, err = stats()
	if err == nil && after.Conns != n {
		err = fmt.Errorf("the server has %d connections, want %d", after.Conns, n)
	}
	return before, after, err
}

// child serves on ws:// or wss:// 127.0.0.1 in mode, prints its address,
// and answers "stats" lines until its stdin closes.
func child(mode string) error {
	if _, err := idle.RaiseFileLimit(); err != nil {
		return err
	}
	scheme, how, _ := strings.Cut(mode, " ")
	cfg := &transport.ListenConfig{}
	if scheme == "wss" {
		kp, err := tls.LoadX509KeyPair(os.Getenv("WSSIDLE_CERT"), os.Getenv("WSSIDLE_CERT"))
		if err != nil {
			return err
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS13}
	}
	ln, err := transport.Listen(scheme+"://127.0.0.1:0/warren", cfg)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(&rpc.ServerOptions{EventLoop: how == "eventloop", MaxConns: -1, MaxConnsPerUID: -1})
	go srv.Serve(ln)
	fmt.Println(ln.Endpoint())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		u := usage{RSS: rss(), HeapInuse: int64(ms.HeapInuse), Stack: int64(ms.StackInuse), Conns: srv.Stats().Conns}
		b, _ := json.Marshal(u)
		fmt.Println(string(b))
	}
	srv.Close()
	return nil
}

// rss returns this process's resident set size from /proc/self/status.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// selfSigned returns a PEM certificate and key for localhost and a pool
// that trusts it.
func selfSigned() ([]byte, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	out := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...), pool, nil
}

// writeTemp writes b to a new temporary file and returns its name.
func writeTemp(b []byte) (string, error) {
	f, err := os.CreateTemp("", "wssidle-*.pem")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}

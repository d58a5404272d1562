package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// The benchmarks run the server either in this process (so allocations of
// client and server are counted together) or, for the Separate variants, in
// a child process (as deployed; allocations are then the client's only).
//
//	go test ./rpc -run '^$' -bench . -benchmem -count 6

var benchSizes = []int{128, 1024, 100 << 10, 1 << 20}

func benchServer() *Server {
	// WARREN_BENCH_METRICS=1: with ServerOptions.Metrics (BENCHMARKS.md, "Metrics").
	srv := NewServer(&ServerOptions{CallRate: -1, Metrics: os.Getenv("WARREN_BENCH_METRICS") == "1"})
	HandleRaw(srv, "Bench.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	return srv
}

// startChildServer runs the benchmark server in a child process on a unix
// socket and returns its path.
func startChildServer(b *testing.B, env ...string) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServerProcess$")
	cmd.Env = append(os.Environ(), "WARREN_BENCH_SERVER="+path)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line := make([]byte, 6)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "ready\n" {
		b.Fatalf("child server did not start: %q %v", line, err)
	}
	return path
}

// TestBenchServerProcess is the child side of the Separate benchmarks; it
// does nothing in a normal test run.
func TestBenchServerProcess(t *testing.T) {
	path := os.Getenv("WARREN_BENCH_SERVER")
	if path == "" {
		return
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("WARREN_BENCH_RAW") != "" {
		fmt.Println("ready")
		rawEcho(l)
		os.Exit(0)
	}
	srv := benchServer()
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		srv.Close()
	}()
	fmt.Println("ready")
	if err := srv.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
	os.Exit(0)
}

func benchClient(b *testing.B, path string) *Client {
	c, err := Dial("unix://"+path, &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func inProcessPath(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "bench.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	srv := benchServer()
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	b.Cleanup(func() { srv.Close(); <-done })
	return path
}

func runUnary(b *testing.B, path string, size, callers int) {
	c := benchClient(b, path)
	req := make([]byte, size)
	ctx := context.Background()
	var out []byte
	if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil { // connect and warm up
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for range b.N {
			if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	var wg sync.WaitGroup
	per := b.N / callers
	for i := range callers {
		n := per
		if i == 0 {
			n += b.N % callers
		}
		wg.Go(func() {
			var out []byte
			for range n {
				if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkUnary: server in this process; allocs/op counts both sides.
func BenchmarkUnary(b *testing.B) {
	for _, callers := range []int{1, 16} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("callers=%d/size=%s", callers, sizeName(size)), func(b *testing.B) {
				runUnary(b, inProcessPath(b), size, callers)
			})
		}
	}
}

// BenchmarkUnarySeparate: server in a child process; allocs/op is the
// client's alone.
func BenchmarkUnarySeparate(b *testing.B) {
	for _, callers := range []int{1, 16} {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("callers=%d/size=%s", callers, sizeName(size)), func(b *testing.B) {
				runUnary(b, startChildServer(b), size, callers)
			})
		}
	}
}

// rawEcho echoes 128-byte messages on the first connection l accepts.
func rawEcho(l net.Listener) {
	conn, err := l.Accept()
	if err != nil {
		return
	}
	defer conn.Close()
	buf := make([]byte, 128)
	for {
		if _, err := io.ReadFull(conn, buf); err != nil {
			return
		}
		if _, err := conn.Write(buf); err != nil {
			return
		}
	}
}

func runRawPingPong(b *testing.B, path string) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 128)
	b.SetBytes(128)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawPingPong is the floor the sequential round trip is measured
// against: 128 bytes each way over a bare unix socket in Go, with the echo
// server in this process or in a child process.
func BenchmarkRawPingPong(b *testing.B) {
	b.Run("inprocess", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "raw.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		done := make(chan struct{})
		go func() { rawEcho(l); close(done) }()
		runRawPingPong(b, path)
		l.Close()
		<-done
	})
	b.Run("separate", func(b *testing.B) {
		runRawPingPong(b, startChildServer(b, "WARREN_BENCH_RAW=1"))
	})
}

// BenchmarkLoneCaller is the sequential round trip of the bench module's
// seqrtt scenario: one caller, 128-byte echo calls one at a time, with a
// context that can be canceled as callers' contexts usually can, the server
// in a child process. It runs warren, dialed as users dial (transport,
// unix socket), and the bare Go socket ping-pong of the same bytes, so
// that one command shows both; p50-us is the median round trip.
//
//	go test ./rpc -run '^$' -bench LoneCaller -count 6
func BenchmarkLoneCaller(b *testing.B) {
	b.Run("warren", func(b *testing.B) {
		path := startChildServer(b)
		c, err := Dial("unix://"+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := make([]byte, 128)
		var out []byte
		loneCalls(b, func() error { return c.Invoke(ctx, "Bench.Echo", &req, &out) })
	})
	b.Run("raw", func(b *testing.B) {
		conn, err := net.Dial("unix", startChildServer(b, "WARREN_BENCH_RAW=1"))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		buf := make([]byte, 128)
		loneCalls(b, func() error {
			if _, err := conn.Write(buf); err != nil {
				return err
			}
			_, err := io.ReadFull(conn, buf)
			return err
		})
	})
}

// loneCalls runs call b.N times after a warm-up, reporting the median
// round trip as p50-us.
func loneCalls(b *testing.B, call func() error) {
	for range 1000 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	b.SetBytes(128)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-us")
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

package rpc

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// Streaming benchmarks. Each runs with the server in this process
// ("inprocess": allocations of both sides are counted) and in a child
// process ("separate": as deployed; allocations are the client's alone).
//
//	go test ./rpc -run '^$' -bench Stream -benchmem -count 5
//
// BenchmarkStreamEcho1MiB puts warren next to a bare unix socket in Go that
// echoes the same 1 MiB messages in the same process setup, so the ratio of
// their MB/s is read off one run; "mux" is the session layer alone (no
// codec, no typed messages), which tells the rpc layer's share.

const streamBenchMaxMsg = 128 << 20

func streamBenchServer() *Server {
	srv := NewServer(&ServerOptions{CallRate: -1, Settings: wire.Settings{MaxMessageSize: streamBenchMaxMsg}})
	// SB.Echo echoes raw messages.
	HandleBidiStream(srv, "SB.Echo", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		var m []byte // reused: RecvMsg copies into its capacity
		for {
			err := st.RecvMsg(&m)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(&m); err != nil {
				return err
			}
		}
	})
	// SB.Sink counts the messages it receives.
	HandleClientStream(srv, "SB.Sink", func(ctx context.Context, st *Stream[[]byte, []byte]) (*[]byte, error) {
		var n uint64
		var m []byte
		for {
			err := st.RecvMsg(&m)
			if err == io.EOF {
				reply := binary.BigEndian.AppendUint64(nil, n)
				return &reply, nil
			}
			if err != nil {
				return nil, err
			}
			n++
		}
	})
	// SB.Source sends messages of the requested size (a big-endian u64)
	// until the call is canceled.
	HandleServerStream(srv, "SB.Source", func(ctx context.Context, req *[]byte, st *Stream[[]byte, []byte]) error {
		if len(*req) != 8 {
			return errors.New("want an 8-byte size")
		}
		msg := make([]byte, binary.BigEndian.Uint64(*req))
		for {
			if err := st.Send(&msg); err != nil {
				return err
			}
		}
	})
	HandleRaw(srv, "SB.Unary", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	return srv
}

// rawStreamEcho echoes fixed-size messages on every connection l accepts:
// read a whole message, write it back.
func rawStreamEcho(l net.Listener, size int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer conn.Close()
			buf := make([]byte, size)
			for {
				if _, err := io.ReadFull(conn, buf); err != nil {
					return
				}
				if _, err := conn.Write(buf); err != nil {
					return
				}
			}
		})
	}
}

// TestStreamBenchServerProcess is the child side of the separate streaming
// benchmarks; it does nothing in a normal test run.
func TestStreamBenchServerProcess(t *testing.T) {
	path := os.Getenv("WARREN_STREAM_BENCH_SERVER")
	if path == "" {
		return
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	mode := os.Getenv("WARREN_STREAM_BENCH_MODE")
	// WARREN_STREAM_BENCH_CPUPROFILE=prefix writes the child's CPU profile
	// to prefix.<mode> when the benchmark ends, to profile the server side.
	stopProfile := func() {}
	if prefix := os.Getenv("WARREN_STREAM_BENCH_CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + "." + cmp.Or(mode, "warren"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt)
		<-sig
		stopProfile()
		os.Exit(0)
	}()
	fmt.Println("ready")
	switch mode {
	case "raw":
		rawStreamEcho(l, 1<<20)
	case "mux":
		muxEcho(l)()
	default:
		streamBenchServer().Serve(l)
	}
	os.Exit(0)
}

// muxEcho serves, on every connection l accepts, mux sessions whose streams
// echo every message: the session layer alone, without the rpc layer's
// codec and typed messages. It returns when l is closed, with a function
// that closes the sessions.
func muxEcho(l net.Listener) (closeAll func()) {
	var mu sync.Mutex
	var sessions []*mux.Session
	var handlers sync.WaitGroup
	ctx := context.Background()
	cfg := &mux.Config{
		Settings: wire.Settings{MaxMessageSize: streamBenchMaxMsg},
		OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			handlers.Go(func() {
				for {
					m, err := st.Recv(ctx)
					if err == io.EOF {
						st.Finish(ctx, mux.Reply{Code: 0})
						return
					}
					if err != nil {
						return
					}
					err = st.Send(ctx, m.B, false)
					pool.Put(m)
					if err != nil {
						return
					}
				}
			})
		},
	}
	var conns sync.WaitGroup
	for {
		conn, err := l.Accept()
		if err != nil {
			break
		}
		conns.Go(func() {
			s, err := mux.Server(conn, cfg)
			if err != nil {
				return
			}
			mu.Lock()
			sessions = append(sessions, s)
			mu.Unlock()
		})
	}
	return func() {
		conns.Wait()
		mu.Lock()
		for _, s := range sessions {
			s.Close()
		}
		mu.Unlock()
		handlers.Wait()
	}
}

// streamBenchPath starts a benchmark server in this process or in a child
// and returns its socket path. mode is "warren" (streamBenchServer), "raw"
// (rawStreamEcho) or "mux" (muxEcho).
func streamBenchPath(b *testing.B, separate bool, mode string) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "sb.sock")
	if separate {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStreamBenchServerProcess$")
		cmd.Env = append(os.Environ(), "WARREN_STREAM_BENCH_SERVER="+path, "WARREN_STREAM_BENCH_MODE="+mode)
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
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			b.Fatalf("child server did not start: %q %v", line, err)
		}
		return path
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	switch mode {
	case "raw":
		go func() { rawStreamEcho(l, 1<<20); close(done) }()
		b.Cleanup(func() { l.Close(); <-done })
		return path
	case "mux":
		closeAll := make(chan func(), 1)
		go func() { closeAll <- muxEcho(l) }()
		b.Cleanup(func() { l.Close(); (<-closeAll)() })
		return path
	}
	srv := streamBenchServer()
	go func() { srv.Serve(l); close(done) }()
	b.Cleanup(func() { srv.Close(); <-done })
	return path
}

func streamBenchClient(b *testing.B, path string) *Client {
	c, err := Dial("unix://"+path, &ClientOptions{
		Settings: wire.Settings{MaxMessageSize: streamBenchMaxMsg},
		Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

var streamPlacements = []struct {
	name     string
	separate bool
}{{"separate", true}, {"inprocess", false}}

// BenchmarkStreamEcho1MiB: 1 MiB raw messages echoed on one bidirectional
// stream, one goroutine sending while another receives; MB/s counts each
// message once. "raw" is a bare unix socket doing the same.
func BenchmarkStreamEcho1MiB(b *testing.B) {
	const size = 1 << 20
	for _, p := range streamPlacements {
		b.Run("warren/"+p.name, func(b *testing.B) {
			runStreamEcho(b, streamBenchClient(b, streamBenchPath(b, p.separate, "warren")), size)
		})
		b.Run("mux/"+p.name, func(b *testing.B) {
			runMuxEcho(b, streamBenchPath(b, p.separate, "mux"), size)
		})
		b.Run("raw/"+p.name, func(b *testing.B) {
			runRawStreamEcho(b, streamBenchPath(b, p.separate, "raw"), size)
		})
	}
}

// runStreamEcho echoes b.N messages of size bytes on one SB.Echo stream.
func runStreamEcho(b *testing.B, c *Client, size int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := NewStream[[]byte, []byte](ctx, c, "SB.Echo", WithCodec(codec.Raw))
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, size)
	for range 8 { // warm up pools, windows and the connection
		if err := cs.Send(&msg); err != nil {
			b.Fatal(err)
		}
		if _, err := cs.Recv(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sendErr := make(chan error, 1)
	go func() {
		for range b.N {
			if err := cs.Send(&msg); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	var m []byte
	for range b.N {
		if err := cs.RecvMsg(&m); err != nil {
			b.Fatal(err)
		}
		if len(m) != size {
			b.Fatalf("echo of %d bytes", len(m))
		}
	}
	b.StopTimer()
	reportRate(b, "msgs/s")
	if err := <-sendErr; err != nil {
		b.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.Recv(); err != io.EOF {
		b.Fatal(err)
	}
}

// runMuxEcho is runStreamEcho on a bare mux session.
func runMuxEcho(b *testing.B, path string, size int) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	sess, err := mux.Client(conn, &mux.Config{Settings: wire.Settings{MaxMessageSize: streamBenchMaxMsg}})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	ctx, cancel := context.WithCancel(context.Background()) // cancelable, as a ClientStream's
	defer cancel()
	st, err := sess.Open(ctx, mux.Call{Method: "X.Echo", Codec: codec.IDRaw})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	msg := make([]byte, size)
	for range 8 {
		if err := st.Send(ctx, msg, false); err != nil {
			b.Fatal(err)
		}
		m, err := st.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pool.Put(m)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sendErr := make(chan error, 1)
	go func() {
		for range b.N {
			if err := st.Send(ctx, msg, false); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	for range b.N {
		m, err := st.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pool.Put(m)
	}
	b.StopTimer()
	reportRate(b, "msgs/s")
	if err := <-sendErr; err != nil {
		b.Fatal(err)
	}
}

func runRawStreamEcho(b *testing.B, path string, size int) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	out := make([]byte, size)
	in := make([]byte, size)
	for range 8 {
		if _, err := conn.Write(out); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, in); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sendErr := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := conn.Write(out); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	for range b.N {
		if _, err := io.ReadFull(conn, in); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b, "msgs/s")
	if err := <-sendErr; err != nil {
		b.Fatal(err)
	}
}

func reportRate(b *testing.B, unit string) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, unit)
	}
}

// BenchmarkStream1KiB: 1 KiB raw messages on one stream, one way (client to
// server, SB.Sink) and echoed (SB.Echo, send and receive concurrently).
func BenchmarkStream1KiB(b *testing.B) {
	const size = 1 << 10
	for _, p := range streamPlacements {
		b.Run("oneway/"+p.name, func(b *testing.B) {
			c := streamBenchClient(b, streamBenchPath(b, p.separate, "warren"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs, err := NewStream[[]byte, []byte](ctx, c, "SB.Sink", WithCodec(codec.Raw))
			if err != nil {
				b.Fatal(err)
			}
			msg := make([]byte, size)
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := cs.Send(&msg); err != nil {
					b.Fatal(err)
				}
			}
			r, err := cs.CloseAndRecv() // every message has arrived
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			if n := binary.BigEndian.Uint64(*r); n != uint64(b.N) {
				b.Fatalf("server received %d messages of %d", n, b.N)
			}
			reportRate(b, "msgs/s")
		})
		b.Run("echo/"+p.name, func(b *testing.B) {
			runStreamEcho(b, streamBenchClient(b, streamBenchPath(b, p.separate, "warren")), size)
		})
	}
}

// BenchmarkStreamLatencyUnderLoad: the latency of sequential 1 KiB unary
// calls on a connection that also carries 64 MiB messages on one stream,
// continuously: uploaded (client to server), downloaded (server to client),
// or none (idle, for reference). p50, p99 and max are reported in µs;
// big-MB/s is the large messages' throughput meanwhile.
func BenchmarkStreamLatencyUnderLoad(b *testing.B) {
	const big = 64 << 20
	for _, p := range streamPlacements {
		for _, load := range []string{"idle", "upload64MiB", "download64MiB"} {
			b.Run(load+"/"+p.name, func(b *testing.B) {
				c := streamBenchClient(b, streamBenchPath(b, p.separate, "warren"))
				ctx, cancel := context.WithCancel(context.Background())
				var moved atomic.Int64
				var wg sync.WaitGroup
				inFlight := make(chan struct{})
				switch load {
				case "upload64MiB":
					cs, err := NewStream[[]byte, []byte](ctx, c, "SB.Sink", WithCodec(codec.Raw))
					if err != nil {
						b.Fatal(err)
					}
					msg := make([]byte, big)
					wg.Go(func() {
						close(inFlight)
						for cs.Send(&msg) == nil {
							moved.Add(big)
						}
					})
				case "download64MiB":
					size := binary.BigEndian.AppendUint64(nil, big)
					cs, err := NewStream[[]byte, []byte](ctx, c, "SB.Source", WithCodec(codec.Raw))
					if err == nil {
						err = cs.Send(&size)
					}
					if err == nil {
						err = cs.CloseSend()
					}
					if err != nil {
						b.Fatal(err)
					}
					wg.Go(func() {
						close(inFlight)
						for {
							if _, err := cs.Recv(); err != nil {
								return
							}
							moved.Add(big)
						}
					})
				default:
					close(inFlight)
				}
				<-inFlight
				req := make([]byte, 1<<10)
				var out []byte
				if err := c.Invoke(ctx, "SB.Unary", &req, &out); err != nil {
					b.Fatal(err)
				}
				time.Sleep(20 * time.Millisecond) // the first large message is under way
				lat := make([]time.Duration, 0, b.N)
				moved.Store(0)
				b.SetBytes(1 << 10)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					if err := c.Invoke(ctx, "SB.Unary", &req, &out); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
				}
				b.StopTimer()
				bigRate := float64(moved.Load()) / 1e6 / b.Elapsed().Seconds()
				cancel()
				wg.Wait()
				slices.Sort(lat)
				us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
				b.ReportMetric(us(lat[len(lat)/2]), "p50-us")
				b.ReportMetric(us(lat[len(lat)*99/100]), "p99-us")
				b.ReportMetric(us(lat[len(lat)-1]), "max-us")
				if load != "idle" {
					b.ReportMetric(bigRate, "big-MB/s")
				}
			})
		}
	}
}

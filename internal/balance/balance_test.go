package balance_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/balance"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// quiet servers log nothing.
var quiet = &rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)}

// server is one in-process server, restartable on its address.
type server struct {
	id     int
	hostIP string // 127.0.0.1 unless given
	port   string
	srv    *rpc.Server
	done   chan error
	runs   *atomic.Int64 // executions of T.Inc, over every instance
	held   chan int      // T.Hold entered: the server's id
	free   chan struct{} // closed to end the calls to T.Hold
}

func (s *server) addr() string { return "tcp://" + net.JoinHostPort(s.hostIP, s.port) }

// startServers starts n servers on 127.0.0.1.
func startServers(t *testing.T, n int) []*server {
	t.Helper()
	held, free := make(chan int, 64), make(chan struct{})
	var ss []*server
	for i := range n {
		s := &server{id: i, hostIP: "127.0.0.1", runs: new(atomic.Int64), held: held, free: free}
		s.start(t)
		ss = append(ss, s)
	}
	t.Cleanup(func() {
		select {
		case <-free:
		default:
			close(free)
		}
		for _, s := range ss {
			s.stop()
		}
	})
	return ss
}

func (s *server) start(t *testing.T) {
	t.Helper()
	port := s.port
	if port == "" {
		port = "0"
	}
	l, err := transport.Listen("tcp://"+net.JoinHostPort(s.hostIP, port), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, s.port, _ = net.SplitHostPort(l.Addr().String())
	srv := rpc.NewServer(quiet)
	id := []byte(strconv.Itoa(s.id))
	rpc.HandleRaw(srv, "T.Who", func(ctx context.Context, req []byte) ([]byte, error) { return id, nil })
	rpc.HandleRaw(srv, "T.Inc", func(ctx context.Context, req []byte) ([]byte, error) {
		s.runs.Add(1)
		return id, nil
	})
	rpc.HandleRaw(srv, "T.Hold", func(ctx context.Context, req []byte) ([]byte, error) {
		s.held <- s.id
		select {
		case <-s.free:
			return id, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	rpc.HandleBidiStream(srv, "T.WhoStream", func(ctx context.Context, st *rpc.Stream[msg, msg]) error {
		for {
			if _, err := st.Recv(); err != nil {
				return nil
			}
			if err := st.Send(&msg{ID: s.id}); err != nil {
				return err
			}
		}
	})
	s.srv, s.done = srv, make(chan error, 1)
	go func() { s.done <- srv.Serve(l) }()
}

// shutdown drains the server and waits for it to end.
func (s *server) shutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Errorf("server %d: Shutdown: %v", s.id, err)
	}
	<-s.done
	s.srv = nil
}

func (s *server) stop() {
	if s.srv != nil {
		s.srv.Close()
		<-s.done
		s.srv = nil
	}
}

func addrs(ss []*server) string {
	var a []string
	for _, s := range ss {
		a = append(a, s.addr())
	}
	return strings.Join(a, ",")
}

func dial(t *testing.T, target string, opts *rpc.ClientOptions) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// call makes a raw call and returns the id of the server that answered.
func call(ctx context.Context, c *rpc.Client, method string) (int, error) {
	var out []byte
	if err := c.Invoke(ctx, method, []byte{}, &out); err != nil {
		return -1, err
	}
	return strconv.Atoi(string(out))
}

func whoCounts(t *testing.T, c *rpc.Client, n, servers int) []int {
	t.Helper()
	counts := make([]int, servers)
	for range n {
		id, err := call(context.Background(), c, "T.Who")
		if err != nil {
			t.Fatal(err)
		}
		counts[id]++
	}
	return counts
}

// TestRoundRobin: by default, sequential calls take each server in turn.
func TestRoundRobin(t *testing.T) {
	ss := startServers(t, 3)
	c := dial(t, addrs(ss), nil)
	if got := whoCounts(t, c, 30, 3); got[0] != 10 || got[1] != 10 || got[2] != 10 {
		t.Fatalf("calls per server %v, want 10 each", got)
	}
}

// hold starts a call to T.Hold and waits for a server to run it; it returns
// that server's id and the call's outcome.
func hold(t *testing.T, c *rpc.Client, held chan int) (int, chan error) {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		_, err := call(context.Background(), c, "T.Hold")
		res <- err
	}()
	select {
	case id := <-held:
		return id, res
	case err := <-res:
		t.Fatalf("T.Hold ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("T.Hold never ran")
	}
	return -1, nil
}

// TestLeastOutstanding: with two servers busy, calls go to the idle one;
// round robin goes on spreading them.
func TestLeastOutstanding(t *testing.T) {
	for _, bal := range []string{balance.LeastOutstanding, ""} {
		t.Run("balancer="+bal, func(t *testing.T) {
			ss := startServers(t, 3)
			c := dial(t, addrs(ss), &rpc.ClientOptions{Balancer: bal})
			a, resA := hold(t, c, ss[0].held)
			b, resB := hold(t, c, ss[0].held)
			got := whoCounts(t, c, 12, 3)
			close(ss[0].free)
			for _, r := range []chan error{resA, resB} {
				if err := <-r; err != nil {
					t.Fatal(err)
				}
			}
			idle := 3 - a - b
			if bal == balance.LeastOutstanding {
				if a == b || got[idle] != 12 {
					t.Fatalf("held on %d and %d; calls per server %v, want all 12 on %d", a, b, got, idle)
				}
			} else if got[0] != 4 || got[1] != 4 || got[2] != 4 {
				t.Fatalf("round robin: calls per server %v, want 4 each", got)
			}
		})
	}
}

// TestGoAwayNoNewCalls: a server that drains (Shutdown) gets no new call,
// and the call it runs finishes.
func TestGoAwayNoNewCalls(t *testing.T) {
	ss := startServers(t, 3)
	w := &counting{written: map[string]*atomic.Int64{}}
	c := dial(t, addrs(ss), &rpc.ClientOptions{Dialer: w.dial})
	whoCounts(t, c, 3, 3) // a connection to each
	id, res := hold(t, c, ss[0].held)
	down := make(chan struct{})
	go func() {
		ss[id].shutdown(t)
		close(down)
	}()
	// Wait for the drain to reach the client: the server refuses new
	// connections as soon as it starts, and the held call's reader reads
	// the GOAWAY and answers the PING after it at once.
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("tcp", strings.TrimPrefix(ss[id].addr(), "tcp://"))
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server did not start draining")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	before := w.bytes(ss[id].addr())
	got := whoCounts(t, c, 30, 3)
	if got[id] != 0 || got[0]+got[1]+got[2] != 30 {
		t.Fatalf("calls per server %v: the draining server %d got calls", got, id)
	}
	if after := w.bytes(ss[id].addr()); after != before {
		t.Fatalf("%d bytes written to the draining server during the calls", after-before)
	}
	select {
	case <-down:
		t.Fatal("Shutdown returned with a call in flight")
	default:
	}
	close(ss[0].free)
	if err := <-res; err != nil {
		t.Fatalf("the call in flight on the draining server: %v", err)
	}
	<-down
}

// counting dials tcp and counts the bytes written to each address.
type counting struct {
	mu      sync.Mutex
	written map[string]*atomic.Int64
}

type countConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (w *counting) dial(ctx context.Context, addr string) (net.Conn, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written[addr] == nil {
		w.written[addr] = new(atomic.Int64)
	}
	return countConn{conn, w.written[addr]}, nil
}

func (w *counting) bytes(addr string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written[addr].Load()
}

// TestRollingRestart: callers make calls while each server in turn drains,
// stops and starts again on its address, twice; every call succeeds and
// each ran once.
func TestRollingRestart(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run("single="+strconv.FormatBool(single), func(t *testing.T) {
			n := 3
			if single {
				n = 1
			}
			ss := startServers(t, n)
			c := dial(t, addrs(ss), nil)
			stop := make(chan struct{})
			var ok, failed atomic.Int64
			var wg sync.WaitGroup
			var firstErr atomic.Value
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						_, err := call(ctx, c, "T.Inc")
						cancel()
						if err != nil {
							failed.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						} else {
							ok.Add(1)
						}
					}
				}()
			}
			time.Sleep(50 * time.Millisecond)
			for range 2 {
				for _, s := range ss {
					s.shutdown(t)
					time.Sleep(20 * time.Millisecond) // down for a while
					s.start(t)
					time.Sleep(50 * time.Millisecond)
				}
			}
			close(stop)
			wg.Wait()
			var runs int64
			for _, s := range ss {
				runs += s.runs.Load()
			}
			t.Logf("calls ok %d, failed %d, handler runs %d", ok.Load(), failed.Load(), runs)
			if failed.Load() != 0 {
				t.Fatalf("%d calls failed, first: %v", failed.Load(), firstErr.Load())
			}
			if runs != ok.Load() {
				t.Fatalf("handler ran %d times for %d calls", runs, ok.Load())
			}
			if ok.Load() == 0 {
				t.Fatal("no call made")
			}
		})
	}
}

// cutter dials tcp and can cut every connection it made.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *cutter) dial(ctx context.Context, addr string) (net.Conn, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "tcp", strings.TrimPrefix(addr, "tcp://"))
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
	}
	return conn, err
}

func (d *cutter) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// TestMayHaveRun: a call whose connection is lost after the server ran it
// is retried only if its method is marked WithNoSideEffects.
func TestMayHaveRun(t *testing.T) {
	for _, pure := range []bool{false, true} {
		t.Run("marked="+strconv.FormatBool(pure), func(t *testing.T) {
			l, err := transport.Listen("tcp://127.0.0.1:0", nil)
			if err != nil {
				t.Fatal(err)
			}
			d := new(cutter)
			var runs atomic.Int64
			srv := rpc.NewServer(quiet)
			var opts []rpc.MethodOption
			if pure {
				opts = append(opts, rpc.WithNoSideEffects())
			}
			rpc.HandleRaw(srv, "T.Get", func(ctx context.Context, req []byte) ([]byte, error) {
				if runs.Add(1) == 1 {
					d.cut() // the reply is lost: the call ran
				}
				return []byte("ok"), nil
			}, opts...)
			done := make(chan error, 1)
			go func() { done <- srv.Serve(l) }()
			defer func() {
				srv.Close()
				<-done
			}()
			c := dial(t, "tcp://"+l.Addr().String(), &rpc.ClientOptions{Dialer: d.dial})
			var out []byte
			err = c.Invoke(context.Background(), "T.Get", []byte{}, &out)
			if pure {
				if err != nil || string(out) != "ok" || runs.Load() != 2 {
					t.Fatalf("marked method: %v, reply %q, runs %d; want success after a retry (2 runs)", err, out, runs.Load())
				}
				return
			}
			if status.FromError(err).Code != status.Unavailable || runs.Load() != 1 {
				t.Fatalf("unmarked method: %v, runs %d; want Unavailable after 1 run", err, runs.Load())
			}
		})
	}
}

// TestDNS: dns:///HOST:PORT resolves to tcp addresses, and again after a
// connection is lost.
func TestDNS(t *testing.T) {
	s1 := &server{id: 0, hostIP: "127.0.0.1", runs: new(atomic.Int64)}
	s1.start(t)
	defer s1.stop()
	s2 := &server{id: 1, hostIP: "127.0.0.2", port: s1.port, runs: new(atomic.Int64)}
	l, err := net.Listen("tcp", net.JoinHostPort(s2.hostIP, s2.port))
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	l.Close()
	s2.start(t)
	defer s2.stop()

	var mu sync.Mutex
	var lookups []string
	ip := "127.0.0.1"
	old := balance.LookupHost
	balance.LookupHost = func(ctx context.Context, host string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		lookups = append(lookups, host)
		return []string{ip}, nil
	}
	defer func() { balance.LookupHost = old }()

	c := dial(t, "dns:///svc.test:"+s1.port, nil)
	if got := whoCounts(t, c, 4, 2); got[0] != 4 {
		t.Fatalf("calls per server %v, want all on 127.0.0.1", got)
	}
	mu.Lock()
	ip = "127.0.0.2"
	mu.Unlock()
	s1.shutdown(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, err := call(context.Background(), c, "T.Who")
		if err == nil && id == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never reached the server resolved after the loss: %d, %v", id, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lookups) < 2 || lookups[0] != "svc.test" {
		t.Fatalf("lookups %q", lookups)
	}
}

// TestBadTargets: clear errors for bad input; a client that never reached
// its server fails at once.
func TestBadTargets(t *testing.T) {
	for _, tc := range []struct{ target, want string }{
		{"", "empty address"},
		{"tcp://127.0.0.1:1,foo://x:2", "entry 2"},
		{"dns:///localhost", "dns:///HOST:PORT"},
	} {
		if _, err := rpc.Dial(tc.target, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial(%q): %v, want an error with %q", tc.target, err, tc.want)
		}
	}
	if _, err := rpc.Dial("tcp://127.0.0.1:1", &rpc.ClientOptions{Balancer: "random"}); err == nil || !strings.Contains(err.Error(), "random") {
		t.Errorf("unknown balancer: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + l.Addr().String()
	l.Close()
	c := dial(t, dead, nil)
	start := time.Now()
	_, err = call(context.Background(), c, "T.Who")
	if status.FromError(err).Code != status.Unavailable || time.Since(start) > time.Second {
		t.Fatalf("a server never reached: %v after %v, want Unavailable at once", err, time.Since(start))
	}
	var ga *rpc.GoAwayError
	if errors.As(err, &ga) {
		t.Fatalf("unexpected GOAWAY: %v", err)
	}
}

type msg struct {
	ID int `json:"id"`
}

// TestStreamOpenRetried: a stream whose connection is lost before it opens
// opens on a new one; once open, its failure is the caller's to see.
func TestStreamOpenRetried(t *testing.T) {
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(quiet)
	var opened atomic.Int64
	rpc.HandleBidiStream(srv, "T.Echo", func(ctx context.Context, st *rpc.Stream[msg, msg]) error {
		opened.Add(1)
		for {
			m, err := st.Recv()
			if err != nil {
				return nil
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-done
	}()
	d := new(cutter)
	c := dial(t, "tcp://"+l.Addr().String(), &rpc.ClientOptions{Dialer: d.dial})
	echo := func() error {
		cs, err := rpc.NewStream[msg, msg](context.Background(), c, "T.Echo")
		if err != nil {
			return err
		}
		defer cs.CloseSend()
		if err := cs.Send(&msg{ID: 7}); err != nil {
			return err
		}
		m, err := cs.Recv()
		if err == nil && m.ID != 7 {
			t.Fatalf("echo %d", m.ID)
		}
		return err
	}
	if err := echo(); err != nil {
		t.Fatal(err)
	}
	d.cut()
	if err := echo(); err != nil {
		t.Fatalf("a stream opened after its connection was lost: %v", err)
	}
	if n := opened.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
}

// TestRetryBounded: with its one server gone for good, a call fails after
// a bounded number of attempts, and one with a deadline not past it.
func TestRetryBounded(t *testing.T) {
	ss := startServers(t, 1)
	c := dial(t, addrs(ss), nil)
	whoCounts(t, c, 1, 1)
	ss[0].shutdown(t)
	start := time.Now()
	_, err := call(context.Background(), c, "T.Who")
	if el := time.Since(start); status.FromError(err).Code != status.Unavailable || el > 3*time.Second {
		t.Fatalf("call to a server gone: %v after %v, want Unavailable within 3 s", err, el)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = call(ctx, c, "T.Who")
	if el := time.Since(start); err == nil || el > 200*time.Millisecond {
		t.Fatalf("call with a 120 ms deadline to a server gone: %v after %v", err, el)
	}
	t.Logf("with a deadline: %v", err)
}

// TestLeastOutstandingStreams: an open stream counts as a call in flight
// until it ends.
func TestLeastOutstandingStreams(t *testing.T) {
	ss := startServers(t, 2)
	c := dial(t, addrs(ss), &rpc.ClientOptions{Balancer: balance.LeastOutstanding})
	cs, err := rpc.NewStream[msg, msg](context.Background(), c, "T.WhoStream")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&msg{}); err != nil {
		t.Fatal(err)
	}
	m, err := cs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := whoCounts(t, c, 6, 2); got[m.ID] != 0 {
		t.Fatalf("stream open on %d; calls per server %v, want none there", m.ID, got)
	}
	cs.CloseSend()
	if _, err := cs.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	if got := whoCounts(t, c, 6, 2); got[m.ID] != 3 {
		t.Fatalf("stream ended; calls per server %v, want 3 each", got)
	}
}

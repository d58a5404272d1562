//go:build linux

package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// These tests are about the event loop itself; the behaviour tests of the
// package run in event-loop mode in TestEventLoopSuite.

// startLoop serves srv (whose options must set EventLoop) on a socket file
// with transport.Listen, checks that an event loop serves it, and returns
// the bad-input environment for it.
func startLoop(t testing.TB, srv *Server) *badEnv {
	t.Helper()
	if !srv.opts.EventLoop {
		t.Fatal("startLoop needs ServerOptions.EventLoop")
	}
	e := startBad(t, srv)
	for deadline := time.Now().Add(5 * time.Second); srv.ev.Loops.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no event loop started")
		}
		time.Sleep(time.Millisecond)
	}
	return e
}

func loopServer(opts *ServerOptions) *Server {
	if opts == nil {
		opts = &ServerOptions{}
	}
	opts.EventLoop = true
	return newBadServer(opts)
}

// waitLoop waits until cond holds.
func waitLoop(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// serverGoroutines counts the goroutines of servers (the clients of the
// tests run in the same process and have their own).
func serverGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "rpc.(*Server)") || strings.Contains(g, "eventloop.(*evLoop)") || strings.Contains(g, "mux.(*Session).readLoop") {
			count++
		}
	}
	return count
}

// openFDs counts this process's open file descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestEventLoopHalfFrameStaller has peers send part of a frame and stall:
// they hold no goroutine and no call, the server keeps serving others, and
// each is disconnected once the read timeout passes.
func TestEventLoopHalfFrameStaller(t *testing.T) {
	const readTimeout = 400 * time.Millisecond
	e := startLoop(t, loopServer(&ServerOptions{ReadTimeout: readTimeout}))
	good := e.client(t, nil)
	checkServing(t, good, "before")
	base := serverGoroutines()

	const n = 100
	var conns []net.Conn
	start := time.Now()
	for i := range n {
		rs := e.handshake(t)
		switch i % 3 {
		case 0: // half a frame header
			rs.write(wire.AppendHeader(nil, wire.Header{Length: 50, Stream: 1, Type: wire.TypeHeaders})[:5])
		case 1: // a header announcing a payload that never comes
			rs.write(wire.AppendHeader(nil, wire.Header{Length: 60000, Stream: 1, Type: wire.TypeData}))
		case 2: // a call header, then half of a request
			rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
			msg := frame(1, wire.TypeData, wire.FlagEnd, make([]byte, 3000))
			rs.write(msg[:len(msg)/2])
		}
		conns = append(conns, rs.conn)
	}
	// The stallers hold no goroutine and no worker: one call (case 2) per
	// three is admitted and waits for its request, but nothing runs.
	waitCalls(t, e.srv, (n+1)/3)
	if g := serverGoroutines(); g > 2+base {
		t.Errorf("%d server goroutines with %d stalled peers, %d before", g, n, base)
	}
	for i := range 50 {
		checkServing(t, good, fmt.Sprint("during the stall ", i))
	}
	for i, c := range conns {
		expectClosed(t, c, 5*time.Second)
		if el := time.Since(start); i == 0 && el < readTimeout-eventloop.Tick {
			t.Errorf("a staller was closed after %v, before the read timeout %v", el, readTimeout)
		}
	}
	t.Logf("%d stallers closed %v after they began", n, time.Since(start).Round(time.Millisecond))
	waitCalls(t, e.srv, 0)
	waitConns(t, e.srv, 1)
	checkServing(t, good, "after")
}

// TestEventLoopManyIdle opens 2,000 connections, lets them go idle (their
// sessions hibernate: no goroutine, no buffer), then has every one make a
// call at once.
func TestEventLoopManyIdle(t *testing.T) {
	const n = 2000
	srv := loopServer(&ServerOptions{MaxConnsPerUID: -1})
	e := startLoop(t, srv)
	clients := make([]*Client, n)
	for i := range clients {
		c, err := Dial(e.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
		checkServing(t, c, "connect "+strconv.Itoa(i))
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	waitConns(t, srv, n)
	waitLoop(t, "the sessions to hibernate", func() bool { return srv.ev.Hibernations.Load() >= n })
	g := serverGoroutines()
	t.Logf("%d idle connections: %d server goroutines", n, g)
	if g > 2+n/100 { // the loop, its watcher, and a few workers
		t.Errorf("%d server goroutines for %d idle connections", g, n)
	}
	srv.mu.Lock()
	awake := len(srv.conns)
	light := srv.adm.Conns() - awake
	srv.mu.Unlock()
	if light != n || awake != 0 {
		t.Errorf("%d hibernating, %d awake; want %d, 0", light, awake, n)
	}

	var wg sync.WaitGroup
	errs := make(chan error, n)
	startGate := make(chan struct{})
	for i, c := range clients {
		wg.Go(func() {
			<-startGate
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			msg := "call " + strconv.Itoa(i)
			var out []byte
			if err := c.Invoke(ctx, "Bad.Echo", []byte(msg), &out); err != nil || string(out) != msg {
				errs <- fmt.Errorf("client %d: %q %v", i, out, err)
			}
		})
	}
	close(startGate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := srv.Stats(); st.Conns != n || st.CallsTotal != 2*n {
		t.Errorf("stats %+v", st)
	}
}

// TestEventLoopSlowReader has a peer ask for replies far larger than the
// socket buffers and never read them: the server's writes would block, the
// rest stays buffered for EPOLLOUT, and other connections are served as
// before. Closing the peer releases everything.
func TestEventLoopSlowReader(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	good := e.client(t, nil)
	checkServing(t, good, "before")
	rs := e.handshake(t)
	for i := range 4 {
		rs.write(callFrames(uint32(1+2*i), "Bad.Big", codec.IDRaw, []byte(strconv.Itoa(3<<20))))
	}
	waitCalls(t, srv, 4)
	// One session has a backlog: its writes hit EAGAIN.
	waitLoop(t, "a write backlog", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for _, sc := range srv.conns {
			if sc.sess != nil && sc.sess.WriteBacklog() > 0 {
				return true
			}
		}
		return false
	})
	start := time.Now()
	other := e.client(t, nil)
	for i := range 300 {
		checkServing(t, good, fmt.Sprint("call ", i))
		checkServing(t, other, fmt.Sprint("other call ", i))
	}
	t.Logf("600 calls in %v while a peer does not read", time.Since(start))
	rs.conn.Close()
	waitCalls(t, srv, 0)
	waitConns(t, srv, 2)
}

// TestEventLoopNoFDLeak runs connections of every kind through a loop
// server, closes everything, and checks that the process has as many open
// descriptors as before.
func TestEventLoopNoFDLeak(t *testing.T) {
	before := openFDs(t)
	func() {
		srv := loopServer(&ServerOptions{MaxConns: 8, ReadTimeout: 200 * time.Millisecond, HandshakeTimeout: 200 * time.Millisecond})
		path := filepath.Join(t.TempDir(), "leak.sock")
		l, err := transport.Listen("unix://"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(l) }()
		e := &badEnv{path: path, addr: "unix://" + path, srv: srv}
		var clients []*Client
		for i := range 10 { // the last two are refused (MaxConns)
			c, err := Dial(e.addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
			var out []byte
			err = c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out)
			if i < 8 && err != nil || i >= 8 && status.CodeOf(err) != status.ResourceExhausted {
				t.Fatalf("client %d: %v", i, err)
			}
		}
		for _, c := range clients[8:] {
			c.Close()
		}
		waitLoop(t, "hibernation", func() bool { return srv.ev.Hibernations.Load() > 0 })
		var raws []net.Conn
		dial := func() net.Conn {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, c)
			return c
		}
		clients[0].Close() // room for the raw connections below
		clients[1].Close()
		clients[2].Close()
		waitConns(t, srv, 5)
		dial().Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // handed to the HTTP bridge
		dial().Write([]byte{0x16, 3, 1})                          // not warren
		dial()                                                    // silent: handshake timeout
		stall := dial()
		stall.Write(wire.AppendPreface(nil, wire.Settings{}))
		stall.Write(wire.AppendHeader(nil, wire.Header{Length: 100, Stream: 1, Type: wire.TypeHeaders})[:3]) // read timeout
		time.Sleep(500 * time.Millisecond)
		for _, c := range clients[3:8] {
			checkServing(t, c, "after the raw peers")
		}
		srv.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		for _, c := range clients {
			c.Close()
		}
		for _, c := range raws {
			c.Close()
		}
	}()
	waitLoop(t, "descriptors to be closed", func() bool { return openFDs(t) <= before })
}

// TestEventLoopFallback serves listeners the loop cannot handle (TLS, a
// wrapped listener) with EventLoop set: Serve falls back to a goroutine per
// connection and works as usual.
func TestEventLoopFallback(t *testing.T) {
	t.Run("tls", func(t *testing.T) {
		srv := loopServer(nil)
		before := eventloop.Started.Load()
		env := startMatrix(t, mxTransports[3], srv, nil)
		checkServing(t, env.client, "over tls")
		if eventloop.Started.Load() != before {
			t.Fatal("an event loop served a tls listener")
		}
	})
	t.Run("wrapped", func(t *testing.T) {
		srv := loopServer(nil)
		path := filepath.Join(t.TempDir(), "w.sock")
		inner, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(wrappedListener{inner}) }()
		defer func() {
			srv.Close()
			<-done
		}()
		c, err := Dial("unix://"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkServing(t, c, "wrapped")
		if srv.ev.Loops.Load() != 0 {
			t.Fatal("an event loop served a wrapped listener")
		}
	})
}

type wrappedListener struct{ net.Listener }

// TestEventLoopTCP runs calls and idle hibernation over TCP.
func TestEventLoopTCP(t *testing.T) {
	srv := loopServer(nil)
	env := startMatrix(t, mxTransports[2], srv, nil)
	waitLoop(t, "the event loop", func() bool { return srv.ev.Loops.Load() > 0 })
	checkServing(t, env.client, "tcp")
	waitLoop(t, "hibernation", func() bool { return srv.ev.Hibernations.Load() > 0 })
	checkServing(t, env.client, "tcp after hibernation")
	p := make(chan string, 1)
	Handle(srv, "Peer.Who", func(ctx context.Context, _ *Empty) (*echoReply, error) {
		c := ctx.Value(callKey{}).(*serverCall)
		p <- c.conn.peer.String()
		return &echoReply{}, nil
	})
	if _, err := Call[Empty, echoReply](context.Background(), env.client, "Peer.Who", &Empty{}); err != nil {
		t.Fatal(err)
	}
	if who := <-p; !strings.HasPrefix(who, "tcp 127.0.0.1:") {
		t.Fatalf("peer %q", who)
	}
}

// TestEventLoopIdleTimeout checks that an idle connection is closed after
// IdleTimeout, one with a call in progress is not, and the client simply
// reconnects.
func TestEventLoopIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	srv := loopServer(&ServerOptions{IdleTimeout: idle})
	e := startLoop(t, srv)
	a, b := e.client(t, nil), e.client(t, nil)
	checkServing(t, a, "a")
	checkServing(t, b, "b")
	waitConns(t, srv, 2)
	// b holds a call for longer than the idle timeout.
	held := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*idle)
		defer cancel()
		var out []byte
		held <- b.Invoke(ctx, "Bad.Hold", []byte("x"), &out)
	}()
	waitCalls(t, srv, 1)
	time.Sleep(2 * idle)
	if st := srv.Stats(); st.Conns != 1 {
		t.Fatalf("after the idle timeout: %d connections, want 1 (the busy one)", st.Conns)
	}
	if err := <-held; status.CodeOf(err) != status.DeadlineExceeded {
		t.Fatalf("held call: %v", err)
	}
	checkServing(t, a, "a, reconnected")
}

// TestEventLoopMaxConnsHibernated checks that hibernating connections still
// count against MaxConns.
func TestEventLoopMaxConnsHibernated(t *testing.T) {
	srv := loopServer(&ServerOptions{MaxConns: 2})
	e := startLoop(t, srv)
	a, b := e.client(t, nil), e.client(t, nil)
	checkServing(t, a, "a")
	checkServing(t, b, "b")
	waitLoop(t, "hibernation", func() bool { return srv.ev.Hibernations.Load() >= 2 })
	c := e.client(t, nil)
	var out []byte
	err := c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out)
	if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "too many connections") {
		t.Fatalf("third connection: %v", err)
	}
	checkServing(t, a, "a after")
}

// TestEventLoopHTTP sends an HTTP request to a loop server: the connection
// is handed to the HTTP bridge with the bytes already read.
func TestEventLoopHTTP(t *testing.T) {
	srv := loopServer(nil)
	Handle(srv, "Echo.Say", func(ctx context.Context, req *echoReq) (*echoReply, error) {
		return &echoReply{Text: req.Text}, nil
	})
	e := startLoop(t, srv)
	hc := HTTPClient(e.addr, nil)
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://warren/Echo.Say", "application/json", strings.NewReader(`{"text":"over http"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "over http") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

// TestEventLoopShutdownIdle checks that Shutdown tells hibernating
// connections to go away and returns at once.
func TestEventLoopShutdownIdle(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	var clients []*Client
	for range 20 {
		c := e.client(t, nil)
		checkServing(t, c, "before")
		clients = append(clients, c)
	}
	waitLoop(t, "hibernation", func() bool { return srv.ev.Hibernations.Load() >= 20 })
	rs := e.handshake(t) // a connection that never had a session
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Shutdown took %v", el)
	}
	rs.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	h, p, err := rs.r.Next()
	if err != nil || h.Type != wire.TypeGoAway {
		t.Fatalf("first frame %v %v", h, err)
	}
	if _, code, msg, err := wire.ParseGoAway(p); err != nil || status.Code(code) != status.Unavailable {
		t.Fatalf("GOAWAY %v %q %v", code, msg, err)
	}
	var out []byte
	if err := clients[0].Invoke(context.Background(), "Bad.Echo", []byte("x"), &out); status.CodeOf(err) != status.Unavailable {
		t.Fatalf("call after Shutdown: %v", err)
	}
}

// TestEventLoopListenerClosed closes the listener under a loop server, as
// its owner may: Serve returns (as in goroutine mode), and the connections
// already accepted are still served.
func TestEventLoopListenerClosed(t *testing.T) {
	srv := loopServer(nil)
	path := filepath.Join(t.TempDir(), "lc.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer srv.Close()
	c, err := Dial("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkServing(t, c, "before")
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Serve returned %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the listener was closed")
	}
	for i := range 20 {
		checkServing(t, c, "after "+strconv.Itoa(i))
	}
}

// BenchmarkUnaryModes compares unary calls with the server in goroutine mode
// and in event-loop mode (where calls up to 16 KiB run on the loop, larger
// ones on workers), in this process:
//
//	go test ./rpc -run '^$' -bench UnaryModes -benchmem
func BenchmarkUnaryModes(b *testing.B) {
	for _, mode := range []string{"goroutine", "eventloop"} {
		for _, callers := range []int{1, 16} {
			for _, size := range []int{128, 1024, 1 << 20} {
				b.Run(fmt.Sprintf("mode=%s/callers=%d/size=%s", mode, callers, sizeName(size)), func(b *testing.B) {
					srv := NewServer(&ServerOptions{CallRate: -1, EventLoop: mode == "eventloop"})
					HandleRaw(srv, "Bench.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
					path := filepath.Join(b.TempDir(), "bench.sock")
					l, err := net.Listen("unix", path)
					if err != nil {
						b.Fatal(err)
					}
					done := make(chan struct{})
					go func() { srv.Serve(l); close(done) }()
					b.Cleanup(func() { srv.Close(); <-done })
					runUnary(b, path, size, callers)
				})
			}
		}
	}
}

// TestEventLoopRequestOverLimit: a unary call refused because its request
// declares more than MaxMessageSize gives back its slot in the event-loop
// mode too, while the connection stays up and after it closes.
func TestEventLoopRequestOverLimit(t *testing.T) {
	srv := loopServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}})
	e := startLoop(t, srv)
	rs := e.handshake(t)
	rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
	rs.write(frame(1, wire.TypeData, wire.FlagMore, binary.BigEndian.AppendUint32(nil, 2<<20)))
	if r := rs.await(1); status.Code(r.trailer.Code) != status.ResourceExhausted {
		t.Fatalf("declared 2 MiB: status %d %q", r.trailer.Code, r.trailer.Message)
	}
	waitCalls(t, srv, 0)
	rs.call(3, []byte("still up"))
	rs.conn.Close()
	waitConns(t, srv, 0)
	waitCalls(t, srv, 0)
}

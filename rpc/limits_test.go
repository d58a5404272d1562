package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// lineCounter counts log lines.
type lineCounter struct {
	mu    sync.Mutex
	lines int
	text  strings.Builder
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines += strings.Count(string(p), "\n")
	if c.text.Len() < 4096 {
		c.text.Write(p)
	}
	return len(p), nil
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines
}

// The connection limits run as one matrix over {goroutine, event loop} x
// {unix, tcp, ws}: the same body for both engines, since one admission core
// (internal/admit) decides for both. Behaviours that need kernel
// credentials (per uid, per process, shedding) run on unix only.

// limEnv is a server of the limits matrix and the address it serves.
type limEnv struct {
	srv              *Server
	addr             string
	network, address string // what net.Dial takes to reach the listener
	unix             bool
}

// startLimits serves srv over tr (unix-path, tcp or ws) in the mode of
// loop, until the test ends.
func startLimits(t *testing.T, tr mxTransport, loop bool, srv *Server) *limEnv {
	t.Helper()
	l, addr, _ := tr.listen(t)
	srv.opts.EventLoop = loop
	serveTest(t, srv, l)
	a := l.Addr()
	return &limEnv{srv: srv, addr: addr, network: a.Network(), address: a.String(), unix: a.Network() == "unix"}
}

func (e *limEnv) client(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialSilent opens n connections that send nothing, closed when the test
// ends.
func (e *limEnv) dialSilent(t *testing.T, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial(e.network, e.address)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

func TestConnLimits(t *testing.T) {
	behaviours := []struct {
		name     string
		unixOnly bool
		fn       func(t *testing.T, start func(*ServerOptions) *limEnv, loop bool)
	}{
		{"MaxConns", false, limMaxConns},
		{"MaxConnsPerUID", true, limMaxConnsPerUID},
		{"PerProcess", true, limPerProcess},
		{"ShedIdle", true, limShedIdle},
		{"HandshakeFairness", true, limHandshakeFairness},
		{"RefusedPeersCheap", false, limRefusedPeersCheap},
		{"UnauthenticatedCap", false, limUnauthenticatedCap},
		{"PingFlood", false, limPingFlood},
		{"RefusedFlood", false, limRefusedFlood},
		{"Hog3000", true, limHog3000},
	}
	rawFrames := map[string]bool{"PingFlood": true, "RefusedFlood": true} // unix and tcp
	for _, loop := range []bool{false, true} {
		for _, tr := range mxTransports {
			if tr.name != "unix-path" && tr.name != "tcp" && tr.name != "ws" {
				continue
			}
			tr.loop = loop
			t.Run(tr.mode()+"/"+tr.name, func(t *testing.T) {
				for _, b := range behaviours {
					if b.unixOnly && tr.name != "unix-path" || rawFrames[b.name] && tr.name == "ws" {
						continue
					}
					t.Run(b.name, func(t *testing.T) {
						before := eventloop.Started.Load()
						b.fn(t, func(o *ServerOptions) *limEnv { return startLimits(t, tr, loop, newBadServer(o)) }, loop)
						if loop && runtime.GOOS == "linux" && eventloop.Started.Load() == before {
							t.Error("no event loop served the test")
						}
					})
				}
			})
		}
	}
}

// limMaxConns: a client over MaxConns is refused with ResourceExhausted,
// every time, and one is admitted once a slot is free.
func limMaxConns(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{MaxConns: 1})
	first := e.client(t)
	checkServing(t, first, "first")
	for i := range 5 {
		c := e.client(t)
		var out []byte
		err := c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out)
		if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "too many connections (limit 1)") {
			t.Fatalf("client %d over the limit: err = %v, want ResourceExhausted", i+2, err)
		}
		c.Close()
	}
	if st := e.srv.Stats(); st.ConnsRejected == 0 || st.CallsTotal != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkServing(t, first, "first, after the refusals")
	first.Close()
	waitConns(t, e.srv, 0)
	checkServing(t, e.client(t), "a client in the freed slot")
}

// limMaxConnsPerUID is limMaxConns for the per-uid limit.
func limMaxConnsPerUID(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{MaxConnsPerUID: 2, MaxConnsPerPID: 2})
	a, b := e.client(t), e.client(t)
	checkServing(t, a, "a")
	checkServing(t, b, "b")
	for i := range 5 {
		c := e.client(t)
		var out []byte
		err := c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out)
		want := fmt.Sprintf("too many connections from uid %d (limit 2)", os.Geteuid())
		if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), want) {
			t.Fatalf("client %d over the limit: err = %v, want ResourceExhausted, %q", i+3, err, want)
		}
		c.Close()
	}
	checkServing(t, a, "a, after the refusals")
	b.Close()
	waitConns(t, e.srv, 1)
	checkServing(t, e.client(t), "a client in the freed slot")
}

// limPerProcess: one process of a user cannot lock out the user's other
// processes: it gets at most MaxConnsPerPID connections.
func limPerProcess(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{MaxConnsPerUID: 40, MaxConnsPerPID: 16})
	var admitted int
	for range 60 {
		c := e.client(t)
		var out []byte
		if err := c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out); err == nil {
			admitted++
		} else if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "per process") {
			t.Fatalf("hog connection: %v, want ResourceExhausted per process", err)
		}
	}
	if admitted > 16 {
		t.Fatalf("one process holds %d connections, limit 16 per process", admitted)
	}
	if err := callFromOtherProcess(t, e.addr); err != nil {
		t.Fatalf("another process of the same user was locked out: %v", err)
	}
}

// limShedIdle: once a user's connections are at MaxConnsPerUID, one idle
// for admit.ShedIdleAfter is shed, with a GOAWAY, to admit another
// process's; its client reconnects when it next calls.
func limShedIdle(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{MaxConnsPerUID: 8, MaxConnsPerPID: 8})
	clients := make([]*Client, 8)
	for i := range clients {
		clients[i] = e.client(t)
		if _, err := clients[i].Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(admit.ShedIdleAfter + 100*time.Millisecond)
	if err := callFromOtherProcess(t, e.addr); err != nil {
		t.Fatalf("with the user's connections idle at the limit, another process was refused: %v", err)
	}
	if st := e.srv.Stats(); st.ConnsShed != 1 {
		t.Fatalf("stats %+v, want 1 connection shed", st)
	}
	for i, c := range clients {
		eventually(t, func() bool {
			_, err := c.Ping(context.Background())
			if err != nil && !strings.Contains(err.Error(), admit.ShedMessage) && status.CodeOf(err) != status.Unavailable {
				t.Fatalf("client %d after the shedding: %v", i, err)
			}
			return err == nil
		})
	}
}

// limHandshakeFairness: a process whose silent connections fill its uid's
// cap on connections in their handshake does not lock out the uid's other
// processes: a newcomer from another process evicts the hog's oldest
// silent connection and is served within 3 s.
func limHandshakeFairness(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{MaxConnsPerUID: 1000, MaxConnsPerPID: 1000})
	const silent = 300
	conns := e.dialSilent(t, silent)
	eventually(t, func() bool { return e.srv.Stats().ConnsRejected >= silent-admit.MaxHandshakesPerPeer })
	for i := range 2 {
		begin := time.Now()
		if err := callFromOtherProcess(t, e.addr); err != nil {
			t.Fatalf("call %d from another process with the uid's handshake cap full: %v", i, err)
		}
		d := time.Since(begin)
		if d > 3*time.Second {
			t.Fatalf("call %d from another process took %v, want at most 3 s", i, d)
		}
		t.Logf("call %d from another process (a new test process) served in %v", i, d)
	}
	// The server closed those over the cap and one evicted by the first
	// call (the second took the slot the first left).
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if want := silent - admit.MaxHandshakesPerPeer + 1; int(closed.Load()) < want {
		t.Fatalf("%d of the hog's silent connections closed, want %d", closed.Load(), want)
	}
}

// limRefusedPeersCheap checks what a refused peer costs: a peer refused in
// a loop produces one log line (and summaries, per interval), not one per
// attempt. On a plain unix or TCP connection, a refused peer that sends
// nothing gets the refusal after 100 ms and is closed within
// admit.RefuseLinger, not held for the handshake timeout, on both engines.
func limRefusedPeersCheap(t *testing.T, start func(*ServerOptions) *limEnv, loop bool) {
	var logged lineCounter
	deny := peer.PolicyFunc(func(p *peer.Peer) error { return fmt.Errorf("%w: not you", peer.ErrDenied) })
	e := start(&ServerOptions{Policy: deny, Logger: slogTo(&logged)})
	var out []byte
	if err := e.client(t).Invoke(context.Background(), "Bad.Echo", []byte("x"), &out); !strings.Contains(fmt.Sprint(err), "not you") {
		t.Fatalf("refused client: %v, want the policy's refusal", err)
	}
	const n = 500
	for range n - 1 {
		c, err := net.Dial(e.network, e.address)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	eventually(t, func() bool { return e.srv.Stats().ConnsRejected == n })
	if lines := logged.count(); lines > 2 {
		t.Fatalf("%d refusals of one peer logged %d lines, want at most 2:\n%s", n, lines, logged.text.String())
	}
	if strings.HasPrefix(e.addr, "ws") {
		return
	}
	// Refused peers that send nothing are answered and closed at once.
	begin := time.Now()
	conns := e.dialSilent(t, 100)
	deadline := time.Now().Add(3 * time.Second)
	for i, c := range conns {
		c.SetReadDeadline(deadline)
		got, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("refused silent connection %d: %v after %q (still open after 3 s?)", i, err, got)
		}
		if _, n, ok, _ := wire.ParsePreface(got); !ok || !strings.Contains(string(got[n:]), "not you") {
			t.Fatalf("refused silent connection %d got %q, want a preface and a GOAWAY naming the reason", i, got)
		}
	}
	t.Logf("100 silent refused peers (event loop %v): all closed %v after the first connected", loop, time.Since(begin).Round(time.Millisecond))
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(err.Error(), "reset")
}

// limUnauthenticatedCap: one peer holding silent connections (no preface)
// holds at most admit.MaxHandshakesPerPeer of them; the rest are closed at
// once, and a client that speaks is still served.
func limUnauthenticatedCap(t *testing.T, start func(*ServerOptions) *limEnv, _ bool) {
	e := start(&ServerOptions{HandshakeTimeout: 30 * time.Second})
	const n = admit.MaxHandshakesPerPeer + 100
	conns := e.dialSilent(t, n)
	closed := 0
	time.Sleep(200 * time.Millisecond) // let the server accept them all
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		var b [64]byte
		for {
			_, err := c.Read(b[:])
			if err == nil {
				continue
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
			break
		}
	}
	if closed < n-admit.MaxHandshakesPerPeer {
		t.Fatalf("%d of %d silent connections closed, want at least %d (the cap is %d)", closed, n, n-admit.MaxHandshakesPerPeer, admit.MaxHandshakesPerPeer)
	}
	for _, c := range conns {
		c.Close()
	}
	// The server is free for a client that speaks.
	eventually(t, func() bool {
		c, err := Dial(e.addr, nil)
		if err != nil {
			return false
		}
		defer c.Close()
		var out []byte
		return c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out) == nil
	})
}

// helperAddrEnv names the server a helper process calls (see
// TestHelperProcessCall).
const helperAddrEnv = "WARREN_TEST_HELPER_ADDR"

// TestHelperProcessCall is not a test: run by callFromOtherProcess, it
// makes one call to the server in $WARREN_TEST_HELPER_ADDR from another
// process of the same user.
func TestHelperProcessCall(t *testing.T) {
	addr := os.Getenv(helperAddrEnv)
	if addr == "" {
		t.Skip("helper process only")
	}
	c, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []byte
	if err := c.Invoke(ctx, "Bad.Echo", []byte("x"), &out); err != nil {
		t.Fatalf("call from another process: %v", err)
	}
}

func callFromOtherProcess(t *testing.T, addr string) error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessCall$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperAddrEnv+"="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

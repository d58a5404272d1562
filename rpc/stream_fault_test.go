package rpc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Faults on streams: the peer process dies (SIGKILL) in the middle of a
// large message. The survivor must see a typed error at once, never a
// partial message, and a server must go on serving others.
//
// The peer runs in a child process: this test binary re-executed with
// WARREN_STREAM_FAULT set, which makes TestStreamFaultProcess act as a
// server or a client instead of a test.

const (
	faultBig   = 32 << 20 // the large message
	faultKill  = 8 << 20  // the peer is killed once this much was read
	faultLimit = 64 << 20 // MaxMessageSize on both sides
)

func faultPattern(i int) byte { return byte(i*7 + i>>16) }

// TestStreamFaultProcess is the child side of the fault tests; it does
// nothing in a normal test run.
func TestStreamFaultProcess(t *testing.T) {
	path := os.Getenv("WARREN_STREAM_FAULT_PATH")
	switch os.Getenv("WARREN_STREAM_FAULT") {
	case "":
		return
	case "server":
		// Serves Fault.Big: a small message, then large ones, until killed.
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: faultLimit}})
		big := make([]byte, faultBig)
		for i := range big {
			big[i] = faultPattern(i)
		}
		HandleServerStream(srv, "Fault.Big", func(ctx context.Context, _ *[]byte, st *Stream[[]byte, []byte]) error {
			hello := []byte("hello")
			if err := st.Send(&hello); err != nil {
				return err
			}
			for {
				if err := st.Send(&big); err != nil {
					return err
				}
			}
		})
		fmt.Println("ready")
		srv.Serve(l)
		os.Exit(0)
	case "client":
		// Uploads large messages on Fault.Upload until killed.
		c, err := Dial("unix://"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		big := make([]byte, faultBig)
		for i := range big {
			big[i] = faultPattern(i)
		}
		cs, err := NewStream[[]byte, []byte](context.Background(), c, "Fault.Upload", WithCodec(codec.Raw))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child client:", err)
			os.Exit(2)
		}
		for {
			if err := cs.Send(&big); err != nil {
				fmt.Fprintln(os.Stderr, "child client:", err)
				os.Exit(2)
			}
		}
	}
}

// startFaultChild starts the test binary as a fault peer in mode and, for a
// server, waits until it listens. The child is killed when the test ends if
// it still runs.
func startFaultChild(t *testing.T, mode, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamFaultProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "WARREN_STREAM_FAULT="+mode, "WARREN_STREAM_FAULT_PATH="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	wait := func() { once.Do(func() { cmd.Wait() }) }
	t.Cleanup(func() {
		cmd.Process.Kill()
		wait()
	})
	if mode == "server" {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("child server did not start: %q %v", line, err)
		}
	}
	return cmd
}

// killedBySIGKILL waits for cmd and reports whether SIGKILL ended it.
func killedBySIGKILL(cmd *exec.Cmd) error {
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("child exit: %v", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("child exit: %v, want killed by SIGKILL", err)
	}
	return nil
}

// killConn counts the bytes read from a connection and calls onLimit once
// when the count reaches limit, from inside the Read that reached it.
type killConn struct {
	net.Conn
	n       atomic.Int64
	limit   int64
	once    sync.Once
	onLimit func()
}

func (c *killConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n.Add(int64(n)) >= c.limit {
		c.once.Do(c.onLimit)
	}
	return n, err
}

// NetConn lets the server read the peer's credentials through the wrapper.
func (c *killConn) NetConn() net.Conn { return c.Conn }

// TestStreamServerKilledMidMessage: the server process is killed while it
// sends a 32 MiB message on a stream. The client's Recv returns, promptly,
// a *status.Error with code Unavailable whose cause is the connection error;
// it never returns the partial message.
func TestStreamServerKilledMidMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "fault.sock")
	cmd := startFaultChild(t, "server", path)
	var killedAt atomic.Int64 // unix nanoseconds
	var conns []*killConn
	var mu sync.Mutex
	c, err := Dial("unix://"+path, &ClientOptions{
		Settings: wire.Settings{MaxMessageSize: faultLimit},
		Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", path)
			if err != nil {
				return nil, err
			}
			kc := &killConn{Conn: conn, limit: faultKill, onLimit: func() {
				cmd.Process.Kill()
				killedAt.Store(time.Now().UnixNano())
			}}
			mu.Lock()
			conns = append(conns, kc)
			mu.Unlock()
			return kc, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t, 20*time.Second)
	cs := openServerStream[[]byte, []byte](ctx, t, c, "Fault.Big", &[]byte{}, WithCodec(codec.Raw))
	if m, err := cs.Recv(); err != nil || string(*m) != "hello" {
		t.Fatalf("first message: %q %v", derefBytes(m), err)
	}
	m, err := cs.Recv()
	recvAt := time.Now()
	if m != nil {
		t.Fatalf("Recv returned a message of %d bytes (and %v) from a server killed while sending %d bytes", len(*m), err, faultBig)
	}
	if killedAt.Load() == 0 {
		t.Fatal("Recv returned before the server was killed")
	}
	t.Logf("Recv failed %v after the kill: %v", recvAt.Sub(time.Unix(0, killedAt.Load())).Round(time.Microsecond), err)
	var se *status.Error
	if !errors.As(err, &se) || se.Code != status.Unavailable {
		t.Fatalf("Recv: %T %v, want *status.Error with code Unavailable", err, err)
	}
	var ce *ConnError
	if !errors.As(err, &ce) {
		t.Fatalf("Recv: %v does not wrap a *rpc.ConnError", err)
	}
	if d := recvAt.Sub(time.Unix(0, killedAt.Load())); d > 5*time.Second {
		t.Fatalf("Recv took %v to notice the dead server", d)
	}
	if _, err2 := cs.Recv(); status.CodeOf(err2) != status.Unavailable {
		t.Fatalf("second Recv: %v", err2)
	}
	mu.Lock()
	read := conns[0].n.Load()
	mu.Unlock()
	if read >= faultBig+64 {
		t.Fatalf("the client read %d bytes: the large message was complete before the kill", read)
	}
	if err := killedBySIGKILL(cmd); err != nil {
		t.Fatal(err)
	}
	// The client reports the server as unavailable rather than hanging.
	ctx2, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := NewStream[[]byte, []byte](ctx2, c, "Fault.Big", WithCodec(codec.Raw)); status.CodeOf(err) != status.Unavailable {
		t.Fatalf("new stream to the dead server: %v, want Unavailable", err)
	}
}

func derefBytes(m *[]byte) []byte {
	if m == nil {
		return nil
	}
	return *m
}

// faultListener wraps every accepted connection.
type faultListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l *faultListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(conn), nil
}

// TestStreamClientKilledMidUpload: the client process is killed while it
// uploads a 32 MiB message on a client stream. The handler's Recv returns
// an error (and no partial message), the handler ends, and the server goes
// on serving another client, large messages included.
func TestStreamClientKilledMidUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	type event struct {
		size int   // a message received, or
		err  error // the end of the stream
		pid  int
	}
	events := make(chan event, 16)
	srv := NewServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: faultLimit}})
	HandleClientStream(srv, "Fault.Upload", func(ctx context.Context, st *Stream[[]byte, []byte]) (*[]byte, error) {
		pid := -1
		if p, ok := peer.FromContext(ctx); ok && p.HasCred {
			pid = p.PID
		}
		total := 0
		for {
			m, err := st.Recv()
			if err == io.EOF {
				reply := []byte(fmt.Sprint(total))
				return &reply, nil
			}
			if err != nil {
				events <- event{err: err, pid: pid}
				return nil, err
			}
			for i, b := range *m {
				if len(*m) == faultBig && b != faultPattern(i) {
					err := fmt.Errorf("byte %d of a %d-byte message is corrupt", i, len(*m))
					events <- event{err: err, pid: pid}
					return nil, err
				}
			}
			total += len(*m)
			events <- event{size: len(*m), pid: pid}
		}
	})
	path := filepath.Join(t.TempDir(), "upload.sock")
	ul, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var child atomic.Pointer[exec.Cmd]
	var killedAt atomic.Int64
	var first atomic.Bool
	l := &faultListener{Listener: ul, wrap: func(conn net.Conn) net.Conn {
		if !first.CompareAndSwap(false, true) {
			return conn // later connections are the surviving clients
		}
		return &killConn{Conn: conn, limit: faultKill, onLimit: func() {
			child.Load().Process.Kill()
			killedAt.Store(time.Now().UnixNano())
		}}
	}}
	serveDone := make(chan error, 1)
	useMode(t, srv)
	go func() { serveDone <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		if err := <-serveDone; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	cmd := startFaultChild(t, "client", path)
	child.Store(cmd)

	ev := waitFor(t, events, 20*time.Second, "the handler's Recv to return")
	endAt := time.Now()
	if ev.err == nil {
		t.Fatalf("the handler received a message of %d bytes from a client killed during its first %d-byte message", ev.size, faultBig)
	}
	if killedAt.Load() == 0 {
		t.Fatalf("the handler's Recv failed before the client was killed: %v", ev.err)
	}
	if ev.pid != cmd.Process.Pid {
		t.Errorf("peer pid %d, want the child's %d", ev.pid, cmd.Process.Pid)
	}
	t.Logf("handler's Recv failed %v after the kill: %v", endAt.Sub(time.Unix(0, killedAt.Load())).Round(time.Microsecond), ev.err)
	if se := status.FromError(ev.err); se.Code != status.Unavailable && se.Code != status.Canceled {
		t.Errorf("handler's Recv: %v, want Unavailable or Canceled", ev.err)
	}
	if err := killedBySIGKILL(cmd); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, srv, 0)
	waitConns(t, srv, 0)

	// Another client is served, large message included.
	c := testClientFor(t, path, &ClientOptions{Settings: wire.Settings{MaxMessageSize: faultLimit}})
	ctx := testCtx(t, 20*time.Second)
	cs, err := NewStream[[]byte, []byte](ctx, c, "Fault.Upload", WithCodec(codec.Raw))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, faultBig)
	for i := range big {
		big[i] = faultPattern(i)
	}
	for _, m := range [][]byte{[]byte("a"), big, []byte("bc")} {
		if err := cs.Send(&m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := cs.CloseAndRecv()
	if err != nil || string(*r) != fmt.Sprint(faultBig+3) {
		t.Fatalf("upload after the fault: %q %v", derefBytes(r), err)
	}
	for range 3 {
		if ev := <-events; ev.err != nil {
			t.Fatalf("second client: %v", ev.err)
		}
	}
}

// testClientFor returns a client of the unix socket at path, closed when the
// test ends.
func testClientFor(t testing.TB, path string, opts *ClientOptions) *Client {
	t.Helper()
	c, err := Dial("unix://"+path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

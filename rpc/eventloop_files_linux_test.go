package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// The event loop on unix sockets takes and sends descriptors and shared
// messages as the goroutine mode does: the same tests, served by a loop.

// onLoop runs fn and fails if no event loop started meanwhile.
func onLoop(t *testing.T, fn func()) {
	t.Helper()
	before := eventloop.Started.Load()
	fn()
	if eventloop.Started.Load() == before {
		t.Fatal("no event loop served the test")
	}
}

func TestEventLoopFilesRequestAndReply(t *testing.T) {
	onLoop(t, func() { testFilesRequestAndReply(t, "unix-loop") })
}

func TestEventLoopFilesOnStreams(t *testing.T) {
	onLoop(t, func() { testFilesOnStreams(t, "unix-loop") })
}

func TestEventLoopSharedEcho(t *testing.T) { onLoop(t, func() { testSharedEcho(t, true) }) }

func TestEventLoopSharedStream(t *testing.T) { onLoop(t, func() { testSharedStream(t, true) }) }

func TestEventLoopSharedBuffer(t *testing.T) { onLoop(t, func() { testSharedBuffer(t, true) }) }

func TestEventLoopSharedHostile(t *testing.T) { onLoop(t, func() { testSharedHostile(t, true) }) }

func TestEventLoopFilesHostileConn(t *testing.T) {
	onLoop(t, func() { testFilesHostileConn(t, true) })
}

func TestEventLoopFilesHeldBound(t *testing.T)   { onLoop(t, func() { testFilesHeldBound(t, true) }) }
func TestEventLoopSharedPeerLeaves(t *testing.T) { onLoop(t, func() { testSharedPeerLeaves(t, true) }) }

// TestEventLoopFilesTruncated: a read whose control message does not fit
// the loop's buffer (MSG_CTRUNC: more descriptors in one sendmsg than 4 x
// MaxFiles) is a connection error, and every descriptor is closed.
func TestEventLoopFilesTruncated(t *testing.T) {
	c := sharedPair(t, ServerOptions{EventLoop: true, Settings: wire.Settings{MaxFiles: 2}}, ClientOptions{})
	var out []byte
	in := []byte{1}
	if err := c.Invoke(context.Background(), "T.Sum", &in, &out); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	r := dialRawFiles(t, c)
	fds := make([]int, 40) // the loop's control buffer holds 4 x 4 x MaxFiles = 32
	for i := range fds {
		fds[i] = devNullFD(t)
	}
	id := r.call([]byte{'x'}, fds, 0)
	shm.CloseAll(fds)
	if tr, err := r.trailer(id); err == nil {
		t.Fatalf("the connection survived a truncated control message: status %d %q", tr.Code, tr.Message)
	}
	r.uc.Close()
	checkNoLeak(t, before, 0, 0)
	if err := c.Invoke(context.Background(), "T.Sum", &in, &out); err != nil { // the server survived
		t.Fatal(err)
	}
}

// loopFDs is how many more descriptors than in goroutine mode the given
// number of servers keep open while they run, if they run event loops
// (the loop's own descriptor of the listening socket, its poller's, and
// its reserve descriptor for accepting under EMFILE).
func loopFDs(loop bool, servers int) int {
	if loop {
		return 3 * servers
	}
	return 0
}

func devNullFD(t *testing.T) int {
	t.Helper()
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestEventLoopFilesHibernate: a connection that sent descriptors
// hibernates once quiet and takes them again when it wakes; one with
// descriptors waiting for a frame does not hibernate, and they are closed
// with it.
func TestEventLoopFilesHibernate(t *testing.T) {
	l, addr := listenFor(t, "unix-loop")
	srv := NewServer(&ServerOptions{EventLoop: true, Settings: filesSettings(), CallRate: -1})
	HandleRaw(srv, "T.Sum", func(ctx context.Context, req []byte) ([]byte, error) {
		n := byte(len(Files(ctx)))
		for _, f := range Files(ctx) {
			f.Close()
		}
		return []byte{n}, nil
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	ctx := context.Background()
	in := []byte{1}
	var out []byte
	if err := c.Invoke(ctx, "T.Sum", &in, &out); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	waitHibernations := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for srv.ev.Hibernations.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d hibernations, want %d", srv.ev.Hibernations.Load(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for round := range 3 {
		waitHibernations(uint64(round + 1))
		f, _ := os.Open(os.DevNull)
		err := c.Invoke(ctx, "T.Sum", &in, &out, WithFiles(f, f))
		f.Close()
		if err != nil || len(out) != 1 || out[0] != 2 {
			t.Fatalf("round %d after hibernating: %v %v", round, out, err)
		}
	}
	checkNoLeak(t, before, 0, 0)

	// Descriptors no frame names keep the connection awake.
	r := dialRawFiles(t, c)
	fds := []int{devNullFD(t), devNullFD(t)}
	id := r.call([]byte{'x'}, fds, 0)
	shm.CloseAll(fds)
	if tr, err := r.trailer(id); err != nil || tr.Code != 0 {
		t.Fatalf("call: %v %d", err, tr.Code)
	}
	c.Close() // count only the raw connection's hibernations
	time.Sleep(100 * time.Millisecond)
	h := srv.ev.Hibernations.Load()
	time.Sleep(4 * eventloop.HibernateAfter)
	if got := srv.ev.Hibernations.Load(); got != h {
		t.Fatalf("a connection with descriptors waiting hibernated (%d, %d before)", got, h)
	}
	if n := countFDs(t); n < before+2 {
		t.Fatalf("the waiting descriptors are gone while the connection is open: %d, %d before", n, before)
	}
	r.uc.Close()
	checkNoLeak(t, before, 0, 0)
}

// TestEventLoopFilesBurst: replies with descriptors queued faster than
// the client reads go out in order, each frame's descriptors with it,
// through writes that would block (the loop's non-blocking writer).
func TestEventLoopFilesBurst(t *testing.T) {
	l, addr := listenFor(t, "unix-loop")
	srv := NewServer(&ServerOptions{EventLoop: true, Settings: filesSettings(), CallRate: -1})
	const n, size = 40, 60 << 10 // fewer files than the client holds (64), more bytes than its window; one 64 KiB frame each
	dir := t.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	HandleServerStream(srv, "T.Burst", func(ctx context.Context, _ *[]byte, st *Stream[[]byte, []byte]) error {
		for i := range n {
			f, err := os.Open(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				return err
			}
			err = ReplyFiles(ctx, f)
			f.Close()
			if err != nil {
				return err
			}
			msg := bytes.Repeat([]byte{byte(i)}, size)
			if err := st.Send(&msg); err != nil {
				return err
			}
		}
		return nil
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	var got []*os.File
	in := []byte{}
	cs, err := NewStream[[]byte, []byte](ctx, c, "T.Burst", WithCodec(codec.Raw), ReceiveFiles(&got))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&in); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	time.Sleep(200 * time.Millisecond) // let the server's replies pile up
	for i := range n {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m) != size || m[0] != byte(i) {
			t.Fatalf("message %d: %d bytes of %d", i, len(m), m[0])
		}
	}
	var m []byte
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	cs.Close()
	if len(got) != n {
		t.Fatalf("%d files, want %d", len(got), n)
	}
	for i, f := range got {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != fmt.Sprint(i) {
			t.Fatalf("file %d: %q %v", i, b, err)
		}
	}
	checkNoLeak(t, before, 0, 0)

	// A client that stops reading, then goes away: the descriptors
	// waiting in the server's writer are closed with the connection.
	r := dialRawFiles(t, c)
	r.callMethod("T.Burst", nil, nil, 0)
	time.Sleep(300 * time.Millisecond) // the socket fills; the rest waits in the writer
	r.uc.Close()
	checkNoLeak(t, before, 0, 0)
}

// TestEventLoopFilesNotOnTCP: a loop on tcp announces no descriptors:
// files fail at once, and nothing reaches the server.
func TestEventLoopFilesNotOnTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(&ServerOptions{EventLoop: true, Settings: filesSettings(), CallRate: -1})
	calls := 0
	HandleRaw(srv, "T.Echo", func(ctx context.Context, req []byte) ([]byte, error) {
		calls++
		return req, nil
	})
	var c *Client
	onLoop(t, func() {
		c = serveAndDial(t, srv, l, "tcp://"+l.Addr().String(), &ClientOptions{Settings: filesSettings()})
		if _, err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
	f, _ := os.Open(os.DevNull)
	defer f.Close()
	in, out := []byte("x"), []byte(nil)
	if err := c.Invoke(context.Background(), "T.Echo", &in, &out, WithFiles(f)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("files over tcp to a loop: %v, want errors.ErrUnsupported", err)
	}
	if calls != 0 {
		t.Fatalf("%d calls reached the server", calls)
	}
}

// TestEventLoopSharedReply: a reply over the loop's SharedThreshold goes
// as a new sealed memfd (the client, allowed fewer shared bytes than
// that, refuses it), and through the socket with the threshold off.
func TestEventLoopSharedReply(t *testing.T) {
	ctx := context.Background()
	for _, th := range []int{64 << 10, -1} {
		l, addr := listenFor(t, "unix-loop")
		srv := NewServer(&ServerOptions{EventLoop: true, Settings: filesSettings(), CallRate: -1, SharedThreshold: th})
		HandleRaw(srv, "T.Big", func(ctx context.Context, req []byte) ([]byte, error) {
			return bytes.Repeat([]byte{7}, 1<<20), nil
		})
		fds, maps := countFDs(t), countMemfdMaps(t)
		c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings(), MaxSharedBytes: 256 << 10})
		in, out := []byte{1}, []byte(nil)
		err := c.Invoke(ctx, "T.Big", &in, &out)
		if th > 0 {
			var se *status.Error
			if !errors.As(err, &se) || se.Code != status.ResourceExhausted {
				t.Fatalf("threshold %d: a 1 MiB reply over the client's shared bound: %d bytes, %v; want it refused (ResourceExhausted)", th, len(out), err)
			}
		} else if err != nil || len(out) != 1<<20 || out[len(out)-1] != 7 {
			t.Fatalf("threshold off: %d bytes, %v", len(out), err)
		}
		c.Close()
		srv.Close()
		checkNoLeak(t, fds, maps, 1) // the listener
	}
}

// TestEventLoopFilesAfterLargeSends interleaves large messages, which a
// worker writes from its own memory, with messages carrying descriptors:
// each descriptor must still travel with the bytes of its own frame.
func TestEventLoopFilesAfterLargeSends(t *testing.T) {
	l, addr := listenFor(t, "unix-loop")
	srv := NewServer(&ServerOptions{EventLoop: true, Settings: filesSettings(), CallRate: -1})
	const n, big = 12, 300 << 10
	dir := t.TempDir()
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	HandleServerStream(srv, "T.Mixed", func(ctx context.Context, _ *[]byte, st *Stream[[]byte, []byte]) error {
		for i := range n {
			large := bytes.Repeat([]byte{byte(i)}, big)
			if err := st.Send(&large); err != nil {
				return err
			}
			f, err := os.Open(filepath.Join(dir, fmt.Sprint(i)))
			if err != nil {
				return err
			}
			err = ReplyFiles(ctx, f)
			f.Close()
			if err != nil {
				return err
			}
			small := []byte{byte(i)}
			if err := st.Send(&small); err != nil {
				return err
			}
		}
		return nil
	})
	HandleServerStream(srv, "T.Large", func(ctx context.Context, _ *[]byte, st *Stream[[]byte, []byte]) error {
		large := bytes.Repeat([]byte{7}, big)
		for range 4 * n {
			if err := st.Send(&large); err != nil {
				return err
			}
		}
		return nil
	})
	c := serveAndDial(t, srv, l, addr, &ClientOptions{Settings: filesSettings()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	before := countFDs(t)
	// Another stream's large messages go out at the same time.
	other := make(chan error, 1)
	go func() {
		in := []byte{}
		ls, err := NewStream[[]byte, []byte](ctx, c, "T.Large", WithCodec(codec.Raw))
		if err != nil {
			other <- err
			return
		}
		defer ls.Close()
		err = ls.Send(&in)
		for i := 0; err == nil && i < 4*n; i++ {
			var m []byte
			if err = ls.RecvMsg(&m); err == nil && (len(m) != big || m[0] != 7) {
				err = fmt.Errorf("large message %d: %d bytes of %d", i, len(m), m[0])
			}
		}
		other <- err
	}()
	var got []*os.File
	in := []byte{}
	cs, err := NewStream[[]byte, []byte](ctx, c, "T.Mixed", WithCodec(codec.Raw), ReceiveFiles(&got))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Send(&in); err != nil {
		t.Fatal(err)
	}
	cs.CloseSend()
	for i := range 2 * n {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want := big
		if i%2 == 1 {
			want = 1
		}
		if len(m) != want || m[0] != byte(i/2) {
			t.Fatalf("message %d: %d bytes of %d", i, len(m), m[0])
		}
	}
	var m []byte
	if err := cs.RecvMsg(&m); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	cs.Close()
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d files, want %d", len(got), n)
	}
	for i, f := range got {
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != fmt.Sprint(i) {
			t.Fatalf("file %d: %q %v", i, b, err)
		}
	}
	checkNoLeak(t, before, 0, 0)
}

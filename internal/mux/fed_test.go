//go:build linux || darwin

package mux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// fedLoop is a small event loop for tests: it owns the server end of a
// socket pair (non-blocking), polls it, and feeds what it reads to a fed
// session, as rpc's event loop does with epoll.
type fedLoop struct {
	t        testing.TB
	fd       int
	readSize int // bytes read per read(2): small sizes split frames
	cfg      mux.Config
	local    wire.Settings

	hibernate atomic.Bool // hibernate whenever the session is quiet
	inflight  atomic.Int64
	wantOut   atomic.Bool
	stop      chan struct{}
	done      chan struct{}

	mu         sync.Mutex // protects following
	sess       *mux.Session
	conn       *testFedConn
	peer       wire.Settings
	state      *mux.FedState
	hibernated int
	wakes      int
	loopErr    error
}

// testFedConn is the FedConn of a fedLoop.
type testFedConn struct {
	l      *fedLoop
	mu     sync.Mutex
	closed bool
}

func (c *testFedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	n := 0
	for n < len(b) {
		k, err := syscall.Write(c.l.fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return n, mux.ErrWouldBlock
		}
		if err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

func (c *testFedConn) WaitWritable() { c.l.wantOut.Store(true) }

func (c *testFedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		unix.Shutdown(c.l.fd, unix.SHUT_RDWR)
	}
	return nil
}

func (c *testFedConn) retire() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

func (c *testFedConn) Read([]byte) (int, error)           { return 0, errors.New("fed connections are not read") }
func (c *testFedConn) LocalAddr() net.Addr                { return &net.UnixAddr{Net: "unix"} }
func (c *testFedConn) RemoteAddr() net.Addr               { return &net.UnixAddr{Net: "unix"} }
func (c *testFedConn) SetDeadline(time.Time) error        { return nil }
func (c *testFedConn) SetReadDeadline(time.Time) error    { return nil }
func (c *testFedConn) SetWriteDeadline(t time.Time) error { return nil }

// startFed connects a client session to a fed server session run by a
// fedLoop. The server's OnStream is given; it must count the goroutines it
// starts in l.inflight so that the loop hibernates only when none runs.
func startFed(t testing.TB, readSize int, local wire.Settings, mk func(l *fedLoop) mux.Config, ccfg *mux.Config) (*fedLoop, *mux.Session) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[1], true); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	cconn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	l := &fedLoop{t: t, fd: fds[1], readSize: readSize, local: local.WithDefaults(),
		stop: make(chan struct{}), done: make(chan struct{})}
	l.cfg = mk(l)
	l.cfg.Settings = local
	go l.run()
	client, err := mux.Client(cconn, ccfg)
	if err != nil {
		close(l.stop)
		<-l.done
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.Close()
		close(l.stop)
		<-l.done
		l.mu.Lock()
		err := l.loopErr
		l.mu.Unlock()
		if err != nil {
			t.Errorf("loop: %v", err)
		}
	})
	return l, client
}

func (l *fedLoop) fail(err error) {
	l.mu.Lock()
	if l.loopErr == nil {
		l.loopErr = err
	}
	l.mu.Unlock()
}

func (l *fedLoop) run() {
	defer close(l.done)
	defer unix.Close(l.fd)
	var pend []byte
	handshaken := false
	buf := make([]byte, l.readSize)
	for {
		select {
		case <-l.stop:
			l.mu.Lock()
			if l.sess != nil {
				l.sess.Close()
			}
			l.mu.Unlock()
			return
		default:
		}
		ev := int16(unix.POLLIN)
		if l.wantOut.Load() {
			ev |= unix.POLLOUT
		}
		pfd := []unix.PollFd{{Fd: int32(l.fd), Events: ev}}
		n, err := unix.Poll(pfd, 1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.mu.Lock()
		if n > 0 && pfd[0].Revents&unix.POLLOUT != 0 && l.wantOut.Swap(false) && l.sess != nil {
			l.sess.Writable()
		}
		if n > 0 && pfd[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0 {
			k, err := syscall.Read(l.fd, buf)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
			case err != nil || k == 0:
				if l.sess != nil {
					l.sess.FeedError(io.EOF)
				}
				l.mu.Unlock()
				// Wait to be stopped.
				<-l.stop
				return
			default:
				pend = append(pend, buf[:k]...)
				if !handshaken {
					peer, m, ok, err := wire.ParsePreface(pend)
					if err != nil {
						l.fail(err)
						l.mu.Unlock()
						<-l.stop
						return
					}
					if ok {
						handshaken = true
						l.peer = peer
						pend = pend[m:]
						if _, err := syscall.Write(l.fd, wire.AppendPreface(nil, l.local)); err != nil {
							l.fail(err)
						}
					}
				}
				if handshaken && len(pend) > 0 {
					if l.sess == nil {
						l.conn = &testFedConn{l: l}
						cfg := l.cfg
						s, err := mux.NewFed(l.conn, &cfg, l.peer, l.state)
						if err != nil {
							l.fail(err)
						}
						l.sess = s
						l.wakes++
					}
					m, err := l.sess.Feed(pend)
					pend = pend[m:]
					if err != nil {
						l.fail(fmt.Errorf("Feed: %w", err))
					}
				}
			}
		}
		if l.hibernate.Load() && l.sess != nil && len(pend) == 0 && l.inflight.Load() == 0 {
			if st, ok := l.sess.Hibernate(); ok {
				l.conn.retire()
				l.state = &st
				l.sess = nil
				l.hibernated++
			}
		}
		l.mu.Unlock()
	}
}

// echoOnStream answers every stream with its request, from a new goroutine
// counted in l.inflight.
func echoOnStream(l *fedLoop) mux.Config {
	return mux.Config{OnStream: func(st *mux.Stream, h *wire.CallHeader) {
		l.inflight.Add(1)
		go func() {
			defer l.inflight.Add(-1)
			b, err := st.Recv(context.Background())
			if err != nil {
				st.Finish(context.Background(), mux.Reply{Code: codeInternal, Message: err.Error()})
				return
			}
			st.Finish(context.Background(), mux.Reply{Msg: b.B, HasMsg: true, Code: codeOK})
			pool.Put(b)
		}()
	}}
}

func fedCall(ctx context.Context, c *mux.Session, msg []byte) ([]byte, error) {
	st, err := c.Open(ctx, mux.Call{Method: "/Echo", Msg: msg, End: true})
	if err != nil {
		return nil, err
	}
	defer st.Release()
	b, err := st.Recv(ctx)
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(b.B)
	pool.Put(b)
	if _, err := st.Recv(ctx); err != io.EOF {
		return nil, fmt.Errorf("after the reply: %v", err)
	}
	tr, _ := st.Trailer()
	if t, err := wire.ParseTrailer(tr); err != nil || t.Code != 0 {
		return nil, fmt.Errorf("trailer %+v %v", t, err)
	}
	return out, nil
}

// TestFedCalls runs concurrent calls of many sizes through a fed session
// whose input is read in pieces of various sizes, so that frames and the
// preface arrive split at every place.
func TestFedCalls(t *testing.T) {
	for _, rs := range []int{1, 7, 4096, 64 << 10} {
		for _, hib := range []bool{false, true} {
			t.Run(fmt.Sprintf("read%d/hibernate=%v", rs, hib), func(t *testing.T) {
				l, c := startFed(t, rs, wire.Settings{}, echoOnStream, nil)
				l.hibernate.Store(hib)
				ctx := testCtx(t)
				sizes := []int{0, 1, 100, 10 << 10, 100 << 10, 1 << 20}
				if rs < 100 {
					sizes = []int{0, 1, 100, 3000}
				}
				var wg sync.WaitGroup
				for g := range 4 {
					wg.Go(func() {
						for i, n := range sizes {
							msg := bytes.Repeat([]byte{byte(g*16 + i)}, n)
							out, err := fedCall(ctx, c, msg)
							if err != nil {
								t.Errorf("%d bytes: %v", n, err)
								return
							}
							if !bytes.Equal(out, msg) {
								t.Errorf("%d bytes: reply differs", n)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// TestFedHibernateKeepsWindows makes the connection-level flow-control
// windows wrap many times across hibernations: with a 1 KiB stream window the
// connection window is 16 KiB, so a lost or duplicated credit would stall
// the calls or break the protocol within a few of them.
func TestFedHibernateKeepsWindows(t *testing.T) {
	small := wire.Settings{InitialWindow: 1 << 10, MaxFrameSize: 1 << 10}
	l, c := startFed(t, 4096, small, echoOnStream, &mux.Config{Settings: small})
	l.hibernate.Store(true)
	ctx := testCtx(t)
	for i := range 200 {
		msg := bytes.Repeat([]byte{byte(i)}, 100+i*37%5000)
		out, err := fedCall(ctx, c, msg)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if !bytes.Equal(out, msg) {
			t.Fatalf("call %d: reply differs", i)
		}
		if i%10 == 0 {
			waitHibernated(t, l)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hibernated < 10 || l.wakes < 10 {
		t.Fatalf("hibernated %d times, woke %d times", l.hibernated, l.wakes)
	}
}

func waitHibernated(t testing.TB, l *fedLoop) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); ; {
		l.mu.Lock()
		idle := l.sess == nil
		l.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not hibernate")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFedHibernateRefusedWhileBusy checks that Hibernate leaves a session
// with an open stream alone.
func TestFedHibernateRefusedWhileBusy(t *testing.T) {
	release := make(chan struct{})
	l, c := startFed(t, 4096, wire.Settings{}, func(l *fedLoop) mux.Config {
		return mux.Config{OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			l.inflight.Add(1)
			go func() {
				<-release
				st.Finish(context.Background(), mux.Reply{Msg: []byte("ok"), HasMsg: true, Code: codeOK})
				l.inflight.Add(-1)
			}()
		}}
	}, nil)
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "/Hold", Msg: []byte("x"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	for {
		l.mu.Lock()
		s := l.sess
		l.mu.Unlock()
		if s != nil && s.NumStreams() == 1 {
			if _, ok := s.Hibernate(); ok {
				t.Fatal("Hibernate succeeded with a stream open")
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	b, err := st.Recv(ctx)
	if err != nil || string(b.B) != "ok" {
		t.Fatalf("reply %v", err)
	}
	l.hibernate.Store(true)
	waitHibernated(t, l)
	if _, err := fedCall(ctx, c, []byte("after")); err != nil {
		t.Fatal(err)
	}
}

// TestFedSlowReader has the server write replies far larger than the socket
// buffers to a client that reads slowly: the writes that would block finish
// on Writable, with every byte in order.
func TestFedSlowReader(t *testing.T) {
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7 / 5)
	}
	l, c := startFed(t, 64<<10, wire.Settings{}, func(l *fedLoop) mux.Config {
		return mux.Config{OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			l.inflight.Add(1)
			go func() {
				defer l.inflight.Add(-1)
				st.Finish(context.Background(), mux.Reply{Msg: big, HasMsg: true, Code: codeOK})
			}()
		}}
	}, nil)
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "/Big", End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	time.Sleep(50 * time.Millisecond) // let the socket buffers fill
	l.mu.Lock()
	backlog := 0
	if l.sess != nil {
		backlog = l.sess.WriteBacklog()
	}
	l.mu.Unlock()
	t.Logf("server backlog while the client does not read: %d bytes", backlog)
	b, err := st.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.B, big) {
		t.Fatal("reply differs")
	}
}

// TestFedProtocolError feeds a frame that breaks the protocol: Feed fails,
// the client learns why from a GOAWAY, and later Feeds fail too.
func TestFedProtocolError(t *testing.T) {
	l, c := startFed(t, 4096, wire.Settings{}, echoOnStream, nil)
	ctx := testCtx(t)
	if _, err := fedCall(ctx, c, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	// An unknown frame type, fed directly (under the loop's lock: Feed is
	// called from one goroutine at a time).
	bad := wire.AppendHeader(nil, wire.Header{Stream: 0, Type: 0x55})
	l.mu.Lock()
	s := l.sess
	_, err := s.Feed(bad)
	l.mu.Unlock()
	if err == nil {
		t.Fatal("Feed accepted an unknown frame type")
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("session not closed")
	}
	l.mu.Lock()
	_, err = s.Feed(bad)
	l.mu.Unlock()
	if err == nil {
		t.Fatal("Feed after the end succeeded")
	}
	// The client reads only while something waits: keep a reader going.
	c.HoldReader()
	defer c.ReleaseReader()
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("client session not closed")
	}
	if code, msg, ok := c.GoAwayReason(); !ok || code != codeInternal {
		t.Fatalf("GOAWAY %v %q %v, want Internal (client error %v)", code, msg, ok, c.Err())
	}
}

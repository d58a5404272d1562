package stream

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// A pairFunc returns the two ends of a fresh connection. The test closes
// them when it ends.
type pairFunc func(tb testing.TB) (net.Conn, net.Conn)

// transports is the matrix the main tests run over.
var transports = []struct {
	name string
	pair pairFunc
}{
	{"pipe", pipePair},
	{"unix", unixPair},
	{"transport", transportPair},
}

// forEachTransport runs f as a subtest over every transport.
func forEachTransport(t *testing.T, f func(t *testing.T, pair pairFunc)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.pair) })
	}
}

func pipePair(tb testing.TB) (net.Conn, net.Conn) {
	a, b := net.Pipe()
	tb.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// unixPair connects two ends of a Unix socket in a temporary directory.
func unixPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	l, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return acceptDial(tb, l.Accept, func() (net.Conn, error) { return net.Dial("unix", l.Addr().String()) })
}

// transportPair connects a transport.Dial client to a transport.Listen
// server over a socket file.
func transportPair(tb testing.TB) (net.Conn, net.Conn) {
	tb.Helper()
	addr := "unix://" + filepath.Join(tb.TempDir(), "t.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return acceptDial(tb, l.Accept, func() (net.Conn, error) { return transport.Dial(context.Background(), addr, nil) })
}

func acceptDial(tb testing.TB, accept func() (net.Conn, error), dial func() (net.Conn, error)) (net.Conn, net.Conn) {
	tb.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := accept()
		ch <- result{c, err}
	}()
	a, err := dial()
	r := <-ch
	if err != nil || r.err != nil {
		if a != nil {
			a.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
		tb.Fatalf("dial: %v, accept: %v", err, r.err)
	}
	tb.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// newPair starts a Stream on each end of a connection from pair. The test's
// cleanup closes both at once (each Close waits for the other's end marker).
func newPair(tb testing.TB, pair pairFunc, aOpts, bOpts *Options) (*Stream, *Stream) {
	tb.Helper()
	ca, cb := pair(tb)
	var b *Stream
	var berr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, berr = New(cb, bOpts)
	}()
	a, aerr := New(ca, aOpts)
	<-done
	if aerr != nil || berr != nil {
		tb.Fatalf("New: %v / %v", aerr, berr)
	}
	tb.Cleanup(func() { closeBoth(a, b) })
	return a, b
}

// closeBoth closes two ends of a stream at once and returns their errors.
func closeBoth(a, b *Stream) (aerr, berr error) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		berr = b.Close()
	}()
	aerr = a.Close()
	wg.Wait()
	return aerr, berr
}

// rawPair returns a Stream and the raw connection of its peer, on which the
// test writes frames by hand. The peer's preface (peerPreface, or a plain
// stream's with default settings when nil) has been sent, and the Stream's
// read. Cleanup closes the raw end first, so that Close does not wait.
func rawPair(tb testing.TB, opts *Options, peerPreface []byte) (*Stream, net.Conn) {
	tb.Helper()
	cs, raw := unixPair(tb)
	if peerPreface == nil {
		peerPreface = appendPreface(nil, wire.Settings{})
	}
	if _, err := raw.Write(peerPreface); err != nil {
		tb.Fatal(err)
	}
	s, err := New(cs, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := wire.ReadPreface(raw); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		raw.Close()
		s.Close()
	})
	return s, raw
}

// frames returns msg as DATA frames on stream 1 chunked at maxFrame.
func frames(msg []byte, maxFrame uint32, flags wire.Flags) []byte {
	return wire.AppendMessage(nil, streamID, wire.TypeData, flags, msg, maxFrame)
}

// endMarker is the end-of-stream frame.
var endMarker = wire.AppendFrame(nil, streamID, wire.TypeTrailers, wire.FlagEnd, nil)

// feedConn is a net.Conn that reads from a fixed input and discards what is
// written to it. Deadlines are accepted and ignored.
type feedConn struct {
	r bytes.Reader
}

func newFeedConn(input []byte) *feedConn {
	c := new(feedConn)
	c.r.Reset(input)
	return c
}

func (c *feedConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *feedConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *feedConn) Close() error                     { return nil }
func (c *feedConn) LocalAddr() net.Addr              { return feedAddr{} }
func (c *feedConn) RemoteAddr() net.Addr             { return feedAddr{} }
func (c *feedConn) SetDeadline(time.Time) error      { return nil }
func (c *feedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *feedConn) SetWriteDeadline(time.Time) error { return nil }

type feedAddr struct{}

func (feedAddr) Network() string { return "feed" }
func (feedAddr) String() string  { return "feed" }

// mustErrAs fails the test unless err wraps a value of type T, and returns
// it.
func mustErrAs[T error](tb testing.TB, err error) T {
	tb.Helper()
	var target T
	if !errors.As(err, &target) {
		tb.Fatalf("error %v (%T) is not a %T", err, err, target)
	}
	return target
}

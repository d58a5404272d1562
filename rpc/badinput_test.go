package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// These tests talk to a real Server over a unix socket with hand-made bytes,
// and check that whatever one peer sends, the server stays up for the
// others.

// badEnv is a server on a socket file.
type badEnv struct {
	path string
	addr string
	srv  *Server
}

// startBad serves srv on a socket file in a temp dir. The server is closed
// when the test ends, and Serve must then return ErrServerClosed.
func startBad(t testing.TB, srv *Server) *badEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	useMode(t, srv)
	serveTest(t, srv, l)
	return &badEnv{path: path, addr: "unix://" + path, srv: srv}
}

// serveTest serves l with srv until the test ends, when srv is closed and
// Serve must return ErrServerClosed.
func serveTest(t testing.TB, srv *Server, l net.Listener) {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
}

// client returns a client of the server, closed when the test ends.
func (e *badEnv) client(t testing.TB, opts *ClientOptions) *Client {
	t.Helper()
	c, err := Dial(e.addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw opens a plain connection to the server, closed when the test ends.
func (e *badEnv) raw(t testing.TB) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", e.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawSession is a hand-driven client connection that has exchanged prefaces.
type rawSession struct {
	t    testing.TB
	conn net.Conn
	r    *frameio.Reader
	peer wire.Settings // the server's settings
}

// handshake opens a raw connection and exchanges prefaces.
func (e *badEnv) handshake(t testing.TB) *rawSession {
	t.Helper()
	conn := e.raw(t)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(wire.AppendPreface(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	s, err := wire.ReadPreface(conn)
	if err != nil {
		t.Fatalf("reading the server's preface: %v", err)
	}
	conn.SetDeadline(time.Time{})
	return &rawSession{t: t, conn: conn, r: frameio.NewReader(conn, wire.DefaultMaxFrameSize), peer: s}
}

func (rs *rawSession) write(b []byte) {
	rs.t.Helper()
	rs.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := rs.conn.Write(b); err != nil {
		rs.t.Fatalf("write: %v", err)
	}
}

// frame returns the bytes of one frame.
func frame(stream uint32, typ wire.Type, flags wire.Flags, payload []byte) []byte {
	return wire.AppendFrame(nil, stream, typ, flags, payload)
}

// callFrames returns the frames of a unary call: its header and its request.
func callFrames(stream uint32, method string, cd uint8, req []byte) []byte {
	b := frame(stream, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, method, cd, 0, nil))
	return wire.AppendMessage(b, stream, wire.TypeData, wire.FlagEnd, req, wire.DefaultMaxFrameSize)
}

// rawReply is what came back on one stream.
type rawReply struct {
	msg     []byte
	trailer wire.Trailer
}

// await reads frames until the trailers of stream arrive; frames of other
// streams and connection frames other than GOAWAY are skipped.
func (rs *rawSession) await(stream uint32) rawReply {
	rs.t.Helper()
	rs.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	defer rs.conn.SetReadDeadline(time.Time{})
	var out rawReply
	var asm wire.Assembler
	for {
		h, p, err := rs.r.Next()
		if err != nil {
			rs.t.Fatalf("waiting for stream %d: %v", stream, err)
		}
		if h.Stream != stream {
			continue
		}
		switch h.Type {
		case wire.TypeData:
			msg, done, err := asm.Add(h, p)
			if err != nil {
				rs.t.Fatalf("stream %d: %v", stream, err)
			}
			if done {
				out.msg = append([]byte(nil), msg...)
			}
		case wire.TypeTrailers:
			tr, err := wire.ParseTrailer(p)
			if err != nil {
				rs.t.Fatalf("stream %d trailers: %v", stream, err)
			}
			tr.Message = append([]byte(nil), tr.Message...)
			out.trailer = tr
			return out
		}
	}
}

// call makes a raw-codec call to Bad.Echo on stream and checks the echo.
func (rs *rawSession) call(stream uint32, req []byte) {
	rs.t.Helper()
	rs.write(callFrames(stream, "Bad.Echo", codec.IDRaw, req))
	r := rs.await(stream)
	if r.trailer.Code != 0 || !bytes.Equal(r.msg, req) {
		rs.t.Fatalf("stream %d: status %d %q, reply %q, want %q", stream, r.trailer.Code, r.trailer.Message, r.msg, req)
	}
}

// closedResult is how a connection ended.
type closedResult struct {
	data   []byte        // everything read before the end
	goAway *goAwayFrame  // the GOAWAY among data, if any
	after  time.Duration // how long the end took
}

type goAwayFrame struct {
	last uint32
	code status.Code
	msg  string
}

// expectClosed reads conn until the server closes it, failing the test if
// that takes longer than within.
func expectClosed(t testing.TB, conn net.Conn, within time.Duration) closedResult {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(within))
	var res closedResult
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.Read(buf)
		res.data = append(res.data, buf[:n]...)
		if err != nil {
			res.after = time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server did not close the connection within %v (read %d bytes)", within, len(res.data))
			}
			break
		}
	}
	// Look for a GOAWAY in what was read after the preface.
	rest := res.data
	if _, n, ok, err := wire.ParsePreface(rest); ok && err == nil {
		rest = rest[n:]
	}
	for len(rest) > 0 {
		var h wire.Header
		var p []byte
		var ok bool
		var err error
		rest, h, p, ok, err = wire.ParseFrame(rest, 16<<20)
		if !ok || err != nil {
			break
		}
		if h.Type == wire.TypeGoAway {
			last, code, msg, err := wire.ParseGoAway(p)
			if err == nil {
				res.goAway = &goAwayFrame{last, status.Code(code), string(msg)}
			}
		}
	}
	return res
}

// newBadServer returns a server with the methods the bad-input tests use.
func newBadServer(opts *ServerOptions) *Server {
	if opts == nil {
		opts = &ServerOptions{}
	}
	if opts.Logger == nil {
		var b strings.Builder
		opts.Logger = newTestLogger(&b, new(sync.Mutex)) // keep refusals out of the test output
	}
	srv := NewServer(opts)
	HandleRaw(srv, "Bad.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	HandleRaw(srv, "Bad.Hold", func(ctx context.Context, req []byte) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	HandleRaw(srv, "Bad.Big", func(ctx context.Context, req []byte) ([]byte, error) {
		n, err := strconv.Atoi(string(req))
		if err != nil {
			return nil, status.New(status.InvalidArgument, err.Error())
		}
		if n < 0 || n > 16<<20 { // a fuzzed size must not take the machine's memory
			return nil, status.Errorf(status.InvalidArgument, "size %d out of range", n)
		}
		return bytes.Repeat([]byte{'b'}, n), nil
	})
	return srv
}

// checkServing fails the test unless c can still make a call.
func checkServing(t testing.TB, c *Client, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []byte
	if err := c.Invoke(ctx, "Bad.Echo", []byte(what), &out); err != nil || string(out) != what {
		t.Fatalf("%s: a well-behaved client's call failed: %q %v", what, out, err)
	}
}

// waitConns waits until the server has n open connections.
func waitConns(t testing.TB, srv *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); srv.Stats().Conns != n; {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d connections, want %d", srv.Stats().Conns, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitCalls waits until the server has n calls in progress.
func waitCalls(t testing.TB, srv *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); srv.Stats().Calls != n; {
		if time.Now().After(deadline) {
			t.Fatalf("server has %d calls in progress, want %d", srv.Stats().Calls, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBadFrames sends frames that break the protocol after a valid preface.
// Each is a connection error: the server closes that connection at once, and
// its other clients go on.
func TestBadFrames(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	good := e.client(t, nil)
	checkServing(t, good, "before")

	hdr := func(length, stream uint32, typ wire.Type, flags wire.Flags) []byte {
		return wire.AppendHeader(nil, wire.Header{Length: length, Stream: stream, Type: typ, Flags: flags})
	}
	okCall := callFrames(1, "Bad.Echo", codec.IDRaw, []byte("x"))
	cases := []struct {
		name  string
		bytes []byte
	}{
		{"text after the preface", []byte("this is not a frame at all, just some text\n")},
		{"frame over MaxFrameSize", hdr(wire.DefaultMaxFrameSize+1, 1, wire.TypeData, 0)},
		{"frame of 4 GiB", hdr(0xffffffff, 1, wire.TypeData, 0)},
		{"unknown frame type", frame(1, 0x42, 0, []byte("xyz"))},
		{"frame type zero", frame(1, 0, 0, nil)},
		{"DATA on stream 0", frame(0, wire.TypeData, 0, []byte("x"))},
		{"HEADERS on stream 0", frame(0, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", 0, 0, nil))},
		{"PING on a stream", frame(1, wire.TypePing, 0, make([]byte, 8))},
		{"PING of 3 bytes", frame(0, wire.TypePing, 0, []byte{1, 2, 3})},
		{"WINDOW of 2 bytes", frame(0, wire.TypeWindow, 0, []byte{0, 1})},
		{"even stream opened by the client", frame(2, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", 0, 0, nil))},
		{"stream id going backwards", append(okCall, frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", 0, 0, nil))...)},
		{"chunked message shorter than its prefix", append(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", 0, 0, nil)),
			frame(1, wire.TypeData, wire.FlagMore, []byte{0, 0})...)},
		{"DATA over the stream window", append(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Hold", 0, 0, nil)),
			bytes.Repeat(frame(1, wire.TypeData, 0, make([]byte, 60<<10)), 20)...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := e.handshake(t)
			rs.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			rs.conn.Write(tc.bytes) // the server may close before reading it all
			res := expectClosed(t, rs.conn, 2*time.Second)
			t.Logf("closed after %v; goaway %+v", res.after.Round(time.Microsecond), res.goAway)
			checkServing(t, good, tc.name)
		})
	}
	waitConns(t, e.srv, 1)
	if st := e.srv.Stats(); st.Panics != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestProtocolErrorSendsGoAway checks PROTOCOL.md, Errors: the side that
// detects a connection error SHOULD send GOAWAY with code 13 (Internal) and a
// message describing the problem before it closes the connection, so the
// peer can tell why it was dropped.
func TestProtocolErrorSendsGoAway(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	rs := e.handshake(t)
	rs.write(frame(1, 0x42, 0, nil))
	res := expectClosed(t, rs.conn, 2*time.Second)
	if res.goAway == nil {
		t.Fatalf("connection closed after an unknown frame type without a GOAWAY (read %x)", res.data)
	}
	if res.goAway.code != status.Internal || res.goAway.msg == "" {
		t.Fatalf("GOAWAY %+v, want code Internal and a message", res.goAway)
	}
}

// TestMalformedCallHeader checks that a call header that does not decode
// ends only its stream, with InvalidArgument, and that an unknown codec is
// refused the same way.
func TestMalformedCallHeader(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	rs := e.handshake(t)
	rs.write(frame(1, wire.TypeHeaders, wire.FlagEnd, []byte{0x05, 'B', 'a'})) // truncated method
	if r := rs.await(1); status.Code(r.trailer.Code) != status.InvalidArgument {
		t.Fatalf("truncated method: status %d %q", r.trailer.Code, r.trailer.Message)
	}
	rs.write(callFrames(3, "Bad.Echo", 9, []byte("x")))
	if r := rs.await(3); status.Code(r.trailer.Code) != status.InvalidArgument {
		t.Fatalf("unknown codec: status %d %q", r.trailer.Code, r.trailer.Message)
	}
	rs.write(callFrames(5, "Bad.Echo", codec.IDJSON, []byte(`"x"`)))
	if r := rs.await(5); status.Code(r.trailer.Code) != status.InvalidArgument {
		t.Fatalf("json to a raw method: status %d %q", r.trailer.Code, r.trailer.Message)
	}
	rs.call(7, []byte("still up"))
}

// TestUnknownStream sends DATA, CANCEL and WINDOW for streams that were never
// opened. PROTOCOL.md says frames for a closed or unknown stream are
// ignored: the connection stays up and serves the next call.
func TestUnknownStream(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	rs := e.handshake(t)
	rs.write(frame(99, wire.TypeData, 0, []byte("orphan")))
	rs.write(frame(77, wire.TypeCancel, 0, nil))
	rs.write(frame(55, wire.TypeWindow, 0, []byte{0, 0, 1, 0}))
	rs.write(frame(33, wire.TypeData, wire.FlagEnd, nil))
	rs.call(1, []byte("after orphans"))
	// DATA and CANCEL for a stream that has ended are ignored too.
	rs.write(frame(1, wire.TypeData, 0, []byte("late")))
	rs.write(frame(1, wire.TypeCancel, 0, nil))
	rs.call(3, []byte("after late frames"))
	// A chunked message for a stream never opened is dropped, but its
	// credit still counts and is given back: send more than the connection
	// window holds.
	msg := make([]byte, 200<<10)
	for i := range 100 {
		rs.write(wire.AppendMessage(nil, 1001+2*uint32(i), wire.TypeData, wire.FlagEnd, msg, wire.DefaultMaxFrameSize))
	}
	rs.call(5, []byte("after 20 MiB of orphan data"))
	if n := e.srv.Stats().Conns; n != 1 {
		t.Fatalf("%d connections", n)
	}
}

// TestReplyOverClientLimit has a handler answer 2 MiB to a client that
// accepts at most 1 MiB.
func TestReplyOverClientLimit(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	c := e.client(t, &ClientOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}})
	var out []byte
	start := time.Now()
	err := c.Invoke(context.Background(), "Bad.Big", []byte(strconv.Itoa(2<<20)), &out)
	t.Logf("2 MiB reply to a 1 MiB client: %v (after %v)", err, time.Since(start).Round(time.Microsecond))
	if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "2097152") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("err = %v, want ResourceExhausted naming the size and the limit", err)
	}
	// The same client, and the server, go on.
	if err := c.Invoke(context.Background(), "Bad.Big", []byte(strconv.Itoa(1<<20)), &out); err != nil || len(out) != 1<<20 {
		t.Fatalf("1 MiB reply: %d bytes, %v", len(out), err)
	}
	checkServing(t, c, "after a large reply")
	checkServing(t, e.client(t, nil), "another client")
	waitCalls(t, e.srv, 0)
	if st := e.srv.Stats(); st.Conns != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRequestOverServerLimit sends 2 MiB to a server that accepts at most
// 1 MiB. The client knows the limit from the server's preface and refuses
// before sending anything.
func TestRequestOverServerLimit(t *testing.T) {
	e := startBad(t, newBadServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}}))
	c := e.client(t, nil)
	var out []byte
	err := c.Invoke(context.Background(), "Bad.Echo", make([]byte, 2<<20), &out)
	if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "2097152") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("err = %v, want ResourceExhausted naming the size and the limit", err)
	}
	if st := e.srv.Stats(); st.CallsTotal != 0 || st.Refused != 0 {
		t.Fatalf("the server saw the call: %+v", st)
	}
	if err := c.Invoke(context.Background(), "Bad.Echo", make([]byte, 1<<20), &out); err != nil || len(out) != 1<<20 {
		t.Fatalf("1 MiB request: %d bytes, %v", len(out), err)
	}

	// A peer that ignores the limit: the server checks the declared length
	// of the chunked message before allocating, ends only that stream with
	// ResourceExhausted, and drops the rest of its frames.
	rs := e.handshake(t)
	if rs.peer.MaxMessageSize != 1<<20 {
		t.Fatalf("server preface says MaxMessageSize %d", rs.peer.MaxMessageSize)
	}
	big := wire.AppendMessage(nil, 1, wire.TypeData, wire.FlagEnd, make([]byte, 2<<20), wire.DefaultMaxFrameSize)
	firstFrame := wire.HeaderSize + wire.DefaultMaxFrameSize
	rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
	rs.write(big[:firstFrame])
	r := rs.await(1)
	if status.Code(r.trailer.Code) != status.ResourceExhausted || !strings.Contains(string(r.trailer.Message), "2097152") {
		t.Fatalf("declared 2 MiB: status %d %q", r.trailer.Code, r.trailer.Message)
	}
	// The refused call holds no slot under the limits: it was admitted when
	// its header came, and would otherwise count until the server stops.
	waitCalls(t, e.srv, 0)
	// The rest of the message is dropped; the connection goes on, and a
	// large message under the limit on another stream still arrives whole.
	rs.write(big[firstFrame:])
	mid := make([]byte, 600<<10)
	for i := range mid {
		mid[i] = byte(i)
	}
	rs.write(frame(3, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
	rs.write(wire.AppendMessage(nil, 3, wire.TypeData, wire.FlagEnd, mid, wire.DefaultMaxFrameSize))
	if r := rs.await(3); r.trailer.Code != 0 || !bytes.Equal(r.msg, mid) {
		t.Fatalf("600 KiB call: status %d %q, %d bytes", r.trailer.Code, r.trailer.Message, len(r.msg))
	}
	rs.call(5, []byte("still up"))
	rs.conn.Close()
	waitConns(t, e.srv, 1)
	waitCalls(t, e.srv, 0)
}

// TestStalledPeers has peers stop half way, in the preface, in a frame
// header, in a message, and while reading a reply, and checks that a
// well-behaved client keeps calling meanwhile and that Close still returns.
func TestStalledPeers(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	good := e.client(t, nil)
	checkServing(t, good, "before")

	// Half a preface.
	e.raw(t).Write([]byte(wire.Magic[:3]))
	// A preface, then half a frame header.
	rs := e.handshake(t)
	rs.write(wire.AppendHeader(nil, wire.Header{Length: 5, Stream: 1, Type: wire.TypeHeaders})[:5])
	// A call header, then half of a chunked request.
	rs2 := e.handshake(t)
	msg := wire.AppendMessage(nil, 1, wire.TypeData, wire.FlagEnd, make([]byte, 300<<10), wire.DefaultMaxFrameSize)
	rs2.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
	rs2.write(msg[:len(msg)/2])
	// Calls for 3 MiB replies that the peer never reads: the handlers block
	// on flow control.
	rs3 := e.handshake(t)
	for i := range 4 {
		rs3.write(callFrames(uint32(1+2*i), "Bad.Big", codec.IDRaw, []byte(strconv.Itoa(3<<20))))
	}
	waitCalls(t, e.srv, 5) // the big calls are blocked on flow control, one waits for its request

	// Meanwhile a well-behaved client, and a new one, keep calling.
	other := e.client(t, nil)
	for i := 0; i < 200; i++ {
		checkServing(t, good, fmt.Sprint("call ", i))
		checkServing(t, other, fmt.Sprint("new client call ", i))
	}

	// Close does not wait for stalled peers.
	start := time.Now()
	e.srv.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v with stalled peers", el)
	}
}

// TestShutdownStalledReader checks that Shutdown with a deadline returns
// once it passes even though a peer never reads its replies.
func TestShutdownStalledReader(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	rs := e.handshake(t)
	rs.write(callFrames(1, "Bad.Big", codec.IDRaw, []byte(strconv.Itoa(3<<20))))
	waitCalls(t, e.srv, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := e.srv.Shutdown(ctx)
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("Shutdown took %v", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want the context's error", err)
	}
	expectClosed(t, rs.conn, 2*time.Second)
}

// TestNotWarrenPeers connects peers that do not speak warren, to a server
// with the HTTP bridge off (TestHTTPNotWarrenPeers has it on).
func TestNotWarrenPeers(t *testing.T) {
	e := startBad(t, newBadServer(&ServerOptions{NoHTTP: true}))
	good := e.client(t, nil)

	t.Run("random bytes", func(t *testing.T) {
		conn := e.raw(t)
		junk := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0x9a, 0x11, 0x42}
		conn.Write(junk)
		res := expectClosed(t, conn, time.Second)
		if len(res.data) != 0 {
			t.Fatalf("the server answered random bytes with %q", res.data)
		}
		t.Logf("closed after %v", res.after.Round(time.Microsecond))
		checkServing(t, good, "after random bytes")
	})
	t.Run("one wrong byte", func(t *testing.T) {
		conn := e.raw(t)
		conn.Write([]byte{'X'})
		res := expectClosed(t, conn, time.Second)
		if len(res.data) != 0 {
			t.Fatalf("the server answered with %q", res.data)
		}
		checkServing(t, good, "after one byte")
	})
	t.Run("wrong version", func(t *testing.T) {
		conn := e.raw(t)
		conn.Write([]byte{0xF0, 'W', 'R', 'N', 9, 0})
		res := expectClosed(t, conn, time.Second)
		if len(res.data) != 0 {
			t.Fatalf("the server answered with %q", res.data)
		}
		checkServing(t, good, "after a wrong version")
	})
	t.Run("setting out of range", func(t *testing.T) {
		conn := e.raw(t)
		conn.Write([]byte{0xF0, 'W', 'R', 'N', 1, 1, 0, 1, 0, 0, 0, 1}) // MaxFrameSize 1
		res := expectClosed(t, conn, time.Second)
		if len(res.data) != 0 {
			t.Fatalf("the server answered with %q", res.data)
		}
		checkServing(t, good, "after a bad setting")
	})
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /Counter.Inc HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n{\"name\":\"a\"}",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		t.Run("http "+req[:4], func(t *testing.T) {
			conn := e.raw(t)
			conn.Write([]byte(req))
			res := expectClosed(t, conn, time.Second)
			resp := string(res.data)
			if !strings.HasPrefix(resp, "HTTP/1.1 400 ") || !strings.Contains(resp, "warren protocol") || !strings.Contains(resp, "Connection: close") {
				t.Fatalf("response %q", resp)
			}
			t.Logf("answered and closed after %v", res.after.Round(time.Microsecond))
			checkServing(t, good, "after an HTTP request")
		})
	}
	waitConns(t, e.srv, 1)
}

// TestMaxCalls bounds concurrent calls on the whole server, across
// connections.
func TestMaxCalls(t *testing.T) {
	srv := newBadServer(&ServerOptions{MaxCalls: 2})
	release := make(chan struct{})
	var running atomic.Int32
	Handle(srv, "Bad.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		running.Add(1)
		<-release
		return &Empty{}, nil
	})
	e := startBad(t, srv)
	a, b := e.client(t, nil), e.client(t, nil)
	var wg sync.WaitGroup
	for _, c := range []*Client{a, b} {
		wg.Go(func() {
			if _, err := Call[Empty, Empty](context.Background(), c, "Bad.Block", &Empty{}); err != nil {
				t.Error(err)
			}
		})
	}
	for running.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	for _, c := range []*Client{a, b, e.client(t, nil)} {
		var out []byte
		err := c.Invoke(context.Background(), "Bad.Echo", []byte("x"), &out)
		if status.CodeOf(err) != status.ResourceExhausted || !strings.Contains(err.Error(), "limit 2") {
			t.Errorf("third call: %v, want ResourceExhausted", err)
		}
	}
	close(release)
	wg.Wait()
	checkServing(t, a, "after the blocked calls")
	waitCalls(t, e.srv, 0) // a call's slot is given back just after its reply is sent
	if st := e.srv.Stats(); st.Refused != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCallWithoutRequest opens a call whose header carries END: the caller
// sends no request message. The server must answer it (the unary handler
// needs a request, so InvalidArgument) rather than leave the caller waiting
// and the call counted as in progress for ever.
func TestCallWithoutRequest(t *testing.T) {
	e := startBad(t, newBadServer(nil))
	rs := e.handshake(t)
	rs.write(frame(1, wire.TypeHeaders, wire.FlagEnd, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
	r := rs.await(1)
	if status.Code(r.trailer.Code) != status.InvalidArgument {
		t.Fatalf("status %d %q, want InvalidArgument", r.trailer.Code, r.trailer.Message)
	}
	waitCalls(t, e.srv, 0)
}

// TestAbandonedCallReleasesSlot opens calls and abandons them before their
// request message is complete: by CANCEL, by closing the connection, and by
// a client whose deadline passes while it uploads a large request. Each
// admitted call holds a slot of MaxCalls and MaxCallsPerConn, and is what
// Shutdown waits for; an abandoned one must give its slot back.
// TestResetBeforeAdmission checks that a call whose reset (its connection
// failing, on another goroutine) reaches it between its stream's creation
// and its admission does not keep its slot: abandon found nothing to
// release then, so admission must.
func TestResetBeforeAdmission(t *testing.T) {
	for _, method := range []string{"T.Unary", "T.Stream"} {
		srv := NewServer(&ServerOptions{CallRate: -1})
		Handle(srv, "T.Unary", func(ctx context.Context, _ *Empty) (*Empty, error) { return &Empty{}, nil })
		HandleBidiStream(srv, "T.Stream", func(ctx context.Context, st *Stream[Empty, Empty]) error { return nil })
		sc := &serverConn{srv: srv, peer: &peer.Peer{Network: "unix"}}
		c := new(serverCall)
		c.st.Owner = c
		c.abandon() // OnReset, before OnStream
		sc.onStream(&c.st, &wire.CallHeader{Method: []byte(method), Codec: codec.IDJSON})
		srv.Close() // waits for a stream's worker, which must not start the call
		if calls, _, _ := (*loopSession)(sc).Work(); sc.work.Load() != 0 || srv.calls.Load() != 0 {
			t.Errorf("%s: calls %d on the connection (work %#x), %d on the server after a reset before admission", method, calls, sc.work.Load(), srv.calls.Load())
		}
	}
}

func TestAbandonedCallReleasesSlot(t *testing.T) {
	t.Run("cancel before the request", func(t *testing.T) {
		e := startBad(t, newBadServer(&ServerOptions{MaxCalls: 1}))
		rs := e.handshake(t)
		rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
		rs.write(frame(1, wire.TypeCancel, 0, nil))
		waitCalls(t, e.srv, 0)
		// A chunked request canceled after its first frame.
		msg := wire.AppendMessage(nil, 3, wire.TypeData, wire.FlagEnd, make([]byte, 200<<10), wire.DefaultMaxFrameSize)
		rs.write(frame(3, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
		rs.write(msg[:wire.HeaderSize+wire.DefaultMaxFrameSize])
		rs.write(frame(3, wire.TypeCancel, 0, nil))
		waitCalls(t, e.srv, 0)
		rs.call(5, []byte("after the cancels"))
		// The slot is released when the reply's end is queued, before the
		// caller can see it.
		waitCalls(t, e.srv, 0)
		checkServing(t, e.client(t, nil), "with MaxCalls 1 after the cancels")
	})
	t.Run("connection closed before the request", func(t *testing.T) {
		e := startBad(t, newBadServer(nil))
		rs := e.handshake(t)
		rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
		waitCalls(t, e.srv, 1)
		rs.conn.Close()
		waitConns(t, e.srv, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with no connection left: %v after %v (stats %+v)", err, time.Since(start), e.srv.Stats())
		}
	})
	t.Run("protocol error before the request", func(t *testing.T) {
		e := startBad(t, newBadServer(nil))
		rs := e.handshake(t)
		rs.write(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
		rs.write(frame(1, wire.TypeData, wire.FlagMore, []byte{0, 0})) // chunked, without its length
		expectClosed(t, rs.conn, 2*time.Second)
		waitConns(t, e.srv, 0)
		waitCalls(t, e.srv, 0)
	})
	t.Run("client deadline during a large request", func(t *testing.T) {
		e := startBad(t, newBadServer(&ServerOptions{Settings: wire.Settings{InitialWindow: 1 << 10}}))
		c := e.client(t, nil)
		checkServing(t, c, "before")
		big := make([]byte, 3<<20)
		var out []byte
		for range 10 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
			err := c.Invoke(ctx, "Bad.Echo", big, &out)
			cancel()
			if code := status.CodeOf(err); code != status.DeadlineExceeded && code != status.OK {
				t.Fatalf("err = %v", err)
			}
		}
		waitCalls(t, e.srv, 0)
	})
}

// TestStreamRequestOverServerLimit: a streaming handler waiting in RecvMsg
// when its caller sends a message over MaxMessageSize gets
// ResourceExhausted, not the end of its context, and the call gives back
// its slot.
func TestStreamRequestOverServerLimit(t *testing.T) {
	srv := newBadServer(&ServerOptions{Settings: wire.Settings{MaxMessageSize: 1 << 20}})
	got := make(chan error, 1)
	HandleBidiStream(srv, "Bad.Stream", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		var m []byte
		err := st.RecvMsg(&m)
		got <- err
		return err
	})
	e := startBad(t, srv)
	rs := e.handshake(t)
	for id := uint32(1); id < 20; id += 2 {
		rs.write(frame(id, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Stream", codec.IDRaw, 0, nil)))
		waitCalls(t, srv, 1)
		time.Sleep(time.Millisecond) // the handler waits in RecvMsg
		rs.write(frame(id, wire.TypeData, wire.FlagMore, binary.BigEndian.AppendUint32(nil, 2<<20)))
		if err := <-got; status.CodeOf(err) != status.ResourceExhausted {
			t.Fatalf("stream %d: the handler's RecvMsg = %v, want ResourceExhausted", id, err)
		}
		if r := rs.await(id); status.Code(r.trailer.Code) != status.ResourceExhausted {
			t.Fatalf("stream %d: status %d %q", id, r.trailer.Code, r.trailer.Message)
		}
		waitCalls(t, srv, 0)
	}
}

package mux_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// The wire codes the tests send and expect (PROTOCOL.md, "Status codes").
const (
	codeOK                wire.Code = 0
	codeInvalidArgument   wire.Code = 3
	codeNotFound          wire.Code = 5
	codePermissionDenied  wire.Code = 7
	codeResourceExhausted wire.Code = 8
	codeUnimplemented     wire.Code = 12
	codeInternal          wire.Code = 13
	codeUnavailable       wire.Code = 14
	codeDataLoss          wire.Code = 15
)

// testTimeout bounds every wait that should end promptly. It is reached only
// when something is broken, so it is generous.
const testTimeout = 10 * time.Second

// watchdogTimeout is how long a pair of sessions may stay in use before the
// watchdog closes their connection; no test needs more than a few seconds.
const watchdogTimeout = 8 * time.Second

// testCtx returns a context that ends after testTimeout or with the test.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// connKind makes a pair of connected connections, the client's end first.
type connKind struct {
	name string
	pair func(t testing.TB) (client, server net.Conn)
}

// connKinds are the connections every session test runs over: a synchronous
// in-memory pipe (no buffering at all, so a write blocks until the peer
// reads) and a kernel Unix socket pair.
var connKinds = []connKind{
	{"pipe", pipePair},
	{"unix", socketPair},
}

// forKinds runs fn as a subtest over each connection kind.
// ignoreWatchdog leaves the takeover watchdog's goroutine out of a test's
// leak check: it serves the whole process and ends soon after the last
// request run inline, which TestWatchdog and TestMain's check show.
var ignoreWatchdog = goleak.IgnoreAnyFunction("github.com/warrenipc/warren/internal/watchdog.(*watcher).run")

func forKinds(t *testing.T, fn func(t *testing.T, k connKind)) {
	t.Helper()
	for _, k := range connKinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k) })
	}
}

func pipePair(t testing.TB) (net.Conn, net.Conn) {
	c, s := net.Pipe()
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// socketPair returns the two ends of a connected AF_UNIX stream socket pair.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socketpair: %v", err)
	}
	c, s := fileConn(t, fds[0], "client"), fileConn(t, fds[1], "server")
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func fileConn(t testing.TB, fd int, name string) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), name)
	defer f.Close() // FileConn holds its own duplicate
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatalf("FileConn: %v", err)
	}
	return c
}

// listenerPair dials a Unix socket listener in a temporary directory.
func listenerPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	dir := t.TempDir()
	if len(dir) > 90 { // sun_path is 108 bytes on Linux, 104 on macOS
		var err error
		if dir, err = os.MkdirTemp("", "mux"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	l, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		s, err := l.Accept()
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- s
	}()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	s := <-accepted
	if s == nil {
		c.Close()
		t.FailNow()
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// handshake runs mux.Client and mux.Server over cc and sc at once and closes
// both sessions at cleanup.
func handshake(t testing.TB, cc, sc net.Conn, ccfg, scfg *mux.Config) (client, server *mux.Session) {
	t.Helper()
	type result struct {
		s   *mux.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := mux.Server(sc, scfg)
		done <- result{s, err}
	}()
	c, cerr := mux.Client(cc, ccfg)
	r := <-done
	if cerr != nil || r.err != nil {
		if c != nil {
			c.Close()
		}
		if r.s != nil {
			r.s.Close()
		}
		t.Fatalf("handshake failed: client: %v; server: %v", cerr, r.err)
	}
	t.Cleanup(func() {
		c.Close()
		r.s.Close()
	})
	watchdog(t, cc, sc)
	return c, r.s
}

// watchdog closes the connections if the test still runs after
// watchdogTimeout, so that a deadlock inside the sessions (where a blocked
// conn.Write ignores every context) fails the test instead of hanging it. The
// failure lists the goroutines that were in package mux at that moment.
func watchdog(t testing.TB, conns ...net.Conn) {
	var mu sync.Mutex
	var stacks string
	fired := false
	timer := time.AfterFunc(watchdogTimeout, func() {
		dump := muxGoroutines()
		mu.Lock()
		fired, stacks = true, dump
		mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	t.Cleanup(func() {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		if fired {
			t.Errorf("deadlock: the sessions were still busy after %v and their connection was closed to unblock them; goroutines in package mux then:\n%s",
				watchdogTimeout, stacks)
		}
	})
}

// muxGoroutines returns the stacks of the goroutines running code of
// package mux.
func muxGoroutines() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "warren/internal/mux.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// newPair connects a client and a server session over a new connection of
// kind k.
func newPair(t testing.TB, k connKind, ccfg, scfg *mux.Config) (client, server *mux.Session) {
	t.Helper()
	cc, sc := k.pair(t)
	return handshake(t, cc, sc, ccfg, scfg)
}

// callInfo is what a server learned from a call header.
type callInfo struct {
	Method  string
	Codec   uint8
	Timeout time.Duration
	MD      []string
}

func parseCall(h *wire.CallHeader) callInfo {
	md, err := wire.ParseMetadata(h.Metadata, nil)
	if err != nil {
		panic(err) // ParseCallHeader validated the block
	}
	return callInfo{Method: string(h.Method), Codec: h.Codec, Timeout: h.Timeout, MD: md}
}

// handlerFunc serves one stream the client opened, on its own goroutine.
type handlerFunc func(ctx context.Context, st *mux.Stream, c callInfo)

// testServer runs each stream the client opens on a goroutine of its own,
// dispatched by method, and waits for those goroutines at cleanup.
type testServer struct {
	ctx      context.Context
	handlers map[string]handlerFunc
	fallback handlerFunc
	wg       sync.WaitGroup
	opened   atomic.Int64

	mu     sync.Mutex // protects following
	ids    []uint32   // stream ids in the order OnStream saw them
	resets []error    // errors OnReset was called with

	resetCh chan error // receives every OnReset error, if not nil
}

// newServer returns a testServer that serves every method with fallback.
// Register it before newPair so that its cleanup, which waits for the
// handler goroutines, runs after the sessions are closed.
func newServer(t testing.TB, fallback handlerFunc) *testServer {
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{ctx: ctx, handlers: map[string]handlerFunc{}, fallback: fallback}
	t.Cleanup(func() {
		cancel()
		ts.wg.Wait()
	})
	return ts
}

func (ts *testServer) handle(method string, h handlerFunc) *testServer {
	ts.handlers[method] = h
	return ts
}

// config returns a server Config with the given settings.
func (ts *testServer) config(set wire.Settings) *mux.Config {
	return &mux.Config{
		Settings: set,
		OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			c := parseCall(h)
			ts.opened.Add(1)
			ts.mu.Lock()
			ts.ids = append(ts.ids, st.ID())
			ts.mu.Unlock()
			fn := ts.handlers[c.Method]
			if fn == nil {
				fn = ts.fallback
			}
			if fn == nil {
				st.Refuse(codeUnimplemented, "unknown method "+c.Method)
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				fn(ts.ctx, st, c)
			}()
		},
		OnReset: func(st *mux.Stream, err error) {
			ts.mu.Lock()
			ts.resets = append(ts.resets, err)
			ts.mu.Unlock()
			if ts.resetCh != nil {
				ts.resetCh <- err
			}
		},
	}
}

func (ts *testServer) streamIDs() []uint32 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]uint32(nil), ts.ids...)
}

// echoUnary answers a call with its first message.
func echoUnary(ctx context.Context, st *mux.Stream, _ callInfo) {
	b, err := st.Recv(ctx)
	if err != nil {
		st.Refuse(codeInternal, err.Error())
		return
	}
	defer pool.Put(b)
	st.Finish(ctx, mux.Reply{Msg: b.B, HasMsg: true, Code: codeOK})
}

// echoStream sends every message back and finishes at the client's
// half-close.
func echoStream(ctx context.Context, st *mux.Stream, _ callInfo) {
	for {
		b, err := st.Recv(ctx)
		if err == io.EOF {
			st.Finish(ctx, mux.Reply{Code: codeOK})
			return
		}
		if err != nil {
			return
		}
		err = st.Send(ctx, b.B, false)
		pool.Put(b)
		if err != nil {
			return
		}
	}
}

// result is what a client saw of a call that ended.
type result struct {
	msgs    [][]byte
	code    wire.Code
	message string
	header  []string
	trailer []string
}

// collect receives messages until the end of the stream and decodes the
// reply header and trailers.
func collect(ctx context.Context, st *mux.Stream) (result, error) {
	var r result
	for {
		b, err := st.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return r, err
		}
		r.msgs = append(r.msgs, bytes.Clone(b.B))
		pool.Put(b)
	}
	p, ok := st.Trailer()
	if !ok {
		return r, errors.New("stream ended without trailers")
	}
	tr, err := wire.ParseTrailer(p)
	if err != nil {
		return r, err
	}
	r.code, r.message = wire.Code(tr.Code), string(tr.Message)
	if r.trailer, err = wire.ParseMetadata(tr.Metadata, nil); err != nil {
		return r, err
	}
	if hp, ok := st.Header(); ok {
		if r.header, err = wire.ParseMetadata(hp, nil); err != nil {
			return r, err
		}
	}
	return r, nil
}

// call opens a stream, sends msg, half-closes and collects the reply.
func call(ctx context.Context, s *mux.Session, method string, msg []byte) (result, error) {
	st, err := s.Open(ctx, mux.Call{Method: method, Msg: msg, End: true})
	if err != nil {
		return result{}, err
	}
	defer st.Release()
	return collect(ctx, st)
}

// unaryEcho makes a call and checks that the one reply equals msg.
func unaryEcho(ctx context.Context, s *mux.Session, method string, msg []byte) error {
	r, err := call(ctx, s, method, msg)
	if err != nil {
		return err
	}
	if r.code != codeOK {
		return fmt.Errorf("status %v: %s", r.code, r.message)
	}
	if len(r.msgs) != 1 {
		return fmt.Errorf("got %d replies, want 1", len(r.msgs))
	}
	if !bytes.Equal(r.msgs[0], msg) {
		return fmt.Errorf("reply of %d bytes differs from the %d-byte request", len(r.msgs[0]), len(msg))
	}
	return nil
}

// payload returns n bytes that depend on seed and on each byte's position.
func payload(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	i := 0
	for ; i+8 <= n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	for ; i < n; i++ {
		b[i] = byte(x >> (8 * (i & 7)))
	}
	return b
}

// bigPayload returns n bytes made by repeating a 64 KiB block whose every
// copy is stamped with its index, so misplaced chunks are caught. It is
// cheap to build under the race detector.
func bigPayload(n int) []byte {
	block := payload(42, 64<<10)
	b := make([]byte, n)
	for off, i := 0, uint32(0); off < n; off, i = off+len(block), i+1 {
		m := copy(b[off:], block)
		if m >= 4 {
			binary.BigEndian.PutUint32(b[off:], i)
		}
	}
	return b
}

// countingConn counts the bytes written through it.
type countingConn struct {
	net.Conn
	written atomic.Int64
	onWrite func(total int64) // called after each write, if set
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	total := c.written.Add(int64(n))
	if c.onWrite != nil {
		c.onWrite(total)
	}
	return n, err
}

// rawFrame is a frame read by a rawPeer.
type rawFrame struct {
	wire.Header
	P []byte
}

// rawPeer is a hand-driven end of a warren connection: the test writes frames
// with the wire package, and a goroutine reads what the session sends.
type rawPeer struct {
	t      testing.TB
	conn   net.Conn
	frames chan rawFrame // frames the session sent; closed when the connection ends
	err    error         // why reading ended; valid once frames is closed
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func startRaw(t testing.TB, conn net.Conn) *rawPeer {
	r := &rawPeer{t: t, conn: conn, frames: make(chan rawFrame, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	go r.readLoop()
	t.Cleanup(r.close)
	return r
}

func (r *rawPeer) readLoop() {
	defer close(r.done)
	defer close(r.frames)
	rd := frameio.NewReader(r.conn, 16<<20)
	for {
		h, p, err := rd.Next()
		if err != nil {
			r.err = err
			return
		}
		select {
		case r.frames <- rawFrame{h, bytes.Clone(p)}:
		case <-r.stop:
			return
		}
	}
}

func (r *rawPeer) close() {
	r.once.Do(func() {
		close(r.stop)
		r.conn.Close()
		<-r.done
	})
}

// write writes the concatenation of frames in one call.
func (r *rawPeer) write(frames ...[]byte) error {
	_, err := r.conn.Write(bytes.Join(frames, nil))
	return err
}

// mustWrite is write that fails the test on error.
func (r *rawPeer) mustWrite(frames ...[]byte) {
	r.t.Helper()
	if err := r.write(frames...); err != nil {
		r.t.Fatalf("raw peer write: %v", err)
	}
}

// next returns the next frame the session sent, skipping WINDOW frames; ok is
// false when the connection ended first.
func (r *rawPeer) next() (f rawFrame, ok bool) {
	r.t.Helper()
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	for {
		select {
		case f, ok = <-r.frames:
			if ok && f.Type == wire.TypeWindow {
				continue
			}
			return f, ok
		case <-timeout.C:
			r.t.Fatalf("raw peer: no frame from the session within %v", testTimeout)
		}
	}
}

// expect returns the next frame (WINDOW frames skipped) and fails the test
// unless it has type typ on stream id.
func (r *rawPeer) expect(typ wire.Type, id uint32) rawFrame {
	r.t.Helper()
	f, ok := r.next()
	if !ok {
		r.t.Fatalf("raw peer: connection ended (%v) while waiting for %v on stream %d", r.err, typ, id)
	}
	if f.Type != typ || f.Stream != id {
		r.t.Fatalf("raw peer: got %v, want %v on stream %d", f.Header, typ, id)
	}
	return f
}

// expectTrailer waits for TRAILERS on stream id and returns the status.
func (r *rawPeer) expectTrailer(id uint32) (wire.Code, string) {
	r.t.Helper()
	f := r.expect(wire.TypeTrailers, id)
	tr, err := wire.ParseTrailer(f.P)
	if err != nil {
		r.t.Fatalf("raw peer: bad trailer: %v", err)
	}
	return wire.Code(tr.Code), string(tr.Message)
}

// expectClosed waits until the session closes the connection, ignoring the
// frames it sent before.
func (r *rawPeer) expectClosed() {
	r.t.Helper()
	timeout := time.NewTimer(testTimeout)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-r.frames:
			if !ok {
				return
			}
		case <-timeout.C:
			r.t.Fatalf("raw peer: the session did not close the connection within %v", testTimeout)
		}
	}
}

// ping sends a PING and waits for its acknowledgement: proof that the
// session is up and has handled every frame written before.
func (r *rawPeer) ping(seq uint64) {
	r.t.Helper()
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], seq)
	r.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, 0, p[:]))
	for {
		f := r.expectAny()
		if f.Type == wire.TypePing && f.Flags&wire.FlagAck != 0 && bytes.Equal(f.P, p[:]) {
			return
		}
	}
}

// expectAny returns the next frame of any type but WINDOW.
func (r *rawPeer) expectAny() rawFrame {
	r.t.Helper()
	f, ok := r.next()
	if !ok {
		r.t.Fatalf("raw peer: connection ended: %v", r.err)
	}
	return f
}

// rawClient starts a server session on a connection of kind k and returns the
// client end as a rawPeer that has completed the handshake with settings set.
func rawClient(t testing.TB, k connKind, scfg *mux.Config, set wire.Settings) (*rawPeer, *mux.Session) {
	t.Helper()
	cc, sc := k.pair(t)
	type result struct {
		s   *mux.Session
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := mux.Server(sc, scfg)
		done <- result{s, err}
	}()
	if _, err := cc.Write(wire.AppendPreface(nil, set)); err != nil {
		t.Fatalf("raw client: writing preface: %v", err)
	}
	if _, err := wire.ReadPreface(cc); err != nil {
		t.Fatalf("raw client: reading preface: %v", err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("server handshake: %v", res.err)
	}
	t.Cleanup(func() { res.s.Close() })
	return startRaw(t, cc), res.s
}

// rawServer starts a client session on a connection of kind k and returns
// the server end as a rawPeer that has completed the handshake with set.
func rawServer(t testing.TB, k connKind, ccfg *mux.Config, set wire.Settings) (*rawPeer, *mux.Session) {
	t.Helper()
	cc, sc := k.pair(t)
	errc := make(chan error, 1)
	go func() {
		if _, err := wire.ReadPreface(sc); err != nil {
			errc <- err
			return
		}
		_, err := sc.Write(wire.AppendPreface(nil, set))
		errc <- err
	}()
	c, err := mux.Client(cc, ccfg)
	if rerr := <-errc; rerr != nil || err != nil {
		t.Fatalf("handshake: raw server: %v; client: %v", rerr, err)
	}
	t.Cleanup(func() { c.Close() })
	return startRaw(t, sc), c
}

// Frame builders for raw peers.

func headersFrame(id uint32, flags wire.Flags, method string) []byte {
	return wire.AppendFrame(nil, id, wire.TypeHeaders, flags, wire.AppendCallHeader(nil, method, 0, 0, nil))
}

func dataFrame(id uint32, flags wire.Flags, p []byte) []byte {
	return wire.AppendFrame(nil, id, wire.TypeData, flags, p)
}

// firstChunk is the first DATA frame of a chunked message of total bytes.
func firstChunk(id uint32, total uint32, chunk []byte) []byte {
	p := binary.BigEndian.AppendUint32(nil, total)
	return wire.AppendFrame(nil, id, wire.TypeData, wire.FlagMore, append(p, chunk...))
}

func trailersFrame(id uint32, code wire.Code, msg string) []byte {
	return wire.AppendFrame(nil, id, wire.TypeTrailers, wire.FlagEnd, wire.AppendTrailer(nil, uint32(code), msg, nil, nil))
}

// waitDone waits for the session to end and returns why.
func waitDone(t testing.TB, s *mux.Session) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(testTimeout):
		t.Fatalf("session still up after %v", testTimeout)
		return nil
	}
}

// recvErr receives on st until an error and returns it; messages are
// dropped.
// isGoAway reports whether err is a stream the peer did not take because it
// sent GOAWAY.
func isGoAway(err error) bool {
	var ga *wire.GoAwayError
	return errors.As(err, &ga)
}

func recvErr(ctx context.Context, st *mux.Stream) error {
	for {
		b, err := st.Recv(ctx)
		if err != nil {
			return err
		}
		pool.Put(b)
	}
}

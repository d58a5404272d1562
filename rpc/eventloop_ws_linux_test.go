//go:build linux

package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// WebSocket connections served by the event loop: through a ws:// listener
// and through the HTTP bridge of tcp and unix listeners.

// wsEnv is a server on an event loop that WebSocket clients reach.
type wsEnv struct {
	srv     *Server
	kind    string // "ws", "tcp" (the bridge) or "unix" (the bridge)
	addr    string // what rpc.Dial dials (unix: the socket path, with a Dialer)
	network string // what a raw client dials
	address string
	path    string
}

var wsKinds = []string{"ws", "tcp", "unix"}

// startWS serves srv (EventLoop set) on a listener of the kind, checks that
// an event loop serves it, and closes the server when the test ends.
func startWS(t testing.TB, srv *Server, kind string) *wsEnv {
	t.Helper()
	if !srv.opts.EventLoop {
		t.Fatal("startWS needs ServerOptions.EventLoop")
	}
	e := &wsEnv{srv: srv, kind: kind}
	var l *transport.Listener
	var err error
	switch kind {
	case "ws":
		l, err = transport.Listen("ws://127.0.0.1:0/warren", nil)
		e.path = "/warren"
	case "tcp":
		l, err = transport.Listen("tcp://127.0.0.1:0", nil)
		e.path = "/bridge"
	case "unix":
		path := filepath.Join(t.TempDir(), "w.sock")
		l, err = transport.Listen("unix://"+path, nil)
		e.path = "/bridge"
	}
	if err != nil {
		t.Fatal(err)
	}
	if kind == "unix" {
		e.network, e.address = "unix", l.Endpoint().Address
	} else {
		e.network, e.address = "tcp", l.Endpoint().Address
	}
	e.addr = "ws://" + e.address + e.path
	before := srv.ev.Loops.Load()
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
	waitLoop(t, "an event loop", func() bool { return srv.ev.Loops.Load() > before })
	return e
}

// client returns a client of the server over WebSocket, closed when the
// test ends.
func (e *wsEnv) client(t testing.TB, opts *ClientOptions) *Client {
	t.Helper()
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	addr := e.addr
	if e.kind == "unix" {
		// The bridge of a unix listener: a WebSocket client over the socket.
		o.Dialer = func(ctx context.Context, _ string) (net.Conn, error) {
			return dialRawWS(ctx, e, nil)
		}
		addr = "unix://" + e.address
	}
	c, err := Dial(addr, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawWS is a hand-written WebSocket client connection: it masks what it
// sends and can split it in any way (fragments, pings between them,
// writes of any size), and it reads the server's frames, checking that
// they follow RFC 6455 for a server (unmasked, binary).
type rawWS struct {
	conn net.Conn
	br   *bufio.Reader

	mu        sync.Mutex // protects the write side
	rng       *rand.Rand
	fragment  int  // data messages are split into fragments of at most this size (0: one frame)
	chunk     int  // frames are written in pieces of at most this size (0: whole)
	pings     bool // a ping goes between fragments
	pingsSent int

	rmu      sync.Mutex // protects the read side
	rest     []byte     // payload bytes of a data frame not read yet
	closeErr error      // the server's close frame, as an error

	pmu   sync.Mutex // protects pongs
	pongs []string
}

// dialRawWS runs the opening handshake with the server of e.
func dialRawWS(ctx context.Context, e *wsEnv, hdr http.Header) (*rawWS, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, e.network, e.address)
	if err != nil {
		return nil, err
	}
	host := e.address
	if e.network == "unix" {
		host = "localhost"
	}
	req := "GET " + e.path + " HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	for k, v := range hdr {
		req += k + ": " + v[0] + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, fmt.Errorf("opening handshake: %s", resp.Status)
	}
	return &rawWS{conn: conn, br: br, rng: rand.New(rand.NewPCG(1, 2))}, nil
}

// frame returns a client frame: masked, with opcode op and the payload.
func (c *rawWS) frame(fin bool, op ws.OpCode, payload []byte) []byte {
	h := ws.Header{Fin: fin, OpCode: op, Masked: true, Length: int64(len(payload))}
	binary.LittleEndian.PutUint32(h.Mask[:], c.rng.Uint32())
	var b bytes.Buffer
	ws.WriteHeader(&b, h)
	p := bytes.Clone(payload)
	ws.Cipher(p, h.Mask, 0)
	b.Write(p)
	return b.Bytes()
}

// Write sends p as one binary message, split as configured.
func (c *rawWS) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []byte
	if c.fragment <= 0 || len(p) == 0 {
		out = c.frame(true, ws.OpBinary, p)
	} else {
		op := ws.OpBinary
		for i := 0; i < len(p); {
			n := min(len(p)-i, 1+c.rng.IntN(c.fragment))
			out = append(out, c.frame(i+n == len(p), op, p[i:i+n])...)
			op = ws.OpContinuation
			i += n
			if c.pings && i < len(p) {
				c.pingsSent++
				out = append(out, c.frame(true, ws.OpPing, []byte("p"+strconv.Itoa(c.pingsSent)))...)
			}
		}
	}
	if err := c.writeRaw(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeRaw writes b in pieces of at most c.chunk bytes.
func (c *rawWS) writeRaw(b []byte) error {
	for len(b) > 0 {
		n := len(b)
		if c.chunk > 0 {
			n = min(n, 1+c.rng.IntN(c.chunk))
		}
		if _, err := c.conn.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readFrame reads one frame from the server.
func (c *rawWS) readFrame() (ws.Header, []byte, error) {
	h, err := ws.ReadHeader(c.br)
	if err != nil {
		return h, nil, err
	}
	if h.Masked || h.Rsv != 0 {
		return h, nil, fmt.Errorf("bad frame from the server: %+v", h)
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(c.br, p); err != nil {
		return h, nil, err
	}
	return h, p, nil
}

// Read returns the payload of the server's binary messages as a stream.
func (c *rawWS) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.rest) == 0 {
		if c.closeErr != nil {
			return 0, c.closeErr
		}
		h, payload, err := c.readFrame()
		if err != nil {
			return 0, err
		}
		switch h.OpCode {
		case ws.OpBinary, ws.OpContinuation:
			c.rest = payload
		case ws.OpPong:
			c.pmu.Lock()
			c.pongs = append(c.pongs, string(payload))
			c.pmu.Unlock()
		case ws.OpClose:
			code := 1005
			if len(payload) >= 2 {
				code = int(binary.BigEndian.Uint16(payload))
			}
			c.closeErr = &transport.WebSocketError{Code: code, Remote: true}
			if code == 1000 {
				c.closeErr = io.EOF
			}
		default:
			return 0, fmt.Errorf("unexpected frame from the server: %+v", h)
		}
	}
	n := copy(p, c.rest)
	c.rest = c.rest[n:]
	return n, nil
}

func (c *rawWS) pongsSeen() []string {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return c.pongs
}

func (c *rawWS) Close() error {
	c.mu.Lock()
	c.writeRaw(c.frame(true, ws.OpClose, []byte{0x03, 0xe8}))
	c.mu.Unlock()
	return c.conn.Close()
}

func (c *rawWS) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *rawWS) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *rawWS) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *rawWS) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *rawWS) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// TestEventLoopWebSocket makes calls over WebSocket connections to an
// event-loop server, which serves them itself once they have gone through
// the opening handshake: they hibernate like the others.
func TestEventLoopWebSocket(t *testing.T) {
	for _, kind := range wsKinds {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(nil)
			e := startWS(t, srv, kind)
			c := e.client(t, nil)
			for i := range 20 {
				checkServing(t, c, "call "+strconv.Itoa(i))
			}
			big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: many frames each way
			var out []byte
			if err := c.Invoke(context.Background(), "Bad.Echo", big, &out); err != nil || !bytes.Equal(out, big) {
				t.Fatalf("large call: %d bytes, %v", len(out), err)
			}
			waitConns(t, srv, 1)
			waitLoop(t, "the session to hibernate", func() bool { return srv.ev.Hibernations.Load() >= 1 })
			checkServing(t, c, "after hibernation")
			if w := srv.ev.Wakes.Load(); w < 2 {
				t.Errorf("%d wakes, want at least 2: the loop does not serve the connection", w)
			}
		})
	}
}

// TestEventLoopWSSplitFrames has a hand-written client send its messages
// in fragments of every size, with pings between them, written to the
// socket in pieces down to single bytes, so that the loop sees frames and
// headers split at every boundary.
func TestEventLoopWSSplitFrames(t *testing.T) {
	cases := []struct {
		name            string
		fragment, chunk int
		pings           bool
		sizes           []int
	}{
		{"bytes", 0, 1, false, []int{0, 1, 5, 200}},
		{"fragments", 7, 0, false, []int{0, 1, 100, 3000, 70000}},
		{"fragments-pings-bytes", 5, 3, true, []int{1, 30, 300}},
		{"large-fragments-pings", 50000, 999, true, []int{200000}},
	}
	for _, kind := range wsKinds {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				srv := loopServer(nil)
				e := startWS(t, srv, kind)
				var rc *rawWS
				c, err := Dial("unix://unused", &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
					c, err := dialRawWS(ctx, e, nil)
					if err == nil {
						c.fragment, c.chunk, c.pings = tc.fragment, tc.chunk, tc.pings
						rc = c
					}
					return c, err
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				for i, size := range tc.sizes {
					msg := bytes.Repeat([]byte{byte('a' + i)}, size)
					var out []byte
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err := c.Invoke(ctx, "Bad.Echo", msg, &out)
					cancel()
					if err != nil || !bytes.Equal(out, msg) {
						t.Fatalf("call of %d bytes: %d bytes back, %v", size, len(out), err)
					}
				}
				if tc.pings {
					rc.mu.Lock()
					sent := rc.pingsSent
					rc.mu.Unlock()
					waitLoop(t, "the pongs", func() bool {
						checkServing(t, c, "more")
						return len(rc.pongsSeen()) >= sent
					})
					for i, p := range rc.pongsSeen() {
						if want := "p" + strconv.Itoa(i+1); p != want {
							t.Errorf("pong %d is %q, want %q", i, p, want)
						}
					}
				}
			})
		}
	}
}

// TestEventLoopWSBadFrames sends frames that break RFC 6455: the loop
// answers with a close frame with the code the goroutine mode sends, and
// closes the connection once the client has closed its side.
func TestEventLoopWSBadFrames(t *testing.T) {
	mk := func(b0, b1 byte, rest ...byte) []byte { return append([]byte{b0, b1}, rest...) }
	mask := []byte{1, 2, 3, 4}
	masked := func(op byte, fin bool, payload []byte) []byte {
		b0 := op
		if fin {
			b0 |= 0x80
		}
		f := mk(b0, 0x80|byte(len(payload)), mask...)
		p := bytes.Clone(payload)
		ws.Cipher(p, [4]byte{1, 2, 3, 4}, 0)
		return append(f, p...)
	}
	cases := []struct {
		name  string
		frame []byte
		code  int
	}{
		{"rsv1", mk(0x80|0x40|0x2, 0x80, mask...), 1002},
		{"reserved-opcode", mk(0x80|0x3, 0x80, mask...), 1002},
		{"reserved-control-opcode", mk(0x80|0xb, 0x80, mask...), 1002},
		{"text", masked(0x1, true, []byte("hi")), 1003},
		{"unmasked", mk(0x82, 2, 'h', 'i'), 1002},
		{"long-ping", append(mk(0x89, 0x80|126, 0, 126), mask...), 1002},
		{"fragmented-ping", masked(0x9, false, nil), 1002},
		{"continuation-first", masked(0x0, true, []byte("x")), 1002},
		{"new-message-in-fragments", append(masked(0x2, false, []byte("x")), masked(0x2, true, []byte("y"))...), 1002},
		{"long-length-msb", append(mk(0x82, 0x80|127, 0x80, 0, 0, 0, 0, 0, 0, 0), mask...), 1002},
		{"non-minimal-length", append(mk(0x82, 0x80|126, 0, 5), mask...), 1002},
		{"close-1-byte", masked(0x8, true, []byte{3}), 1002},
		{"close-bad-code", masked(0x8, true, []byte{0x03, 0xed}), 1002},
		{"close-bad-utf8", masked(0x8, true, []byte{0x03, 0xe8, 0xff, 0xfe}), 1007},
		{"close-normal", masked(0x8, true, []byte{0x03, 0xe8, 'b', 'y', 'e'}), 1000},
		{"close-app-code", masked(0x8, true, []byte{0x0f, 0xa0}), 4000},
	}
	for _, kind := range wsKinds {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(nil)
			e := startWS(t, srv, kind)
			for _, tc := range cases {
				c, err := dialRawWS(context.Background(), e, nil)
				if err != nil {
					t.Fatal(err)
				}
				// A ping first, split: it is answered.
				p := masked(0x9, true, []byte("hello"))
				c.conn.Write(p[:3])
				time.Sleep(2 * time.Millisecond)
				c.conn.Write(append(p[3:], tc.frame...))
				c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				h, payload, err := c.readFrame()
				if err != nil || h.OpCode != ws.OpPong || string(payload) != "hello" {
					t.Fatalf("%s: %+v %q %v, want the pong", tc.name, h, payload, err)
				}
				h, payload, err = c.readFrame()
				if err != nil || h.OpCode != ws.OpClose || len(payload) != 2 || int(binary.BigEndian.Uint16(payload)) != tc.code {
					t.Fatalf("%s: %+v %q %v, want a close frame with code %d", tc.name, h, payload, err, tc.code)
				}
				c.conn.(interface{ CloseWrite() error }).CloseWrite()
				if _, err := c.br.ReadByte(); err != io.EOF {
					t.Errorf("%s: read %v after the close frame, want EOF", tc.name, err)
				}
				c.conn.Close()
			}
			waitConns(t, srv, 0)
		})
	}
}

// TestEventLoopWSIdle opens many WebSocket connections: once idle they hold
// no goroutine (their sessions hibernate), count against the limits like
// the others, and all wake up for a call at once.
func TestEventLoopWSIdle(t *testing.T) {
	const n = 300
	for _, kind := range []string{"ws", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(&ServerOptions{MaxConnsPerUID: -1})
			e := startWS(t, srv, kind)
			clients := make([]*Client, n)
			for i := range clients {
				clients[i] = e.client(t, nil)
				checkServing(t, clients[i], "connect "+strconv.Itoa(i))
			}
			waitConns(t, srv, n)
			waitLoop(t, "the sessions to hibernate", func() bool { return srv.ev.Hibernations.Load() >= n })
			waitLoop(t, "the handshake goroutines to end", func() bool { return serverGoroutines() <= 2+n/100 })
			srv.mu.Lock()
			awake := len(srv.conns)
			light := srv.adm.Conns() - awake
			srv.mu.Unlock()
			if light != n || awake != 0 {
				t.Errorf("%d hibernating, %d awake; want %d, 0", light, awake, n)
			}
			var wg sync.WaitGroup
			for i, c := range clients {
				wg.Go(func() { checkServing(t, c, "wake "+strconv.Itoa(i)) })
			}
			wg.Wait()
		})
	}
}

// TestEventLoopWSLimits checks that MaxConns counts WebSocket connections
// and that ReadTimeout and IdleTimeout apply to them.
func TestEventLoopWSLimits(t *testing.T) {
	t.Run("MaxConns", func(t *testing.T) {
		srv := loopServer(&ServerOptions{MaxConns: 2})
		e := startWS(t, srv, "ws")
		a, b := e.client(t, nil), e.client(t, nil)
		checkServing(t, a, "a")
		checkServing(t, b, "b")
		waitLoop(t, "hibernation", func() bool { return srv.ev.Hibernations.Load() >= 2 })
		c := e.client(t, nil)
		var out []byte
		if err := c.Invoke(context.Background(), "Bad.Echo", []byte("c"), &out); status.CodeOf(err) != status.ResourceExhausted {
			t.Fatalf("third connection: %v, want ResourceExhausted", err)
		}
	})
	t.Run("ReadTimeout", func(t *testing.T) {
		srv := loopServer(&ServerOptions{ReadTimeout: 300 * time.Millisecond})
		e := startWS(t, srv, "tcp")
		c, err := dialRawWS(context.Background(), e, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.conn.Close()
		// Half a frame header, then nothing.
		c.conn.Write(c.frame(true, ws.OpBinary, make([]byte, 300))[:3])
		start := time.Now()
		c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, c.br)
		if el := time.Since(start); err != nil || el < 300*time.Millisecond-eventloop.Tick || el > 3*time.Second {
			t.Errorf("closed after %v (%v), want about the read timeout", el, err)
		}
	})
	t.Run("IdleTimeout", func(t *testing.T) {
		srv := loopServer(&ServerOptions{IdleTimeout: 400 * time.Millisecond})
		e := startWS(t, srv, "ws")
		c, err := dialRawWS(context.Background(), e, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.conn.Close()
		cl, err := Dial("unix://unused", &ClientOptions{Dialer: func(context.Context, string) (net.Conn, error) { return c, nil }})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		checkServing(t, cl, "before")
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		waitLoop(t, "the idle timeout", func() bool { return srv.Stats().Conns == 0 })
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Errorf("closed after %v, before the idle timeout", el)
		}
	})
}

// TestEventLoopWSClose runs the close handshake both ways.
func TestEventLoopWSClose(t *testing.T) {
	for _, kind := range wsKinds {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(nil)
			e := startWS(t, srv, kind)
			// The client closes: the server answers its close frame.
			c, err := dialRawWS(context.Background(), e, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.conn.Write(c.frame(true, ws.OpClose, []byte{0x03, 0xe9, 'o', 'k'}))
			c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			h, p, err := c.readFrame()
			if err != nil || h.OpCode != ws.OpClose || !bytes.Equal(p, []byte{0x03, 0xe9}) {
				t.Fatalf("got %+v %q %v, want the close frame echoed", h, p, err)
			}
			if _, err := c.br.ReadByte(); err != io.EOF {
				t.Errorf("read %v after the close frame, want EOF", err)
			}
			c.conn.Close()

			// The server closes (it shuts down) a hibernating connection:
			// the client gets a GOAWAY, then (after a PING it leaves
			// unanswered, see Shutdown) a close frame.
			c, err = dialRawWS(context.Background(), e, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.conn.Close()
			c.conn.Write(c.frame(true, ws.OpBinary, wire.AppendPreface(nil, wire.Settings{})))
			c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if h, _, err := c.readFrame(); err != nil || h.OpCode != ws.OpBinary {
				t.Fatalf("got %+v %v, want the server's preface", h, err)
			}
			time.Sleep(eventloop.HibernateAfter + 3*eventloop.Tick) // the connection goes idle: no session was made
			srv.Shutdown(context.Background())
			h, p, err = c.readFrame()
			if err != nil || h.OpCode != ws.OpBinary || len(p) < wire.HeaderSize || wire.Type(p[8]) != wire.TypeGoAway {
				t.Fatalf("got %+v %q %v, want a GOAWAY", h, p, err)
			}
			for {
				h, p, err = c.readFrame()
				if err != nil || h.OpCode != ws.OpBinary || len(p) < wire.HeaderSize || wire.Type(p[8]) != wire.TypePing {
					break
				}
			}
			if err != nil || h.OpCode != ws.OpClose || !bytes.Equal(p, []byte{0x03, 0xe8}) {
				t.Fatalf("got %+v %q %v, want a close frame", h, p, err)
			}
		})
	}
}

// TestEventLoopWSNoFDLeak opens and closes WebSocket connections of every
// kind, some of them broken: no descriptor stays open.
func TestEventLoopWSNoFDLeak(t *testing.T) {
	before := openFDs(t)
	for _, kind := range wsKinds {
		func() {
			srv := loopServer(&ServerOptions{MaxConns: 4, ReadTimeout: 200 * time.Millisecond})
			e := startWS(t, srv, kind)
			var clients []*Client
			for i := range 6 {
				c := e.client(t, nil)
				clients = append(clients, c)
				if i < 4 {
					checkServing(t, c, "call")
				}
			}
			for range 3 {
				c, err := dialRawWS(context.Background(), e, nil)
				if err != nil {
					continue // the bridge refuses it: MaxConns
				}
				c.conn.Write([]byte{0x82, 0x80, 1}) // half a header
				defer c.conn.Close()
			}
			if c, err := dialRawWS(context.Background(), e, nil); err == nil {
				c.conn.Write([]byte{0x81, 0x80, 0, 0, 0, 0}) // text: closed with 1003
				defer c.conn.Close()
			}
			// A handshake that is refused.
			if c, err := net.Dial(e.network, e.address); err == nil {
				io.WriteString(c, "GET "+e.path+" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
				defer c.Close()
			}
			time.Sleep(300 * time.Millisecond)
			for _, c := range clients {
				c.Close()
			}
			srv.Close()
		}()
	}
	waitLoop(t, "descriptors to be closed", func() bool { return openFDs(t) <= before })
}

// TestEventLoopWSMemory measures the memory an idle WebSocket connection
// costs an event-loop server: a child process serves a ws:// listener,
// this one opens the connections (raw ones: an opening handshake, the
// warren handshake, then nothing) and the child reports its RSS before and
// after. Run it with WARREN_WS_RSS=5000 (the number of connections).
func TestEventLoopWSMemory(t *testing.T) {
	if os.Getenv("WARREN_WS_RSS_CHILD") != "" {
		wsMemoryChild()
		return
	}
	n, _ := strconv.Atoi(os.Getenv("WARREN_WS_RSS"))
	if n <= 0 {
		t.Skip("set WARREN_WS_RSS to the number of connections")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEventLoopWSMemory$")
	cmd.Env = append(os.Environ(), "WARREN_WS_RSS_CHILD=1")
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	sc := bufio.NewScanner(outp)
	line := func() string {
		if !sc.Scan() {
			t.Fatal("the child ended")
		}
		return sc.Text()
	}
	addr := line()
	before, _ := strconv.Atoi(line())
	a, err := transport.ParseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	e := &wsEnv{network: "tcp", address: a.Address, path: "/warren"}
	var conns []*rawWS
	defer func() {
		for _, c := range conns {
			c.conn.Close()
		}
	}()
	preface := wire.AppendPreface(nil, wire.Settings{})
	plain := os.Getenv("WARREN_WS_RSS_PLAIN") != "" // tcp, to compare
	for i := range n {
		if plain {
			c, err := net.Dial("tcp", e.address)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			defer c.Close()
			c.Write(preface)
			io.ReadFull(c, make([]byte, len(wire.AppendPreface(nil, wire.Settings{}.WithDefaults()))))
			continue
		}
		c, err := dialRawWS(context.Background(), e, nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		c.conn.Write(c.frame(true, ws.OpBinary, preface))
		if _, _, err := c.readFrame(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	fmt.Fprintln(in, "measure")
	after, _ := strconv.Atoi(line())
	stats := line()
	kind := "WebSocket"
	if plain {
		kind = "tcp"
	}
	t.Logf("%d idle %s connections: server RSS %d KiB -> %d KiB, %d bytes per connection; %s",
		n, kind, before, after, (after-before)*1024/n, stats)
}

// wsMemoryChild is the server of TestEventLoopWSMemory.
func wsMemoryChild() {
	srv := NewServer(&ServerOptions{EventLoop: true, MaxConns: 1 << 20, MaxConnsPerUID: -1})
	addr := "ws://127.0.0.1:0/warren"
	if os.Getenv("WARREN_WS_RSS_PLAIN") != "" {
		addr = "tcp://127.0.0.1:0"
	}
	l, err := transport.Listen(addr, nil)
	if err != nil {
		panic(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	rss := func() int {
		runtime.GC()
		debug.FreeOSMemory()
		b, _ := os.ReadFile("/proc/self/status")
		for _, ln := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(ln, "VmRSS:"); ok {
				k, _ := strconv.Atoi(strings.Fields(v)[0])
				return k
			}
		}
		return 0
	}
	time.Sleep(100 * time.Millisecond)
	fmt.Println(l.Endpoint().String())
	fmt.Println(rss())
	sc := bufio.NewScanner(os.Stdin)
	sc.Scan()
	time.Sleep(eventloop.HibernateAfter + 4*eventloop.Tick) // every session hibernates
	fmt.Println(rss())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%d goroutines, heap in use %d KiB (%d objects), stacks %d KiB\n", runtime.NumGoroutine(), ms.HeapInuse>>10, ms.HeapObjects, ms.StackInuse>>10)
	sc.Scan()
}

// TestEventLoopWSPipelined has the client send its first frames with the
// opening handshake, before the 101 answer: the bytes read with the
// handshake reach the loop.
func TestEventLoopWSPipelined(t *testing.T) {
	for _, kind := range wsKinds {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(&ServerOptions{HandshakeTimeout: time.Second})
			e := startWS(t, srv, kind)
			conn, err := net.Dial(e.network, e.address)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := &rawWS{conn: conn, br: bufio.NewReader(conn), rng: rand.New(rand.NewPCG(3, 4))}
			req := "GET " + e.path + " HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
			out := append([]byte(req), c.frame(true, ws.OpPing, []byte("early"))...)
			out = append(out, c.frame(true, ws.OpBinary, wire.AppendPreface(nil, wire.Settings{}))...)
			conn.Write(out)
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(c.br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("%v %v", resp, err)
			}
			h, p, err := c.readFrame()
			if err != nil || h.OpCode != ws.OpPong || string(p) != "early" {
				t.Fatalf("got %+v %q %v, want the pong", h, p, err)
			}
			h, p, err = c.readFrame()
			if _, _, _, perr := wire.ParsePreface(p); err != nil || h.OpCode != ws.OpBinary || perr != nil {
				t.Fatalf("got %+v %q %v, want the server's preface", h, p, err)
			}
		})
	}
}

// TestEventLoopWSHandshakeTimeout: a client that stops after the opening
// handshake, or in the middle of it, is closed once HandshakeTimeout has
// passed.
func TestEventLoopWSHandshakeTimeout(t *testing.T) {
	for _, kind := range []string{"ws", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(&ServerOptions{HandshakeTimeout: 300 * time.Millisecond})
			e := startWS(t, srv, kind)
			c, err := dialRawWS(context.Background(), e, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.conn.Close()
			c.conn.Write(c.frame(true, ws.OpBinary, []byte("WAR"))) // the start of a preface
			half, err := net.Dial(e.network, e.address)
			if err != nil {
				t.Fatal(err)
			}
			defer half.Close()
			io.WriteString(half, "GET "+e.path+" HTTP/1.1\r\nHost: x\r\n") // the start of a request
			for _, conn := range []net.Conn{c.conn, half} {
				start := time.Now()
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				io.Copy(io.Discard, conn)
				if el := time.Since(start); el > 3*time.Second {
					t.Errorf("closed after %v", el)
				}
			}
			waitConns(t, srv, 0)
		})
	}
}

// ping sends a ping with payload, between whole frames.
func (c *rawWS) ping(payload string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pingsSent++
	return c.writeRaw(c.frame(true, ws.OpPing, []byte(payload)))
}

// slowConn delays every read, so that the server's writes find the socket
// full.
type slowConn struct {
	*rawWS
	delay time.Duration
}

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(c.delay)
	return c.rawWS.Read(p[:min(len(p), 16<<10)])
}

// TestEventLoopWSSlowReader sends large replies to a client that reads
// slowly, while it sends pings: the server's frames are cut by EAGAIN and
// finished on EPOLLOUT, and the pongs wait for the end of a frame.
func TestEventLoopWSSlowReader(t *testing.T) {
	for _, kind := range []string{"ws", "unix"} {
		t.Run(kind, func(t *testing.T) {
			srv := loopServer(nil)
			e := startWS(t, srv, kind)
			var rc *rawWS
			c, err := Dial("unix://unused", &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
				c, err := dialRawWS(ctx, e, nil)
				if err != nil {
					return nil, err
				}
				rc = c
				return slowConn{c, time.Millisecond}, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			checkServing(t, c, "first")
			stop := make(chan struct{})
			pinged := make(chan struct{})
			go func() {
				defer close(pinged)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(3 * time.Millisecond):
					}
					if rc.ping("q"+strconv.Itoa(i)) != nil {
						return
					}
				}
			}()
			big := make([]byte, 4<<20)
			for i := range big {
				big[i] = byte(i * 7)
			}
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					var out []byte
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					if err := c.Invoke(ctx, "Bad.Echo", big, &out); err != nil || !bytes.Equal(out, big) {
						t.Errorf("echo of %d bytes: %d bytes back, %v", len(big), len(out), err)
					}
				})
			}
			wg.Wait()
			close(stop)
			<-pinged
			rc.mu.Lock()
			sent := rc.pingsSent
			rc.mu.Unlock()
			waitLoop(t, "the pongs", func() bool {
				checkServing(t, c, "more")
				return len(rc.pongsSeen()) >= sent
			})
			for i, p := range rc.pongsSeen() {
				if want := "q" + strconv.Itoa(i); p != want {
					t.Fatalf("pong %d is %q, want %q", i, p, want)
				}
			}
			t.Logf("%d pongs; %d frames cut by a full socket so far", sent, eventloop.WSCutFrames.Load())
			if kind == "unix" && eventloop.WSCutFrames.Load() == 0 { // tcp's buffers grow large on loopback

				t.Error("no frame was cut by a full socket")
			}
		})
	}
}

// TestEventLoopWSUpgradeRefused: the loop answers a bad opening handshake
// as the listener does (the wrong path, a request too large, not an
// upgrade), without serving the connection, and counts it rejected.
func TestEventLoopWSUpgradeRefused(t *testing.T) {
	srv := loopServer(&ServerOptions{HandshakeTimeout: 5 * time.Second})
	e := startWS(t, srv, "ws")
	for i, tt := range []struct{ req, want string }{
		{"GET /nowhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", "HTTP/1.1 404 "},
		{"GET " + e.path + " HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 17<<10) + "\r\n\r\n", "HTTP/1.1 431 "},
		{"GET " + e.path + " HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 4"},
		{"NOT HTTP\r\n\r\n", "HTTP/1.1 400 "},
	} {
		conn, err := net.Dial(e.network, e.address)
		if err != nil {
			t.Fatal(err)
		}
		go io.WriteString(conn, tt.req)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasPrefix(string(got), tt.want) {
			t.Errorf("request %d: answered %q, want %q", i, got, tt.want)
		}
		waitLoop(t, fmt.Sprintf("request %d to be counted rejected", i), func() bool { return srv.Stats().ConnsRejected == uint64(i+1) })
	}
	waitConns(t, srv, 0)
}

package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// The example key and accept value of RFC 6455, section 1.3 (base64 of
// the SHA-1 of the key followed by 258EAFA5-E914-47DA-95CA-C5AB0DC85B11).
const (
	rfcKey    = "dGhlIHNhbXBsZSBub25jZQ=="
	rfcAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
)

// wsCase is a WebSocket transport: ws or wss.
type wsCase struct {
	name   string
	addr   string
	listen func(t *testing.T) *transport.ListenConfig
	dial   func(t *testing.T) *transport.DialConfig
}

func wsCases() []wsCase {
	return []wsCase{
		{
			name:   "ws",
			addr:   "ws://127.0.0.1:0/warren",
			listen: func(*testing.T) *transport.ListenConfig { return nil },
			dial:   func(*testing.T) *transport.DialConfig { return nil },
		},
		{
			name: "wss",
			addr: "wss://127.0.0.1:0/warren",
			listen: func(t *testing.T) *transport.ListenConfig {
				return &transport.ListenConfig{TLS: getPKI(t).serverConfig()}
			},
			dial: func(t *testing.T) *transport.DialConfig {
				p := getPKI(t)
				return &transport.DialConfig{TLS: p.clientConfig(p.client)}
			},
		},
	}
}

// acceptOne accepts one connection on l, in the background, and runs its
// handshake. Cleanup closes it.
func acceptOne(t *testing.T, l *transport.Listener) <-chan *transport.Conn {
	t.Helper()
	ch := make(chan *transport.Conn, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			errc <- err
			close(ch)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Handshake(ctx); err != nil {
			errc <- err
			close(ch)
			c.Close()
			return
		}
		ch <- c
	}()
	out := make(chan *transport.Conn, 1)
	go func() {
		c, ok := <-ch
		if ok {
			out <- c
		}
		close(out)
	}()
	t.Cleanup(func() {
		select {
		case err := <-errc:
			t.Logf("server handshake: %v", err)
		default:
		}
	})
	return out
}

// serverConn waits for the connection acceptOne accepts. Cleanup closes it
// and, at the same time, the client's end, so that neither waits for the
// other's close frame.
func serverConn(t *testing.T, ch <-chan *transport.Conn, client io.Closer) *transport.Conn {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("the server handshake failed")
		}
		t.Cleanup(func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				client.Close()
			}()
			c.Close()
			<-done
		})
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// pattern returns n bytes that differ from one message to the next.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestWebSocketRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 2, 3, 4, 5, 15, 16, 17, 125, 126, 127, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, 4 << 20}
	for _, tc := range wsCases() {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, tc.addr, tc.listen(t))
			accepted := acceptOne(t, l)
			c := dial(t, l.Endpoint().String(), tc.dial(t))
			s := serverConn(t, accepted, c)
			c.SetDeadline(time.Now().Add(30 * time.Second))
			s.SetDeadline(time.Now().Add(30 * time.Second))

			for _, dir := range []struct {
				name     string
				from, to net.Conn
			}{{"client to server", c, s}, {"server to client", s, c}} {
				for i, n := range sizes {
					msg := pattern(i, n)
					errc := make(chan error, 1)
					go func() {
						_, err := dir.from.Write(msg)
						errc <- err
					}()
					got := make([]byte, n)
					if _, err := io.ReadFull(dir.to, got); err != nil {
						t.Fatalf("%s, %d bytes: read: %v", dir.name, n, err)
					}
					if err := <-errc; err != nil {
						t.Fatalf("%s, %d bytes: write: %v", dir.name, n, err)
					}
					if !bytes.Equal(got, msg) {
						t.Fatalf("%s, %d bytes: the message changed on the way", dir.name, n)
					}
				}
			}

			// WriteBuffers sends several buffers as one message.
			v := net.Buffers{[]byte("head|"), pattern(1, 100000), []byte("|tail")}
			want := bytes.Join(v, nil)
			errc := make(chan error, 1)
			go func() {
				_, err := rawio.View(c).(rawio.Ext).WriteBuffers(&v)
				errc <- err
			}()
			got := make([]byte, len(want))
			if _, err := io.ReadFull(s, got); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("WriteBuffers: the message changed on the way")
			}
			if len(v) != 0 {
				t.Errorf("WriteBuffers left %d buffers", len(v))
			}
		})
	}
}

// TestWebSocketConcurrentWriters checks that each Write is one message,
// never interleaved with another's.
func TestWebSocketConcurrentWriters(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", nil)
	accepted := acceptOne(t, l)
	c := dial(t, l.Endpoint().String(), nil)
	s := serverConn(t, accepted, c)
	s.SetDeadline(time.Now().Add(30 * time.Second))

	const writers, msgs = 4, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range msgs {
				n := 1 + (w*msgs+i)*97%20000
				msg := make([]byte, 8+n)
				binary.BigEndian.PutUint32(msg, uint32(n))
				binary.BigEndian.PutUint32(msg[4:], uint32(w))
				copy(msg[8:], bytes.Repeat([]byte{byte(w)}, n))
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	br := bufio.NewReader(s)
	for range writers * msgs {
		var hdr [8]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatal(err)
		}
		n, w := binary.BigEndian.Uint32(hdr[:]), binary.BigEndian.Uint32(hdr[4:])
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, bytes.Repeat([]byte{byte(w)}, int(n))) {
			t.Fatal("messages of two writers were interleaved")
		}
	}
	wg.Wait()
}

// rawClient is a WebSocket client written by hand, for sending what a
// well-behaved client would not.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialRaw connects to a ws Listener without a handshake.
func dialRaw(t *testing.T, network, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

// request sends an opening handshake for path, with RFC 6455's example
// key, and the header lines given ("Name: value"), followed by extra, and
// returns the response.
func (r *rawClient) request(path string, lines []string, extra []byte) *http.Response {
	r.t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\n", path)
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(extra)
	if _, err := r.c.Write(b.Bytes()); err != nil {
		r.t.Fatal(err)
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.t.Fatalf("read the handshake response: %v", err)
	}
	return resp
}

// browserLines are the header lines of a browser's opening handshake.
var browserLines = []string{
	"Host: localhost",
	"Connection: keep-alive, Upgrade",
	"Pragma: no-cache",
	"Cache-Control: no-cache",
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
	"Upgrade: websocket",
	"Origin: http://localhost",
	"Sec-WebSocket-Version: 13",
	"Accept-Encoding: gzip, deflate, br",
	"Accept-Language: en-US,en;q=0.9",
	"Sec-WebSocket-Key: " + rfcKey,
	"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits",
}

// upgrade performs a browser's handshake and checks the answer.
func (r *rawClient) upgrade(path string, extra []byte) {
	r.t.Helper()
	resp := r.request(path, browserLines, extra)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		r.t.Fatalf("handshake answered %s", resp.Status)
	}
	checkUpgradeResponse(r.t, resp)
}

func checkUpgradeResponse(t *testing.T, resp *http.Response) {
	t.Helper()
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != rfcAccept {
		t.Errorf("Sec-WebSocket-Accept = %q, want %q", got, rfcAccept)
	}
	if got := resp.Header.Get("Upgrade"); !strings.EqualFold(got, "websocket") {
		t.Errorf("Upgrade = %q", got)
	}
	if got := resp.Header.Get("Connection"); !strings.EqualFold(got, "upgrade") {
		t.Errorf("Connection = %q", got)
	}
	if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != "" {
		t.Errorf("an extension was negotiated: %q", got)
	}
}

// frame encodes a frame; a client's frames are masked unless unmasked.
func frame(fin bool, rsv byte, op ws.OpCode, payload []byte, masked bool) []byte {
	h := ws.Header{Fin: fin, Rsv: rsv, OpCode: op, Length: int64(len(payload)), Masked: masked}
	if masked {
		h.Mask = [4]byte{0x12, 0x34, 0x56, 0x78}
	}
	var b bytes.Buffer
	if err := ws.WriteHeader(&b, h); err != nil {
		panic(err)
	}
	p := bytes.Clone(payload)
	if masked {
		ws.Cipher(p, h.Mask, 0)
	}
	b.Write(p)
	return b.Bytes()
}

func closeBody(code uint16, reason string) []byte {
	b := binary.BigEndian.AppendUint16(nil, code)
	return append(b, reason...)
}

func (r *rawClient) send(frames ...[]byte) {
	r.t.Helper()
	if _, err := r.c.Write(bytes.Join(frames, nil)); err != nil {
		r.t.Fatal(err)
	}
}

// next reads a frame from the server, which must not be masked.
func (r *rawClient) next() (ws.Header, []byte) {
	r.t.Helper()
	h, err := ws.ReadHeader(r.br)
	if err != nil {
		r.t.Fatalf("read a frame: %v", err)
	}
	if h.Masked {
		r.t.Fatal("the server masked a frame")
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r.br, p); err != nil {
		r.t.Fatalf("read a frame's payload: %v", err)
	}
	return h, p
}

// expectClose reads frames up to a close frame and checks its code, then
// checks that the server closes the connection.
func (r *rawClient) expectClose(code int) {
	r.t.Helper()
	for {
		h, p := r.next()
		if h.OpCode != ws.OpClose {
			continue
		}
		if len(p) < 2 || int(binary.BigEndian.Uint16(p)) != code {
			r.t.Fatalf("close frame %x, want code %d", p, code)
		}
		break
	}
	if b, err := r.br.ReadByte(); err != io.EOF {
		r.t.Fatalf("after the close frame: %v %v, want EOF", b, err)
	}
	r.c.Close() // as a browser does
}

// serveRead reads from c until an error and returns what it read and the
// error.
func serveRead(c net.Conn) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		data, err := io.ReadAll(c)
		ch <- readResult{data, err}
	}()
	return ch
}

type readResult struct {
	data []byte
	err  error
}

func waitRead(t *testing.T, ch <-chan readResult) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the server's Read did not return")
		return readResult{}
	}
}

// rawServer listens on ws://127.0.0.1:0/warren and accepts one connection
// for a raw client.
func rawServer(t *testing.T, cfg *transport.ListenConfig) (*rawClient, <-chan *transport.Conn) {
	t.Helper()
	l := listen(t, "ws://127.0.0.1:0/warren", cfg)
	accepted := acceptOne(t, l)
	return dialRaw(t, "tcp", l.Endpoint().Address), accepted
}

func TestWebSocketBrowserHandshake(t *testing.T) {
	r, accepted := rawServer(t, &transport.ListenConfig{WebSocket: &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin}})
	// A frame sent right behind the request, before the answer, is not
	// lost.
	r.upgrade("/warren", frame(true, 0, ws.OpBinary, []byte("early"), true))
	s := serverConn(t, accepted, r.c)
	got := make([]byte, 5)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "early" {
		t.Fatalf("read %q, %v; want the early frame", got, err)
	}
	if _, err := s.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	h, p := r.next()
	if !h.Fin || h.OpCode != ws.OpBinary || string(p) != "hi" || h.Rsv != 0 {
		t.Fatalf("server frame %+v %q, want one final binary frame", h, p)
	}
	// One Write is one frame, however large.
	big := pattern(7, 3<<20)
	go s.Write(big)
	h, p = r.next()
	if !h.Fin || h.OpCode != ws.OpBinary || !bytes.Equal(p, big) {
		t.Fatalf("a 3 MiB Write arrived as frame %+v", h)
	}
	// An empty message is an empty frame.
	go s.Write(nil)
	if h, p = r.next(); h.OpCode != ws.OpBinary || len(p) != 0 {
		t.Fatalf("an empty Write arrived as frame %+v %q", h, p)
	}
}

func TestWebSocketHandshakeRefused(t *testing.T) {
	upgrade := []string{"Host: localhost", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: " + rfcKey}
	replace := func(name, line string) []string {
		var out []string
		for _, l := range upgrade {
			if !strings.HasPrefix(l, name+":") {
				out = append(out, l)
			}
		}
		if line != "" {
			out = append(out, line)
		}
		return out
	}
	tests := []struct {
		name   string
		path   string
		lines  []string
		status int
		header [2]string // a header the answer must have
		body   string
	}{
		{"other path", "/other", upgrade, 404, [2]string{}, "no WebSocket endpoint at /other"},
		{"not an upgrade", "/warren", []string{"Host: localhost", "Accept: */*"}, 426, [2]string{"Upgrade", "websocket"}, "speaks WebSocket only"},
		{"upgrade to h2c", "/warren", replace("Upgrade", "Upgrade: h2c"), 426, [2]string{"Upgrade", "websocket"}, ""},
		{"version 8", "/warren", replace("Sec-WebSocket-Version", "Sec-WebSocket-Version: 8"), 400, [2]string{"Sec-WebSocket-Version", "13"}, "version 13"},
		{"no version", "/warren", replace("Sec-WebSocket-Version", ""), 400, [2]string{"Sec-WebSocket-Version", "13"}, ""},
		{"no key", "/warren", replace("Sec-WebSocket-Key", ""), 400, [2]string{}, "Sec-WebSocket-Key"},
		{"short key", "/warren", replace("Sec-WebSocket-Key", "Sec-WebSocket-Key: c2hvcnQ="), 400, [2]string{}, "Sec-WebSocket-Key"},
		{"key not base64", "/warren", replace("Sec-WebSocket-Key", "Sec-WebSocket-Key: !!!!!!!!!!!!!!!!!!!!!!=="), 400, [2]string{}, "Sec-WebSocket-Key"},
		{"foreign origin", "/warren", append(upgrade, "Origin: http://evil.example"), 403, [2]string{}, `origin "http://evil.example" is not allowed`},
		{"null origin", "/warren", append(upgrade, "Origin: null"), 403, [2]string{}, ""},
		{"body", "/warren", append(upgrade, "Content-Length: 3"), 400, [2]string{}, "no body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listen(t, "ws://127.0.0.1:0/warren", &transport.ListenConfig{
				WebSocket: &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin},
			})
			hsErr := make(chan error, 1)
			go func() {
				c, err := l.AcceptConn()
				if err != nil {
					hsErr <- err
					return
				}
				defer c.Close()
				hsErr <- c.Handshake(context.Background())
			}()
			r := dialRaw(t, "tcp", l.Endpoint().Address)
			var extra []byte
			if tt.name == "body" {
				extra = []byte("abc")
			}
			resp := r.request(tt.path, tt.lines, extra)
			body, _ := io.ReadAll(resp.Body)
			r.c.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("answered %s (%q), want %d", resp.Status, body, tt.status)
			}
			if k := tt.header[0]; k != "" && resp.Header.Get(k) != tt.header[1] {
				t.Errorf("header %s = %q, want %q", k, resp.Header.Get(k), tt.header[1])
			}
			if !strings.Contains(string(body), tt.body) {
				t.Errorf("body %q does not contain %q", body, tt.body)
			}
			err := <-hsErr
			var he *transport.WebSocketHandshakeError
			if !errors.As(err, &he) || he.Status != tt.status {
				t.Fatalf("server Handshake: %v, want a *WebSocketHandshakeError with status %d", err, tt.status)
			}
			if got := l.Stats(); got.Rejected != 0 {
				t.Errorf("Stats = %+v: a refused handshake is not a policy refusal", got)
			}
		})
	}
}

func TestWebSocketOriginAllowed(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", &transport.ListenConfig{
		WebSocket: &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin},
	})
	serveEcho(t, l, nil)
	addr := l.Endpoint().String()
	// The client sends no Origin: it is not a browser.
	c := dial(t, addr, nil)
	echo(t, c, "no origin")
	// An Origin that names the Host.
	c = dial(t, addr, &transport.DialConfig{WebSocketHeader: http.Header{"Origin": {"https://" + l.Endpoint().Address}}})
	echo(t, c, "same host")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := transport.Dial(ctx, addr, &transport.DialConfig{WebSocketHeader: http.Header{"Origin": {"https://evil.example"}}})
	var he *transport.WebSocketHandshakeError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden {
		t.Fatalf("Dial with a foreign Origin: %v, want a 403 handshake error", err)
	}
	for _, want := range []string{"server answered HTTP 403 Forbidden for /warren", "is not allowed", "refused this client or its Origin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestWebSocketDialErrors(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", nil)
	serveEcho(t, l, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := "ws://" + l.Endpoint().Address + "/other"
	_, err := transport.Dial(ctx, addr, nil)
	var he *transport.WebSocketHandshakeError
	if !errors.As(err, &he) || he.Status != 404 {
		t.Fatalf("Dial %s: %v, want a 404 handshake error", addr, err)
	}
	for _, want := range []string{"warren: dial " + addr, "server answered HTTP 404 Not Found for /other", "is it a warren server with WebSocket enabled"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	// Servers that do not speak HTTP.
	for _, tt := range []struct {
		name  string
		serve func(net.Conn)
		want  string
	}{
		{"closes", func(c net.Conn) {}, "server closed the connection during the handshake"},
		{"speaks another protocol", func(c net.Conn) { io.WriteString(c, "SSH-2.0-OpenSSH_9.6\r\n") }, "did not answer with HTTP/1.1"},
		{"warren without HTTP", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 62\r\nConnection: close\r\n\r\nThis socket speaks the warren protocol (version 1), not HTTP.\n")
		}, `server answered HTTP 400 Bad Request for /warren ("This socket speaks the warren protocol (version 1), not HTTP.")`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				http.ReadRequest(bufio.NewReader(c))
				tt.serve(c)
				c.Close()
			}()
			defer func() { ln.Close(); <-done }()
			_, err = transport.Dial(ctx, "ws://"+ln.Addr().String()+"/warren", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Dial: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestWebSocketHandshakeTimeout(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", &transport.ListenConfig{HandshakeTimeout: 20 * time.Millisecond})
	silent := dialRaw(t, "tcp", l.Endpoint().Address)
	io.WriteString(silent.c, "GET /warren HTTP/1.1\r\n") // and no more
	c, err := l.AcceptConn()                             // returned at once: the handshake has not run
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Read: %v, want a handshake timeout", err)
	}
	if _, err2 := c.Write([]byte("x")); err2 != err {
		t.Errorf("Write after a failed handshake: %v, want %v", err2, err)
	}
}

func TestWebSocketFragments(t *testing.T) {
	r, accepted := rawServer(t, nil)
	r.upgrade("/warren", nil)
	s := serverConn(t, accepted, r.c)
	read := serveRead(s)
	r.send(
		frame(false, 0, ws.OpBinary, []byte("hel"), true),
		frame(true, 0, ws.OpPing, []byte("between fragments"), true),
		frame(false, 0, ws.OpContinuation, nil, true),
		frame(false, 0, ws.OpContinuation, []byte("lo "), true),
		frame(true, 0, ws.OpPong, []byte("unsolicited"), true),
		frame(true, 0, ws.OpContinuation, []byte("world"), true),
		frame(true, 0, ws.OpBinary, nil, true),
		frame(true, 0, ws.OpBinary, []byte("!"), true),
		frame(true, 0, ws.OpClose, closeBody(1000, "done"), true),
	)
	h, p := r.next()
	if h.OpCode != ws.OpPong || string(p) != "between fragments" {
		t.Fatalf("frame %+v %q, want the pong", h, p)
	}
	r.expectClose(1000)
	got := waitRead(t, read)
	if string(got.data) != "hello world!" || got.err != nil {
		t.Fatalf("server read %q, %v; want \"hello world!\" and io.EOF", got.data, got.err)
	}
}

func TestWebSocketPing(t *testing.T) {
	r, accepted := rawServer(t, nil)
	r.upgrade("/warren", nil)
	s := serverConn(t, accepted, r.c)
	read := serveRead(s)
	for _, payload := range [][]byte{nil, []byte("x"), pattern(3, 125)} {
		r.send(frame(true, 0, ws.OpPing, payload, true))
		h, p := r.next()
		if h.OpCode != ws.OpPong || !h.Fin || !bytes.Equal(p, payload) {
			t.Fatalf("answer to a ping of %d bytes: %+v %x", len(payload), h, p)
		}
	}
	r.send(frame(true, 0, ws.OpClose, nil, true)) // no status code
	h, p := r.next()
	if h.OpCode != ws.OpClose || len(p) != 0 {
		t.Fatalf("answer to an empty close frame: %+v %x, want an empty close frame", h, p)
	}
	if got := waitRead(t, read); got.err != nil {
		t.Fatalf("server Read: %v, want io.EOF", got.err)
	}
}

// TestWebSocketPingWhileWriting checks that pings are answered while a
// large message is being written, and that the pong does not cut into it.
func TestWebSocketPingWhileWriting(t *testing.T) {
	r, accepted := rawServer(t, nil)
	r.upgrade("/warren", nil)
	s := serverConn(t, accepted, r.c)
	read := serveRead(s)
	big := pattern(9, 8<<20)
	werr := make(chan error, 1)
	go func() {
		_, err := s.Write(big)
		werr <- err
	}()
	r.send(frame(true, 0, ws.OpPing, []byte("p1"), true))
	var pongs int
	var data []byte
	for pongs == 0 || len(data) < len(big) {
		h, p := r.next()
		switch h.OpCode {
		case ws.OpPong:
			pongs++
			if string(p) != "p1" {
				t.Fatalf("pong %q", p)
			}
		case ws.OpBinary:
			data = append(data, p...)
		default:
			t.Fatalf("unexpected frame %+v", h)
		}
	}
	if !bytes.Equal(data, big) {
		t.Fatal("the message changed on the way")
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	r.send(frame(true, 0, ws.OpClose, closeBody(1000, ""), true))
	r.expectClose(1000)
	waitRead(t, read)
}

func TestWebSocketProtocolErrors(t *testing.T) {
	long := func(lenBits byte, ext []byte) []byte { // a binary frame header with a chosen length encoding
		return append([]byte{0x82, 0x80 | lenBits}, append(ext, 1, 2, 3, 4)...)
	}
	tests := []struct {
		name   string
		frames [][]byte
		code   int
		reason string
	}{
		{"unmasked frame", [][]byte{frame(true, 0, ws.OpBinary, []byte("x"), false)}, 1002, "unmasked frame from the client"},
		{"text message", [][]byte{frame(true, 0, ws.OpText, []byte("hello"), true)}, 1003, "text message refused"},
		{"text fragments", [][]byte{frame(false, 0, ws.OpText, []byte("he"), true)}, 1003, "text message refused"},
		{"rsv1", [][]byte{frame(true, 4, ws.OpBinary, []byte("x"), true)}, 1002, "reserved bits"},
		{"rsv3", [][]byte{frame(true, 1, ws.OpBinary, []byte("x"), true)}, 1002, "reserved bits"},
		{"opcode 3", [][]byte{frame(true, 0, 3, nil, true)}, 1002, "reserved opcode 0x3"},
		{"opcode 0xB", [][]byte{frame(true, 0, 0xb, nil, true)}, 1002, "reserved opcode 0xb"},
		{"long ping", [][]byte{frame(true, 0, ws.OpPing, make([]byte, 126), true)}, 1002, "control frame longer than 125 bytes"},
		{"fragmented ping", [][]byte{frame(false, 0, ws.OpPing, nil, true)}, 1002, "fragmented control frame"},
		{"fragmented close", [][]byte{frame(false, 0, ws.OpClose, closeBody(1000, ""), true)}, 1002, "fragmented control frame"},
		{"lone continuation", [][]byte{frame(true, 0, ws.OpContinuation, []byte("x"), true)}, 1002, "continuation frame outside"},
		{"continuation after a whole message", [][]byte{frame(true, 0, ws.OpBinary, []byte("a"), true), frame(true, 0, ws.OpContinuation, []byte("b"), true)}, 1002, "continuation frame outside"},
		{"new message in a fragmented one", [][]byte{frame(false, 0, ws.OpBinary, []byte("a"), true), frame(true, 0, ws.OpBinary, []byte("b"), true)}, 1002, "new message before the end"},
		{"close with 1 byte", [][]byte{frame(true, 0, ws.OpClose, []byte{3}, true)}, 1002, "1-byte payload"},
		{"close 1005", [][]byte{frame(true, 0, ws.OpClose, closeBody(1005, ""), true)}, 1002, "code 1005"},
		{"close 1006", [][]byte{frame(true, 0, ws.OpClose, closeBody(1006, ""), true)}, 1002, "code 1006"},
		{"close 999", [][]byte{frame(true, 0, ws.OpClose, closeBody(999, ""), true)}, 1002, "code 999"},
		{"close 2000", [][]byte{frame(true, 0, ws.OpClose, closeBody(2000, ""), true)}, 1002, "code 2000"},
		{"close 5000", [][]byte{frame(true, 0, ws.OpClose, closeBody(5000, ""), true)}, 1002, "code 5000"},
		{"close reason not UTF-8", [][]byte{frame(true, 0, ws.OpClose, closeBody(1000, "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80"), true)}, 1007, "not UTF-8"},
		{"16-bit length below 126", [][]byte{long(126, []byte{0, 5})}, 1002, "shortest encoding"},
		{"64-bit length below 65536", [][]byte{long(127, []byte{0, 0, 0, 0, 0, 0, 0xff, 0xff})}, 1002, "shortest encoding"},
		{"64-bit length with the top bit", [][]byte{long(127, []byte{0x80, 0, 0, 0, 0, 0, 0, 0})}, 1002, "most significant bit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, accepted := rawServer(t, nil)
			r.upgrade("/warren", nil)
			s := serverConn(t, accepted, r.c)
			read := serveRead(s)
			r.send(tt.frames...)
			r.expectClose(tt.code)
			got := waitRead(t, read)
			var we *transport.WebSocketError
			if !errors.As(got.err, &we) {
				t.Fatalf("server Read: %v, want a *WebSocketError", got.err)
			}
			if we.Code != tt.code || we.Remote || !strings.Contains(we.Reason, tt.reason) {
				t.Errorf("server Read: %+v, want code %d and a reason with %q", we, tt.code, tt.reason)
			}
			if _, err := s.Write([]byte("x")); err == nil {
				t.Error("Write after a protocol error succeeded")
			}
		})
	}
}

func TestWebSocketCloseCodes(t *testing.T) {
	tests := []struct {
		code   uint16
		reason string
		eof    bool
	}{
		{1000, "bye", true},
		{1001, "tab closed", true},
		{1011, "internal error", false},
		{1012, "", false},
		{3000, "unauthorized", false},
		{4999, "κόσμε", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			r, accepted := rawServer(t, nil)
			r.upgrade("/warren", nil)
			s := serverConn(t, accepted, r.c)
			read := serveRead(s)
			r.send(frame(true, 0, ws.OpBinary, []byte("last"), true), frame(true, 0, ws.OpClose, closeBody(tt.code, tt.reason), true))
			r.expectClose(int(tt.code)) // echoed
			got := waitRead(t, read)
			if string(got.data) != "last" {
				t.Errorf("server read %q", got.data)
			}
			if tt.eof {
				if got.err != nil {
					t.Errorf("server Read: %v, want io.EOF", got.err)
				}
				return
			}
			var we *transport.WebSocketError
			if !errors.As(got.err, &we) || we.Code != int(tt.code) || !we.Remote || we.Reason != tt.reason {
				t.Errorf("server Read: %v, want the peer's code %d and reason %q", got.err, tt.code, tt.reason)
			}
		})
	}
}

func TestWebSocketAbnormalClosure(t *testing.T) {
	r, accepted := rawServer(t, nil)
	r.upgrade("/warren", nil)
	s := serverConn(t, accepted, r.c)
	read := serveRead(s)
	r.send(frame(true, 0, ws.OpBinary, []byte("data"), true), frame(true, 0, ws.OpBinary, []byte("cut"), true)[:5])
	r.c.Close()
	got := waitRead(t, read)
	var we *transport.WebSocketError
	if string(got.data) != "data" || !errors.As(got.err, &we) || we.Code != 1006 || !errors.Is(got.err, io.ErrUnexpectedEOF) {
		t.Fatalf("server read %q, %v; want the first message and a 1006 error", got.data, got.err)
	}
}

// TestWebSocketCloseHandshake runs the close handshake from each side
// between a client and a server of this package.
func TestWebSocketCloseHandshake(t *testing.T) {
	for _, tc := range wsCases() {
		t.Run(tc.name+"/client closes", func(t *testing.T) {
			l := listen(t, tc.addr, tc.listen(t))
			accepted := acceptOne(t, l)
			c := dial(t, l.Endpoint().String(), tc.dial(t))
			s := serverConn(t, accepted, c)
			read := serveRead(s)
			if _, err := c.Write([]byte("before close")); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Close took %v", d)
			}
			got := waitRead(t, read)
			if string(got.data) != "before close" || got.err != nil {
				t.Fatalf("server read %q, %v; want the data and io.EOF", got.data, got.err)
			}
			if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("server Write after the close handshake: %v, want net.ErrClosed", err)
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("client Write after Close: %v, want net.ErrClosed", err)
			}
		})
		t.Run(tc.name+"/server closes while the client reads", func(t *testing.T) {
			l := listen(t, tc.addr, tc.listen(t))
			accepted := acceptOne(t, l)
			c := dial(t, l.Endpoint().String(), tc.dial(t))
			s := serverConn(t, accepted, c)
			read := serveRead(c)
			if _, err := s.Write([]byte("from the server")); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			got := waitRead(t, read)
			if string(got.data) != "from the server" || got.err != nil {
				t.Fatalf("client read %q, %v; want the data and io.EOF", got.data, got.err)
			}
		})
		t.Run(tc.name+"/CloseWrite", func(t *testing.T) {
			l := listen(t, tc.addr, tc.listen(t))
			serveEcho(t, l, nil)
			c := dial(t, l.Endpoint().String(), tc.dial(t))
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "echo ")
			io.WriteString(c, "this")
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Write after CloseWrite: %v, want net.ErrClosed", err)
			}
			got, err := io.ReadAll(c)
			if string(got) != "echo this" || err != nil {
				t.Fatalf("read %q, %v", got, err)
			}
		})
	}
}

// TestWebSocketServerCloses checks the close frame a server's Close sends,
// and that it waits for the client's.
func TestWebSocketServerCloses(t *testing.T) {
	r, accepted := rawServer(t, nil)
	r.upgrade("/warren", nil)
	s := serverConn(t, accepted, r.c)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	h, p := r.next()
	if h.OpCode != ws.OpClose || !bytes.Equal(p, closeBody(1000, "")) {
		t.Fatalf("frame %+v %x, want a close frame with code 1000", h, p)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the client answered", err)
	case <-time.After(50 * time.Millisecond):
	}
	// Data that was on its way is dropped; the close frame ends the wait.
	r.send(frame(true, 0, ws.OpBinary, []byte("late"), true), frame(true, 0, ws.OpClose, closeBody(1000, ""), true))
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := r.br.ReadByte(); err != io.EOF {
		t.Fatalf("after the close handshake: %v, want EOF", err)
	}
}

func TestWebSocketReadDeadline(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", nil)
	accepted := acceptOne(t, l)
	c := dial(t, l.Endpoint().String(), nil)
	s := serverConn(t, accepted, c)
	c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("Read past the deadline: %v, want a timeout", err)
	}
	// The stream survives the timeout.
	c.SetReadDeadline(time.Time{})
	echoTo(t, s, c, "after the timeout")
	echoTo(t, c, s, "both ways")
}

// echoTo writes msg to from and checks that to reads it.
func echoTo(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	go io.WriteString(from, msg)
	got := make([]byte, len(msg))
	to.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer to.SetReadDeadline(time.Time{})
	if _, err := io.ReadFull(to, got); err != nil || string(got) != msg {
		t.Fatalf("read %q, %v; want %q", got, err, msg)
	}
}

// TestWebSocketClientSide checks what the client sends and refuses, against
// a server written by hand.
func TestWebSocketClientSide(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		code  int
	}{
		{"masked frame from the server", frame(true, 0, ws.OpBinary, []byte("x"), true), 1002},
		{"text from the server", frame(true, 0, ws.OpText, []byte("x"), false), 1003},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			type result struct {
				req   *http.Request
				first ws.Header
				data  []byte
				close []byte
				err   error
			}
			done := make(chan result, 1)
			go func() {
				var res result
				defer func() { done <- res }()
				c, err := ln.Accept()
				if err != nil {
					res.err = err
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				if res.req, res.err = http.ReadRequest(br); res.err != nil {
					return
				}
				key := res.req.Header.Get("Sec-WebSocket-Key")
				fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acceptFor(key))
				h, p, err := readFrame(br)
				if res.err = err; err != nil {
					return
				}
				res.first, res.data = h, p
				c.Write(tt.frame)
				for {
					h, p, err := readFrame(br)
					if res.err = err; err != nil {
						return
					}
					if h.OpCode == ws.OpClose {
						res.close = p
						return
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := transport.Dial(ctx, "ws://"+ln.Addr().String()+"/warren", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("client data"))
			_, err = c.Read(make([]byte, 10))
			var we *transport.WebSocketError
			if !errors.As(err, &we) || we.Code != tt.code {
				t.Fatalf("client Read: %v, want a *WebSocketError with code %d", err, tt.code)
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.req.URL.Path != "/warren" || res.req.Header.Get("Sec-WebSocket-Version") != "13" {
				t.Errorf("request %s %+v", res.req.URL, res.req.Header)
			}
			if !res.first.Masked || res.first.OpCode != ws.OpBinary || !res.first.Fin || string(res.data) != "client data" {
				t.Errorf("client frame %+v %q, want a masked binary frame", res.first, res.data)
			}
			if !bytes.Equal(res.close, closeBody(uint16(tt.code), "")) {
				t.Errorf("client close frame %x, want code %d", res.close, tt.code)
			}
		})
	}
}

// readFrame reads a frame and unmasks its payload.
func readFrame(r io.Reader) (ws.Header, []byte, error) {
	h, err := ws.ReadHeader(r)
	if err != nil {
		return h, nil, err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		return h, nil, err
	}
	if h.Masked {
		ws.Cipher(p, h.Mask, 0)
	}
	return h, p, nil
}

// acceptFor computes Sec-WebSocket-Accept for key, as RFC 6455 says, with
// an independent implementation.
func acceptFor(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func TestAcceptValue(t *testing.T) {
	if got := acceptFor(rfcKey); got != rfcAccept {
		t.Fatalf("acceptFor(%q) = %q, want %q", rfcKey, got, rfcAccept)
	}
}

// bridge is an HTTP server on a transport Listener that upgrades WebSocket
// requests with UpgradeWebSocket and echoes on them, as rpc's HTTP bridge
// does; other requests get 200.
func bridge(t *testing.T, l net.Listener, opts *transport.WebSocketOptions, connContext func(context.Context, net.Conn) context.Context) <-chan net.Conn {
	t.Helper()
	upgraded := make(chan net.Conn, 4)
	var wg sync.WaitGroup
	srv := &http.Server{
		ConnContext: connContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !transport.IsWebSocketUpgrade(r) {
				io.WriteString(w, "plain HTTP")
				return
			}
			c, err := transport.UpgradeWebSocket(w, r, opts)
			if err != nil {
				return
			}
			upgraded <- c
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}),
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
		for {
			select {
			case c := <-upgraded:
				c.Close()
				continue
			default:
			}
			break
		}
		wg.Wait()
	})
	return upgraded
}

func TestUpgradeWebSocket(t *testing.T) {
	l := listen(t, "tcp://127.0.0.1:0", nil)
	upgraded := bridge(t, l, nil, nil)
	addr := l.Endpoint().Address

	// Plain HTTP and WebSocket on the same listener.
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if string(body) != "plain HTTP" {
		t.Fatalf("plain request: %q", body)
	}

	c := dial(t, "ws://"+addr+"/any/path", nil)
	echo(t, c, "through the bridge")
	s := <-upgraded
	p := s.(interface{ Peer() *peer.Peer }).Peer()
	if p.Network != "tcp" || p.RemoteAddr.String() != c.LocalAddr().String() {
		t.Errorf("upgraded Peer = %v, want the tcp peer at %v", p, c.LocalAddr())
	}

	// Bytes sent right behind the request are not lost, and a browser's
	// handshake gets the RFC's answer.
	r := dialRaw(t, "tcp", addr)
	resp = r.request("/x", browserLines, frame(true, 0, ws.OpBinary, []byte("early bytes"), true))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answered %s", resp.Status)
	}
	checkUpgradeResponse(t, resp)
	h, payload := r.next()
	if h.OpCode != ws.OpBinary || string(payload) != "early bytes" {
		t.Fatalf("echo of the early frame: %+v %q", h, payload)
	}
	r.send(frame(true, 0, ws.OpClose, closeBody(1000, ""), true))
	r.expectClose(1000)

	// Refusals come from net/http's ResponseWriter.
	r = dialRaw(t, "tcp", addr)
	resp = r.request("/x", []string{"Host: x", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 7", "Sec-WebSocket-Key: " + rfcKey}, nil)
	if resp.StatusCode != 400 || resp.Header.Get("Sec-WebSocket-Version") != "13" {
		t.Fatalf("version 7: %s %v", resp.Status, resp.Header)
	}
}

func TestUpgradeWebSocketKeepsPeer(t *testing.T) {
	skipUnlessCred(t)
	path := filepath.Join(t.TempDir(), "app.sock")
	l := listen(t, "unix://"+path, nil)
	upgraded := bridge(t, l, nil, nil)
	r := dialRaw(t, "unix", path)
	r.upgrade("/warren", nil)
	s := <-upgraded
	p := s.(interface{ Peer() *peer.Peer }).Peer()
	if !p.HasCred || p.UID != os.Geteuid() || p.PID != os.Getpid() || p.Network != "unix" {
		t.Fatalf("upgraded Peer = %v, want this process's credentials", p)
	}
	// The peer is the very one the Listener made.
	if _, ok := s.(*transport.Conn).NetConn().(*transport.Conn); !ok {
		t.Errorf("NetConn is a %T, want the hijacked *transport.Conn", s.(*transport.Conn).NetConn())
	}
	if got := s.(*transport.Conn).NetConn().(*transport.Conn).Peer(); got != p {
		t.Error("the upgraded connection has a Peer other than its listener's")
	}
	if p := (peer.Peer{}); peer.ReadCred(s, &p) != nil || p.PID != os.Getpid() {
		t.Errorf("ReadCred through the upgraded conn: %+v", p)
	}
	r.send(frame(true, 0, ws.OpBinary, []byte("over unix"), true))
	if h, payload := r.next(); string(payload) != "over unix" {
		t.Fatalf("echo %+v %q", h, payload)
	}
}

func TestUpgradeWebSocketPeerFromContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	want := &peer.Peer{Network: "bridge"}
	upgraded := bridge(t, ln, &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin},
		func(ctx context.Context, _ net.Conn) context.Context { return peer.NewContext(ctx, want) })
	c := dial(t, "ws://"+ln.Addr().String()+"/", nil)
	echo(t, c, "x")
	if got := (<-upgraded).(interface{ Peer() *peer.Peer }).Peer(); got != want {
		t.Fatalf("Peer = %v, want the one in the request's context", got)
	}
}

func TestSameHostOrigin(t *testing.T) {
	r := &http.Request{Host: "app.example:8080"}
	for origin, want := range map[string]bool{
		"":                          true,
		"http://app.example:8080":   true,
		"https://APP.example:8080":  true,
		"http://app.example":        false,
		"http://evil.example:8080":  false,
		"null":                      false,
		"http://app.example:8080.x": false,
		"::bad":                     false,
	} {
		if got := transport.SameHostOrigin(origin, r); got != want {
			t.Errorf("SameHostOrigin(%q) = %t, want %t", origin, got, want)
		}
	}
}

func TestIsWebSocketUpgrade(t *testing.T) {
	for _, tt := range []struct {
		method     string
		connection []string
		upgrade    []string
		want       bool
	}{
		{"GET", []string{"Upgrade"}, []string{"websocket"}, true},
		{"GET", []string{"keep-alive, Upgrade"}, []string{"WebSocket"}, true},
		{"GET", []string{"keep-alive", "upgrade"}, []string{"h2c, websocket"}, true},
		{"POST", []string{"Upgrade"}, []string{"websocket"}, false},
		{"GET", nil, []string{"websocket"}, false},
		{"GET", []string{"Upgrade"}, []string{"h2c"}, false},
		{"GET", []string{"Upgraded"}, []string{"websocket"}, false},
	} {
		r := &http.Request{Method: tt.method, Header: http.Header{}}
		r.Header["Connection"] = tt.connection
		r.Header["Upgrade"] = tt.upgrade
		if got := transport.IsWebSocketUpgrade(r); got != tt.want {
			t.Errorf("IsWebSocketUpgrade(%s, Connection %q, Upgrade %q) = %t", tt.method, tt.connection, tt.upgrade, got)
		}
	}
}

func TestWebSocketSubprotocol(t *testing.T) {
	l := listen(t, "ws://127.0.0.1:0/warren", &transport.ListenConfig{
		WebSocket: &transport.WebSocketOptions{Subprotocols: []string{"warren.v1"}},
	})
	accepted := acceptOne(t, l)
	r := dialRaw(t, "tcp", l.Endpoint().Address)
	resp := r.request("/warren", append(browserLines, "Sec-WebSocket-Protocol: chat, warren.v1"), nil)
	if resp.StatusCode != 101 || resp.Header.Get("Sec-WebSocket-Protocol") != "warren.v1" {
		t.Fatalf("answered %s with protocol %q", resp.Status, resp.Header.Get("Sec-WebSocket-Protocol"))
	}
	serverConn(t, accepted, r.c)
}

// wsPair returns the two ends of a ws connection.
func wsPair(tb testing.TB) (client, server *transport.Conn) {
	l, err := transport.Listen("ws://127.0.0.1:0/warren", nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	type accepted struct {
		c   *transport.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := l.AcceptConn()
		if err == nil {
			if err = c.Handshake(context.Background()); err != nil {
				c.Close()
			}
		}
		ch <- accepted{c, err}
	}()
	client, err = transport.Dial(context.Background(), l.Endpoint().String(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		client.Close()
		tb.Fatal(a.err)
	}
	tb.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			client.Close()
		}()
		a.c.Close()
		<-done
	})
	return client, a.c
}

// TestWebSocketZeroAllocs: in steady state a message costs no allocation,
// either way, pings included.
func TestWebSocketZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	c, s := wsPair(t)
	msg := make([]byte, 1<<10)
	buf := make([]byte, 1<<10)
	roundTrip := func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, buf); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip() // the write buffers are allocated by the first write
	if n := testing.AllocsPerRun(200, roundTrip); n != 0 {
		t.Errorf("a round trip of 1 KiB messages allocates %v times", n)
	}
}

func BenchmarkWebSocket(b *testing.B) {
	for _, size := range []int{128, 4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("client to server/%d", size), func(b *testing.B) {
			c, s := wsPair(b)
			msg := make([]byte, size)
			buf := make([]byte, size)
			errc := make(chan error, 1)
			go func() {
				for range b.N {
					if _, err := io.ReadFull(s, buf); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
	}
}

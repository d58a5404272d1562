package mux_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

func TestHandshake(t *testing.T) {
	kinds := []connKind{connKinds[0], connKinds[1], {"unix-listener", listenerPair}}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cset := wire.Settings{MaxFrameSize: 32 << 10, MaxMessageSize: 1 << 20}
			sset := wire.Settings{InitialWindow: 256 << 10, MaxStreams: 10}
			ts := newServer(t, echoUnary)
			c, s := newPair(t, k, &mux.Config{Settings: cset}, ts.config(sset))
			if got, want := c.PeerSettings(), sset.WithDefaults(); got != want {
				t.Errorf("client PeerSettings = %+v, want %+v", got, want)
			}
			// The client announces a large window, not set in cset.
			want := cset.WithDefaults()
			want.InitialWindow = 2 << 20
			if got := s.PeerSettings(); got != want {
				t.Errorf("server PeerSettings = %+v, want %+v", got, want)
			}
			if got := c.LocalSettings(); got != want {
				t.Errorf("client LocalSettings = %+v, want %+v", got, want)
			}
			if err := unaryEcho(testCtx(t), c, "echo", []byte("hello")); err != nil {
				t.Fatal(err)
			}
			if c.Err() != nil || s.Err() != nil {
				t.Fatalf("sessions ended: client %v, server %v", c.Err(), s.Err())
			}
		})
	}
}

// TestHandshakeLargeDefaults checks the MaxFrameSize and InitialWindow a
// session announces when its Config leaves them unset: a client announces
// 512 KiB and 2 MiB, and a server mirrors the client, from the protocol's
// defaults up to those, so that a peer announcing the defaults sees the
// defaults. Settings that are set are announced as they are.
func TestHandshakeLargeDefaults(t *testing.T) {
	def := wire.Settings{}.WithDefaults()
	large := def
	large.MaxFrameSize, large.InitialWindow = 512<<10, 2<<20
	for _, tc := range []struct {
		name       string
		cset, sset wire.Settings
		wantC      wire.Settings // what the client announces
		wantS      wire.Settings // what the server announces
	}{
		{"unset", wire.Settings{}, wire.Settings{}, large, large},
		{"client at the defaults", def, wire.Settings{}, def, def},
		{"client in between", wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1536 << 10}, wire.Settings{},
			wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1536 << 10}.WithDefaults(),
			wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1536 << 10}.WithDefaults()},
		{"client above", wire.Settings{MaxFrameSize: 4 << 20, InitialWindow: 8 << 20}, wire.Settings{},
			wire.Settings{MaxFrameSize: 4 << 20, InitialWindow: 8 << 20}.WithDefaults(), large},
		{"server set", wire.Settings{}, wire.Settings{MaxFrameSize: 32 << 10, InitialWindow: 64 << 10}, large,
			wire.Settings{MaxFrameSize: 32 << 10, InitialWindow: 64 << 10}.WithDefaults()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newServer(t, echoUnary)
			c, s := newPair(t, connKinds[1], &mux.Config{Settings: tc.cset}, ts.config(tc.sset))
			if got := c.LocalSettings(); got != tc.wantC || s.PeerSettings() != got {
				t.Errorf("client announced %+v (server saw %+v), want %+v", got, s.PeerSettings(), tc.wantC)
			}
			if got := s.LocalSettings(); got != tc.wantS || c.PeerSettings() != got {
				t.Errorf("server announced %+v (client saw %+v), want %+v", got, c.PeerSettings(), tc.wantS)
			}
			msg := make([]byte, 3<<20) // several frames, whatever their size
			for i := range msg {
				msg[i] = byte(i)
			}
			if err := unaryEcho(testCtx(t), c, "echo", msg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// readAllClosed reads conn until the peer closes it and returns what it sent.
// A Unix socket closed with unread data in its receive buffer reports
// ECONNRESET instead of EOF, after the data; both count as closed.
func readAllClosed(t *testing.T, conn net.Conn) []byte {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(testTimeout))
	var got bytes.Buffer
	_, err := io.Copy(&got, conn)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading until the server closes: %v (after %q)", err, got.Bytes())
	}
	return got.Bytes()
}

// TestHandshakeForeignClient checks that a peer that does not speak warren
// gets an error at once, not after the handshake timeout, and a closed
// connection.
func TestHandshakeForeignClient(t *testing.T) {
	httpReq := []byte("GET /Counter.Get HTTP/1.1\r\nHost: x\r\n\r\n")
	badSetting := append(append([]byte(nil), wire.Magic...), wire.Version, 1, 0, 1 /* MaxFrameSize */, 0, 0, 0, 10)
	tests := []struct {
		name  string
		send  []byte
		check func(error) bool
		reply []byte // what the server must answer before closing
	}{
		{"random bytes", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0xfc}, func(err error) bool {
			return errors.Is(err, wire.ErrNotWarren) && !errors.Is(err, wire.ErrHTTPRequest)
		}, nil},
		{"wrong magic", []byte{0xF0, 'X', 'X', 'X', 1, 0}, func(err error) bool { return errors.Is(err, wire.ErrNotWarren) }, nil},
		{"HTTP request", httpReq, func(err error) bool {
			return errors.Is(err, wire.ErrHTTPRequest) && errors.Is(err, wire.ErrNotWarren)
		}, mux.HTTPRejectResponse},
		{"HTTP/2 preface", []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), func(err error) bool { return errors.Is(err, wire.ErrHTTPRequest) }, mux.HTTPRejectResponse},
		{"other version", append(append([]byte(nil), wire.Magic...), wire.Version+1, 0), func(err error) bool { return errors.Is(err, wire.ErrVersion) }, nil},
		{"setting out of range", badSetting, func(err error) bool {
			var se *wire.SettingError
			return errors.As(err, &se) && se.Setting == "MaxFrameSize"
		}, nil},
	}
	forKinds(t, func(t *testing.T, k connKind) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				cc, sc := k.pair(t)
				errc := make(chan error, 1)
				cfg := newServer(t, nil).config(wire.Settings{})
				cfg.HandshakeTimeout = testTimeout // a wrong peer must not wait for it
				start := time.Now()
				go func() {
					s, err := mux.Server(sc, cfg)
					if s != nil {
						s.Close()
						err = errors.New("server accepted the peer")
					}
					errc <- err
				}()
				go cc.Write(tt.send) // on a pipe this blocks until the server reads, and fails once it closes
				got := readAllClosed(t, cc)
				err := <-errc
				elapsed := time.Since(start)
				if err == nil || !tt.check(err) {
					t.Fatalf("Server error = %v", err)
				}
				if errors.Is(err, os.ErrDeadlineExceeded) || elapsed >= testTimeout/2 {
					t.Fatalf("server waited %v for the handshake timeout instead of failing at once", elapsed)
				}
				if !bytes.Equal(got, tt.reply) {
					t.Fatalf("server answered %q, want %q", got, tt.reply)
				}
			})
		}
	})
}

// TestHandshakeStall checks that a peer that sends part of a preface, or
// nothing, and stalls is dropped after the handshake timeout, on both sides.
func TestHandshakeStall(t *testing.T) {
	const timeout = 100 * time.Millisecond
	tests := []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"half a preface", []byte(wire.Magic[:3])},
		{"preface without its settings", append(append([]byte(nil), wire.Magic...), wire.Version, 2, 0, 1)},
	}
	forKinds(t, func(t *testing.T, k connKind) {
		for _, tt := range tests {
			t.Run("server/"+tt.name, func(t *testing.T) {
				cc, sc := k.pair(t)
				cfg := newServer(t, nil).config(wire.Settings{})
				cfg.HandshakeTimeout = timeout
				errc := make(chan error, 1)
				start := time.Now()
				go func() {
					_, err := mux.Server(sc, cfg)
					errc <- err
				}()
				if len(tt.send) > 0 {
					if _, err := cc.Write(tt.send); err != nil {
						t.Fatal(err)
					}
				}
				got := readAllClosed(t, cc)
				err := <-errc
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Server error = %v, want a deadline error", err)
				}
				if elapsed := time.Since(start); elapsed < timeout {
					t.Fatalf("server gave up after %v, before the %v timeout", elapsed, timeout)
				}
				if len(got) != 0 {
					t.Fatalf("server sent %q", got)
				}
			})
			t.Run("client/"+tt.name, func(t *testing.T) {
				cc, sc := k.pair(t)
				go func() {
					if _, err := wire.ReadPreface(sc); err != nil {
						return
					}
					sc.Write(tt.send)
				}()
				start := time.Now()
				_, err := mux.Client(cc, &mux.Config{HandshakeTimeout: timeout})
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Client error = %v, want a deadline error", err)
				}
				if elapsed := time.Since(start); elapsed < timeout {
					t.Fatalf("client gave up after %v, before the %v timeout", elapsed, timeout)
				}
				sc.SetReadDeadline(time.Now().Add(testTimeout))
				if n, err := sc.Read(make([]byte, 1)); err == nil {
					t.Fatalf("client left the connection open (read %d bytes)", n)
				}
			})
		}
	})
}

// TestHandshakeForeignServer checks that a client connected to something that
// is not a warren server fails at once.
func TestHandshakeForeignServer(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		for _, reply := range [][]byte{[]byte("SSH-2.0-OpenSSH_9.6\r\n"), mux.HTTPRejectResponse} {
			cc, sc := k.pair(t)
			go func() {
				if _, err := wire.ReadPreface(sc); err == nil {
					sc.Write(reply)
				}
			}()
			start := time.Now()
			_, err := mux.Client(cc, &mux.Config{HandshakeTimeout: testTimeout})
			if !errors.Is(err, wire.ErrNotWarren) {
				t.Fatalf("reply %q: Client error = %v, want ErrNotWarren", reply[:8], err)
			}
			if elapsed := time.Since(start); elapsed > testTimeout/2 {
				t.Fatalf("client waited %v", elapsed)
			}
		}
	})
}

// TestConfigErrors checks that a bad Config is reported before the handshake
// and that the connection is closed.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name   string
		server bool
		cfg    *mux.Config
		check  func(error) bool
	}{
		{"server without OnStream", true, &mux.Config{}, func(err error) bool { return err != nil }},
		{"server nil config", true, nil, func(err error) bool { return err != nil }},
		{"client frame size too small", false, &mux.Config{Settings: wire.Settings{MaxFrameSize: 100}}, func(err error) bool {
			var se *wire.SettingError
			return errors.As(err, &se) && se.Setting == "MaxFrameSize"
		}},
		{"server window too large", true, &mux.Config{
			Settings: wire.Settings{InitialWindow: 1 << 31},
			OnStream: func(*mux.Stream, *wire.CallHeader) {},
		}, func(err error) bool {
			var se *wire.SettingError
			return errors.As(err, &se) && se.Setting == "InitialWindow"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc, sc := net.Pipe()
			defer cc.Close()
			var err error
			if tt.server {
				_, err = mux.Server(sc, tt.cfg)
			} else {
				_, err = mux.Client(sc, tt.cfg)
			}
			if !tt.check(err) {
				t.Fatalf("error = %v", err)
			}
			cc.SetReadDeadline(time.Now().Add(testTimeout))
			if _, err := cc.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("connection not closed: read error %v", err)
			}
		})
	}
}

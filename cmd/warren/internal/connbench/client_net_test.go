//go:build linux

package connbench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// TestTinyClientNetworks runs the tiny client against the event-loop
// server over tcp and WebSocket, from a source address of its own.
func TestTinyClientNetworks(t *testing.T) {
	for _, addr := range []string{"tcp://127.0.0.1:0", "ws://127.0.0.1:0/conns"} {
		t.Run(addr[:strings.Index(addr, ":")], func(t *testing.T) {
			var calls atomic.Int64
			srv := newTickServer(modeEventLoop, &calls, slog.New(slog.NewTextHandler(io.Discard, nil)))
			l, err := transport.Listen(addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(l) }()
			defer func() {
				srv.Close()
				if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
					t.Errorf("Serve: %v", err)
				}
			}()
			dst, err := parseTarget(l.Endpoint().String(), "127.0.0.9")
			if err != nil {
				t.Fatal(err)
			}
			c := newTinyClient(dst, 5, 10*time.Second)
			defer c.Close()
			for round := range uint32(3) {
				if err := c.Connect(11); err != nil {
					t.Fatal(err)
				}
				if err := c.Round(round); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if got := calls.Swap(0); got != int64(c.Conns()) {
					t.Fatalf("round %d: server counted %d calls, want %d", round, got, c.Conns())
				}
			}
			if p := srv.Stats().Conns; p != 33 {
				t.Errorf("server has %d connections, want 33", p)
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	for _, bad := range []struct{ addr, src string }{
		{"tls://127.0.0.1:1", ""}, {"tcp://[::1]:1", ""}, {"tcp://localhost:1", ""}, {"ws://127.0.0.1:1/x", "::1"}, {"nope", ""},
	} {
		if _, err := parseTarget(bad.addr, bad.src); err == nil {
			t.Errorf("parseTarget(%q, %q) succeeded", bad.addr, bad.src)
		}
	}
	dst, err := parseTarget("ws://127.0.0.1:80/a/b", "127.0.0.2")
	if err != nil || dst.network != netWS || dst.wsPath != "/a/b" || dst.addr.Port() != 80 || dst.src.String() != "127.0.0.2" {
		t.Errorf("parseTarget = %+v, %v", dst, err)
	}
	if a := nthAddr(dst.src, 255); a.String() != "127.0.1.1" {
		t.Errorf("nthAddr(127.0.0.2, 255) = %v", a)
	}
	if a := sourceAddr(299); a.String() != "127.1.44.1" {
		t.Errorf("sourceAddr(299) = %v", a)
	}
}

// serverFrame is a server's (unmasked) binary frame.
func serverFrame(p []byte) []byte {
	var b []byte
	switch {
	case len(p) < 126:
		b = []byte{0x82, byte(len(p))}
	case len(p) < 1<<16:
		b = binary.BigEndian.AppendUint16([]byte{0x82, 126}, uint16(len(p)))
	default:
		b = binary.BigEndian.AppendUint64([]byte{0x82, 127}, uint64(len(p)))
	}
	return append(b, p...)
}

// TestUnframe feeds the decoder server frames cut at every byte: the payload
// comes out whole and in order.
func TestUnframe(t *testing.T) {
	var want, in []byte
	for _, n := range []int{0, 5, 125, 126, 300, 70000} {
		p := bytes.Repeat([]byte{byte(n)}, n)
		want = append(want, p...)
		in = append(in, serverFrame(p)...)
	}
	for _, step := range []int{1, 2, 3, 7, 13, 1000, len(in)} {
		var st wsState
		var got []byte
		for i := 0; i < len(in); i += step {
			buf := append(st.hdr[:st.nhdr:st.nhdr], in[i:min(i+step, len(in))]...)
			out, err := st.unframe(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out...)
		}
		if !bytes.Equal(got, want) || st.remain != 0 || st.nhdr != 0 {
			t.Fatalf("step %d: got %d bytes (state %+v), want %d", step, len(got), st, len(want))
		}
	}
	for _, tt := range []struct {
		frame []byte
		want  string
	}{
		{[]byte{0x82, 0x81, 1, 2, 3, 4, 0}, "masked"},
		{[]byte{0x88, 2, 3, 0xe8}, "close frame (code 1000)"},
		{[]byte{0x89, 0}, "opcode 0x9"},
		{[]byte{0xc2, 0}, "reserved bits"},
	} {
		var st wsState
		if _, err := st.unframe(tt.frame); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("unframe(%x) = %v, want %q", tt.frame, err, tt.want)
		}
	}
}

// TestAppendMasked: the frame unmasks to the payload.
func TestAppendMasked(t *testing.T) {
	for _, n := range []int{0, 125, 126, 65535, 65536} {
		p := bytes.Repeat([]byte("warren"), n/6+1)[:n]
		f := appendMasked([]byte("x"), p)[1:]
		hl := map[bool]int{true: 2, false: 4}[n < 126]
		if n >= 1<<16 {
			hl = 10
		}
		if f[0] != 0x82 || f[1]&0x80 == 0 || len(f) != hl+4+n {
			t.Fatalf("%d bytes: header %x, length %d", n, f[:hl], len(f))
		}
		mask := f[hl : hl+4]
		got := bytes.Clone(f[hl+4:])
		for i := range got {
			got[i] ^= mask[i&3]
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("%d bytes: unmasked payload differs", n)
		}
	}
}

// TestReadUpgrade: a handshake response with the right accept key and a
// preface in the same read; one with the wrong key; a refusal.
func TestReadUpgrade(t *testing.T) {
	c, peer := fakeConn(t)
	c.dst.network = netWS
	key := c.wsKey(0)
	pre := wire.AppendPreface(nil, wire.Settings{})
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nsec-websocket-accept: " + wsAccept(key) + "\r\n\r\n"
	if err := writeAll(int32(peer), append([]byte(resp), serverFrame(pre[:3])...)); err != nil {
		t.Fatal(err)
	}
	go writeAll(int32(peer), serverFrame(pre[3:]))
	if err := c.readPreface(0); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ resp, want string }{
		{"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: nope\r\n\r\n", "Sec-WebSocket-Accept"},
		{"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", "403 Forbidden"},
	} {
		if err := writeAll(int32(peer), []byte(tt.resp)); err != nil {
			t.Fatal(err)
		}
		if err := c.readPreface(0); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("readPreface = %v, want %q", err, tt.want)
		}
	}
}

// FuzzUnframe feeds the client's frame decoder arbitrary server bytes, cut
// in two: it never panics, never yields more payload than it was given,
// keeps at most a header's start, and decodes the same payload whole or
// cut.
func FuzzUnframe(f *testing.F) {
	f.Add(serverFrame([]byte("warren")), 3)
	f.Add(append(serverFrame(make([]byte, 300)), 0x82, 126, 1), 5)
	f.Add([]byte{0x88, 2, 3, 0xe8}, 1)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		var whole wsState
		want, werr := whole.unframe(bytes.Clone(in))
		cut = min(max(cut, 0), len(in))
		var st wsState
		got, err := st.unframe(bytes.Clone(in[:cut]))
		if err == nil {
			if len(got) > cut || st.nhdr > 13 {
				t.Fatalf("%d bytes of payload (%d held) from %d bytes", len(got), st.nhdr, cut)
			}
			got = bytes.Clone(got)
			rest, err2 := st.unframe(append(st.hdr[:st.nhdr:st.nhdr], in[cut:]...))
			got, err = append(got, rest...), err2
		}
		if (err == nil) != (werr == nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("cut at %d: %x, %v; whole: %x, %v", cut, got, err, want, werr)
		}
	})
}

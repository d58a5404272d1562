//go:build linux

package connbench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// serveTick runs the benchmark's server in this process and returns its
// socket path and call counter.
func serveTick(t *testing.T, mode string) (string, *atomic.Int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	var calls atomic.Int64
	srv := newTickServer(mode, &calls, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return path, &calls
}

// TestTinyClient runs the tiny client against rpc.Server in both modes:
// connections added between rounds (their first stream is not 1), a window
// smaller than the connections, every reply checked.
func TestTinyClient(t *testing.T) {
	for _, mode := range []string{modeEventLoop, modeGoroutine} {
		t.Run(mode, func(t *testing.T) {
			path, calls := serveTick(t, mode)
			c := newTinyClient(target{network: netUnix, path: path}, 7, 10*time.Second)
			defer c.Close()
			if err := c.Connect(20); err != nil {
				t.Fatal(err)
			}
			round := uint32(0)
			for _, more := range []int{0, 13, 1} {
				if err := c.Connect(more); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := c.Round(round); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
					round++
					if got := calls.Swap(0); got != int64(c.Conns()) {
						t.Fatalf("round %d: server counted %d calls, want %d", round-1, got, c.Conns())
					}
				}
			}
			if c.Conns() != 34 {
				t.Fatalf("Conns = %d, want 34", c.Conns())
			}
		})
	}
}

// TestTinyClientRefused: a call the server refuses (no such method) fails
// the round with the status.
func TestTinyClientRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	srv := rpc.NewServer(&rpc.ServerOptions{EventLoop: true})
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	c := newTinyClient(target{network: netUnix, path: path}, 4, 10*time.Second)
	defer c.Close()
	if err := c.Connect(3); err != nil {
		t.Fatal(err)
	}
	err = c.Round(0)
	if err == nil || !strings.Contains(err.Error(), "status 12") {
		t.Fatalf("Round = %v, want status 12 (Unimplemented)", err)
	}
}

// fakeConn gives a tiny client one connection whose other end the test
// writes by hand.
func fakeConn(t *testing.T) (*tinyClient, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	unix.SetsockoptTimeval(fds[1], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	c := newTinyClient(target{network: netUnix}, 1, 2*time.Second)
	c.fds = []int32{int32(fds[0])}
	t.Cleanup(func() { c.Close(); unix.Close(fds[1]) })
	return c, fds[1]
}

func tickReply(stream, round, index uint32) []byte {
	var p [tickPayload]byte
	binary.BigEndian.PutUint32(p[:], round)
	binary.BigEndian.PutUint32(p[4:], index)
	b := wire.AppendFrame(nil, stream, wire.TypeData, 0, p[:])
	return wire.AppendFrame(b, stream, wire.TypeTrailers, wire.FlagEnd, nil)
}

// TestTinyClientFrames feeds the client's reader the frames a server may
// send around a reply: WINDOW, PING (answered), reply metadata, and the
// start of a frame after the TRAILERS, completed in the next round.
func TestTinyClientFrames(t *testing.T) {
	c, peer := fakeConn(t)
	var in []byte
	in = wire.AppendFrame(in, 0, wire.TypeWindow, 0, wire.AppendWindow(nil, 100))
	in = wire.AppendFrame(in, 0, wire.TypePing, 0, []byte("12345678"))
	in = wire.AppendFrame(in, 1, wire.TypeHeaders, 0, nil)
	in = append(in, tickReply(1, 0, 0)...)
	win := wire.AppendFrame(nil, 0, wire.TypeWindow, 0, wire.AppendWindow(nil, 7))
	in = append(in, win[:5]...)
	if err := writeAll(int32(peer), in); err != nil {
		t.Fatal(err)
	}
	if err := c.Round(0); err != nil {
		t.Fatal(err)
	}
	if len(c.left) != 1 {
		t.Fatalf("left = %v, want the 5 bytes after the reply", c.left)
	}

	// What the client sent: the call, then the PING's answer.
	want := appendTick(nil, 1, 0, 0)
	want = wire.AppendFrame(want, 0, wire.TypePing, wire.FlagAck, []byte("12345678"))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(fdReader(peer), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("client sent\n%x\nwant\n%x", got, want)
	}
	_, h, payload, _, err := wire.ParseFrame(got, wire.DefaultMaxFrameSize)
	if err != nil || h.Type != wire.TypeHeaders || h.Stream != 1 {
		t.Fatalf("first frame %v, %v", h, err)
	}
	ch, err := wire.ParseCallHeader(payload)
	if err != nil || string(ch.Method) != tickMethod || ch.Codec != codec.IDRaw || ch.Timeout != 0 {
		t.Fatalf("call header %+v, %v", ch, err)
	}

	// Round 1: the rest of the WINDOW frame, then the reply.
	if err := writeAll(int32(peer), append(win[5:], tickReply(3, 1, 0)...)); err != nil {
		t.Fatal(err)
	}
	if err := c.Round(1); err != nil {
		t.Fatal(err)
	}
	if len(c.left) != 0 {
		t.Fatalf("left = %v, want nothing", c.left)
	}
}

// TestTinyClientBadReplies: each way a reply can be wrong fails the round.
func TestTinyClientBadReplies(t *testing.T) {
	var p [tickPayload]byte
	tests := []struct {
		name  string
		reply []byte
		want  string
	}{
		{"error status", wire.AppendFrame(nil, 1, wire.TypeTrailers, wire.FlagEnd, wire.AppendTrailer(nil, 5, "gone", nil, nil)), "status 5: gone"},
		{"wrong bytes", tickReply(1, 0, 9), "want 0000000000000000"},
		{"no message", wire.AppendFrame(nil, 1, wire.TypeTrailers, wire.FlagEnd, nil), "without a reply message"},
		{"two messages", append(wire.AppendFrame(nil, 1, wire.TypeData, 0, p[:]), tickReply(1, 0, 0)...), "reply"},
		{"goaway", wire.AppendFrame(nil, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, 14, "bye")), "GOAWAY (code 14): bye"},
		{"other stream", tickReply(3, 0, 0), "unexpected frame"},
		{"bad frame", wire.AppendFrame(nil, 0, wire.TypeData, 0, nil), "bad frame"},
		{"closed", nil, "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, peer := fakeConn(t)
			if tt.reply != nil {
				writeAll(int32(peer), tt.reply)
			} else {
				unix.Shutdown(peer, unix.SHUT_WR)
			}
			err := c.Round(0)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Round = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestTinyClientCredit: once the replies add up to half the connection
// window, the next round's request returns the credit first.
func TestTinyClientCredit(t *testing.T) {
	c, peer := fakeConn(t)
	c.credit = creditAt
	writeAll(int32(peer), tickReply(5, 2, 0))
	if err := c.Round(2); err != nil {
		t.Fatal(err)
	}
	want := wire.AppendFrame(nil, 0, wire.TypeWindow, 0, wire.AppendWindow(nil, creditAt))
	want = appendTick(want, 5, 2, 0)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(fdReader(peer), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("client sent %x, want %x", got, want)
	}
	if c.credit != tickPayload {
		t.Fatalf("credit = %d, want %d", c.credit, tickPayload)
	}
}

// fdReader reads from a blocking descriptor.
type fdReader int32

func (fd fdReader) Read(b []byte) (int, error) { return readSome(int32(fd), b) }

//go:build linux

package rpc

import (
	"bytes"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/wire"
)

// TestEventLoopLargeInPlace: large requests, whose payloads the loop reads
// in place, arrive intact however their bytes are split: a frame header
// alone, a chunked message's length prefix cut in two, payloads in odd
// pieces, several calls back to back; a small call still works after.
func TestEventLoopLargeInPlace(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	rs := e.handshake(t)
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	reqs := [][]byte{big(40<<10, 1), big(300<<10, 2), big(20<<10, 3), big(900<<10, 4)} // within the windows: the raw peer grants no credit
	var all []byte
	for i, req := range reqs {
		all = append(all, callFrames(uint32(2*i+1), "Bad.Echo", codec.IDRaw, req)...)
	}
	// Split points: every frame header and length prefix is cut somewhere.
	for off, step := 0, 1; off < len(all); step = step*3%40000 + 5 {
		end := min(len(all), off+step)
		rs.write(all[off:end])
		off = end
		if step%4 == 0 {
			time.Sleep(time.Millisecond) // let the loop see a partial read
		}
	}
	got := awaitAll(t, rs, len(reqs))
	for i, req := range reqs {
		r := got[uint32(2*i+1)]
		if r.trailer.Code != 0 || !bytes.Equal(r.msg, req) {
			t.Fatalf("call %d (%d bytes): status %d %q, reply of %d bytes", i, len(req), r.trailer.Code, r.trailer.Message, len(r.msg))
		}
	}
	rs.call(101, []byte("small after"))
	rs.conn.Close()
	waitConns(t, srv, 0)
	waitCalls(t, srv, 0)
}

// TestEventLoopLargeReplyUnread: a large reply written from the handler's
// memory to a peer that does not read it waits for the socket; when the
// peer goes, the call ends and nothing is left behind.
func TestEventLoopLargeReplyUnread(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	rs := e.handshake(t)
	rs.write(callFrames(1, "Bad.Echo", codec.IDRaw, make([]byte, 900<<10)))
	time.Sleep(50 * time.Millisecond)
	waitCalls(t, srv, 1) // 900 KiB do not fit the socket's buffer
	rs.conn.Close()
	waitConns(t, srv, 0)
	waitCalls(t, srv, 0)
}

// TestEventLoopLargeInPlaceCut: a connection that ends in the middle of a
// payload being read in place ends cleanly: no call left, no connection.
func TestEventLoopLargeInPlaceCut(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	for _, cut := range []int{wire.HeaderSize + 2, wire.HeaderSize + 100, 200 << 10} {
		rs := e.handshake(t)
		b := callFrames(1, "Bad.Echo", codec.IDRaw, make([]byte, 256<<10))
		hdr := len(frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil)))
		rs.write(b[:hdr+cut])
		time.Sleep(5 * time.Millisecond)
		rs.conn.Close()
		waitConns(t, srv, 0)
		waitCalls(t, srv, 0)
	}
}

// awaitAll reads the replies of n calls, which may come interleaved.
func awaitAll(t *testing.T, rs *rawSession, n int) map[uint32]rawReply {
	t.Helper()
	rs.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer rs.conn.SetReadDeadline(time.Time{})
	out := map[uint32]rawReply{}
	asm := map[uint32]*wire.Assembler{}
	for ended := 0; ended < n; {
		h, p, err := rs.r.Next()
		if err != nil {
			t.Fatalf("%d of %d replies: %v", ended, n, err)
		}
		switch h.Type {
		case wire.TypeData:
			if asm[h.Stream] == nil {
				asm[h.Stream] = new(wire.Assembler)
			}
			msg, done, err := asm[h.Stream].Add(h, p)
			if err != nil {
				t.Fatalf("stream %d: %v", h.Stream, err)
			}
			if done {
				out[h.Stream] = rawReply{msg: bytes.Clone(msg)}
			}
		case wire.TypeTrailers:
			tr, err := wire.ParseTrailer(p)
			if err != nil {
				t.Fatalf("stream %d trailers: %v", h.Stream, err)
			}
			tr.Message = bytes.Clone(tr.Message)
			r := out[h.Stream]
			r.trailer = tr
			out[h.Stream] = r
			ended++
		}
	}
	return out
}

// TestEventLoopWidePreface: as in goroutine mode, a client that asks for
// large frames and a large window gets them (up to the session's largest)
// and one that announces the defaults gets the defaults; calls work both
// ways.
func TestEventLoopWidePreface(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	for _, c := range []struct{ ask, want wire.Settings }{
		{wire.Settings{}, wire.Settings{}.WithDefaults()},
		{wire.Settings{MaxFrameSize: 1 << 20, InitialWindow: 8 << 20}, wire.Settings{MaxFrameSize: 512 << 10, InitialWindow: 2 << 20}},
		{wire.Settings{MaxFrameSize: 128 << 10}, wire.Settings{MaxFrameSize: 128 << 10}},
	} {
		conn := e.raw(t)
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(wire.AppendPreface(nil, c.ask)); err != nil {
			t.Fatal(err)
		}
		got, err := wire.ReadPreface(conn)
		if err != nil {
			t.Fatal(err)
		}
		want := c.want.WithDefaults()
		want.MaxFiles = 0
		if got.MaxFrameSize != want.MaxFrameSize || got.InitialWindow != want.InitialWindow {
			t.Errorf("asked %+v: got frames %d window %d, want %d %d", c.ask, got.MaxFrameSize, got.InitialWindow, want.MaxFrameSize, want.InitialWindow)
		}
		conn.SetDeadline(time.Time{})
		rs := &rawSession{t: t, conn: conn, r: frameio.NewReader(conn, c.ask.WithDefaults().MaxFrameSize), peer: got}
		req := make([]byte, 600<<10)
		b := frame(1, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Bad.Echo", codec.IDRaw, 0, nil))
		rs.write(wire.AppendMessage(b, 1, wire.TypeData, wire.FlagEnd, req, got.MaxFrameSize))
		if r := rs.await(1); r.trailer.Code != 0 || !bytes.Equal(r.msg, req) {
			t.Fatalf("asked %+v: status %d %q, reply of %d bytes", c.ask, r.trailer.Code, r.trailer.Message, len(r.msg))
		}
		conn.Close()
	}
	waitConns(t, srv, 0)
}

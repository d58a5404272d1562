package rpc

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// FuzzServerFrames sends arbitrary bytes, after a valid preface, to a
// server with unary handlers that echo, hold until canceled and reply with
// large messages, and a bidirectional stream handler that echoes. Whatever
// the bytes: no handler panics and the server does not; after the client
// hangs up, the server drops the connection, and every call it admitted
// ends and gives back its slot under the limits (a unary call refused for
// a request over MaxMessageSize once kept it for good:
// testdata/fuzz/FuzzServerFrames/chunked-request-over-limit); and a
// well-behaved client on another connection is served after each input.
func FuzzServerFrames(f *testing.F) {
	hdr := func(stream uint32, method string) []byte {
		return frame(stream, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, method, codec.IDRaw, 0, nil))
	}
	window := func(stream, n uint32) []byte {
		return frame(stream, wire.TypeWindow, 0, binary.BigEndian.AppendUint32(nil, n))
	}
	f.Add(callFrames(1, "Bad.Echo", codec.IDRaw, []byte("x")))
	f.Add(append(callFrames(1, "Bad.Big", codec.IDRaw, []byte("200000")), window(0, 1<<20)...))
	f.Add(append(callFrames(1, "Bad.Hold", codec.IDRaw, nil), frame(1, wire.TypeCancel, 0, nil)...))
	f.Add(append(hdr(1, "Bad.Stream"), wire.AppendMessage(nil, 1, wire.TypeData, 0, bytes.Repeat([]byte{5}, 3000), 1024)...))
	f.Add(append(append(hdr(1, "Bad.Stream"), frame(1, wire.TypeData, wire.FlagEnd, []byte("m"))...), hdr(3, "Bad.Echo")...))
	f.Add(append(hdr(1, "Bad.Nope"), frame(0, wire.TypePing, 0, make([]byte, 8))...))
	f.Add(append(hdr(1, "Bad.Echo"), frame(1, wire.TypeData, wire.FlagMore, []byte{0, 0, 0x10, 0, 1, 2})...))
	f.Add(frame(0, wire.TypeGoAway, 0, wire.AppendTrailer(nil, uint32(status.OK), "bye", nil, nil)))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Add(callFrames(1, "Bad.Big", codec.IDRaw, []byte("2000000000"))) // refused by the handler

	srv := newBadServer(&ServerOptions{CallRate: -1})
	HandleBidiStream(srv, "Bad.Stream", func(ctx context.Context, st *Stream[[]byte, []byte]) error {
		var m []byte
		for {
			if err := st.RecvMsg(&m); err != nil {
				return err
			}
			if err := st.Send(&m); err != nil {
				return err
			}
		}
	})
	e := startBad(f, srv)
	good := e.client(f, nil)
	checkServing(f, good, "before")
	f.Fuzz(func(t *testing.T, data []byte) {
		if n := srv.Stats().Calls; n != 0 {
			t.Fatalf("%d calls left over from an earlier input", n)
		}
		rs := e.handshake(t)
		rs.conn.SetWriteDeadline(time.Now().Add(time.Second))
		rs.conn.Write(data) // the server may hang up before reading it all
		// Read what comes back for a moment, so that replies are written
		// and calls run, then hang up.
		rs.conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		buf := make([]byte, 64<<10)
		for {
			if _, err := rs.conn.Read(buf); err != nil {
				break // the deadline, or the server hung up
			}
		}
		rs.conn.Close()
		waitConns(t, srv, 1)
		for deadline := time.Now().Add(2 * time.Second); srv.Stats().Calls != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				var b strings.Builder
				pprof.Lookup("goroutine").WriteTo(&b, 1)
				t.Fatalf("%d calls still in progress after the connection closed; goroutines:\n%s", srv.Stats().Calls, b.String())
			}
		}
		checkServing(t, good, "after")
		if p := srv.Stats().Panics; p != 0 {
			t.Fatalf("%d handler panics", p)
		}
	})
}

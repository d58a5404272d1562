package mux_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// FuzzClientReplies has a server send arbitrary bytes, after the handshake,
// to a client session with two calls open: stream 1, which lent its
// caller's memory for the reply (Stream.RecvInto: small replies are copied
// there, large ones read in place), and stream 3, whose caller receives
// (and so reads the connection for both) while stream 1 is released.
// Whatever the bytes, the session neither panics nor hangs, Release
// returns even while a payload is being read into the lent memory, and
// once it has, that memory is not written, however many of the same bytes
// follow.
func FuzzClientReplies(f *testing.F) {
	reply := func(id uint32, msg []byte) []byte {
		return append(dataFrame(id, 0, msg), trailersFrame(id, codeOK, "")...)
	}
	f.Add(reply(1, []byte("a reply")))
	f.Add(append(reply(3, []byte("other")), reply(1, bytes.Repeat([]byte{7}, 2000))...))
	f.Add(append(firstChunk(1, 3000, bytes.Repeat([]byte{1}, 1000)), dataFrame(1, 0, bytes.Repeat([]byte{2}, 2000))...))
	f.Add(dataFrame(1, 0, bytes.Repeat([]byte{3}, 20<<10))[:9+5000]) // read in place, cut short
	f.Add(append(dataFrame(1, 0, []byte("x")), dataFrame(1, 0, []byte("y"))...))
	f.Add(trailersFrame(1, codeNotFound, "no"))
	f.Add([]byte{0, 0, 0, 5, 9, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, c := rawServer(t, connKinds[1], nil, wire.Settings{MaxFrameSize: 64 << 10, MaxMessageSize: 64 << 10})
		defer raw.close()
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		mem := make([]byte, 32<<10)
		st1, err := c.Open(ctx, mux.Call{Method: "Svc.A", Msg: []byte("a"), End: true, Recv: mem[:0]})
		if err != nil {
			t.Fatal(err)
		}
		st3, err := c.Open(ctx, mux.Call{Method: "Svc.B", Msg: []byte("b"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		awaitCall(raw, st1.ID())
		awaitCall(raw, st3.ID())
		raw.write(data) // fails once the session hung up on bad bytes
		// Stream 3's caller reads, for both streams, while stream 1's is
		// released without receiving: Release must stop a payload being
		// read into its memory.
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			rctx, rcancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer rcancel()
			for {
				b, err := st3.Recv(rctx)
				if err != nil {
					return
				}
				pool.Put(b)
			}
		}()
		time.Sleep(2 * time.Millisecond)
		st1.Release()
		after := bytes.Clone(mem)
		raw.write(data, data)
		<-drained
		st3.Release()
		c.Close()
		if !bytes.Equal(mem, after) {
			t.Fatal("the lent memory was written after Release returned")
		}
	})
}

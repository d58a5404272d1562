package mux_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// TestRecvIntoReadsInPlace lends a caller's memory for replies: one frame,
// chunked, and too small to be read in place. Large replies land in the
// lent memory, whoever reads (the caller itself, with a context that can or
// cannot end, or a background reader while another call waits too); a
// small reply is copied there; one larger than the memory comes in a
// buffer of its own. Over a pipe, whose reads cannot be interrupted, only
// the small reply is lent.
func TestRecvIntoReadsInPlace(t *testing.T) {
	big := bigPayload(300 << 10)
	replies := []struct {
		name    string
		frames  func(id uint32) [][]byte
		want    []byte
		inPlace bool // read in place where reads can be interrupted
		copied  bool // copied into the lent memory on any connection
	}{
		{"one frame", func(id uint32) [][]byte { return [][]byte{dataFrame(id, 0, big[:100<<10])} }, big[:100<<10], true, false},
		{"chunked", func(id uint32) [][]byte {
			return [][]byte{firstChunk(id, 250<<10, big[:100<<10]), dataFrame(id, wire.FlagMore, big[100<<10:200<<10]), dataFrame(id, 0, big[200<<10:250<<10])}
		}, big[:250<<10], true, false},
		{"small", func(id uint32) [][]byte { return [][]byte{dataFrame(id, 0, big[:1000])} }, big[:1000], false, true},
		{"larger than the memory", func(id uint32) [][]byte {
			return [][]byte{firstChunk(id, 300<<10, big[:200<<10]), dataFrame(id, 0, big[200<<10:])}
		}, big, false, false},
	}
	readers := []struct {
		name string
		ctx  func(t *testing.T) context.Context
		busy bool // another call waits meanwhile
	}{
		{"own read", func(t *testing.T) context.Context { return context.Background() }, false},
		{"own interruptible read", func(t *testing.T) context.Context { return testCtx(t) }, false},
		{"background reader", func(t *testing.T) context.Context { return testCtx(t) }, true},
	}
	for _, k := range connKinds {
		for _, rd := range readers {
			for _, rp := range replies {
				t.Run(k.name+"/"+rd.name+"/"+rp.name, func(t *testing.T) {
					raw, c := rawServer(t, k, nil, wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1 << 20})
					ctx := rd.ctx(t)
					var other *mux.Stream
					otherDone := make(chan error, 1)
					if rd.busy {
						var err error
						if other, err = c.Open(ctx, mux.Call{Method: "Svc.Other", Msg: []byte("o"), End: true}); err != nil {
							t.Fatal(err)
						}
						awaitCall(raw, other.ID())
						go func() { otherDone <- recvErr(ctx, other) }()
					}
					st, err := c.Open(ctx, mux.Call{Method: "Svc.Big", Msg: []byte("req"), End: true})
					if err != nil {
						t.Fatal(err)
					}
					awaitCall(raw, st.ID())
					mem := make([]byte, 260<<10)
					st.RecvInto(mem[:10])
					// A pipe's write blocks until the client reads.
					wrote := make(chan error, 1)
					go func() { wrote <- raw.write(append(rp.frames(st.ID()), trailersFrame(st.ID(), codeOK, ""))...) }()
					defer func() {
						if err := <-wrote; err != nil {
							t.Error(err)
						}
					}()
					got, err := st.Recv(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.B, rp.want) {
						t.Fatalf("reply of %d bytes differs from the %d sent", len(got.B), len(rp.want))
					}
					lent := len(got.B) > 0 && &got.B[0] == &mem[0]
					if want := rp.inPlace && k.name == "unix" || rp.copied; lent != want {
						t.Fatalf("reply in the lent memory: %v, want %v", lent, want)
					}
					pool.Put(got)
					if _, err := st.Recv(ctx); err != io.EOF {
						t.Fatalf("after the reply: %v, want io.EOF", err)
					}
					st.Release()
					endOther(t, raw, other, otherDone)
					if err := c.Err(); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// TestRecvIntoReleaseDuringRead gives up calls while their replies are
// being read into the memory they lent, and the server stalls inside the
// payload. Release returns at once, the memory is not written after it
// returns, and the session goes on: the rest of the payload is read
// elsewhere and dropped, and a later call gets its reply.
func TestRecvIntoReleaseDuringRead(t *testing.T) {
	big := bigPayload(200 << 10)
	for _, busy := range []bool{false, true} {
		name := map[bool]string{false: "own read", true: "background reader"}[busy]
		t.Run(name, func(t *testing.T) {
			raw, c := rawServer(t, connKinds[1], nil, wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1 << 20})
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			var other *mux.Stream
			otherDone := make(chan error, 1)
			if busy {
				var err error
				if other, err = c.Open(testCtx(t), mux.Call{Method: "Svc.Other", Msg: []byte("o"), End: true}); err != nil {
					t.Fatal(err)
				}
				awaitCall(raw, other.ID())
				go func() { otherDone <- recvErr(testCtx(t), other) }()
			}
			st, err := c.Open(ctx, mux.Call{Method: "Svc.Big", Msg: []byte("req"), End: true})
			if err != nil {
				t.Fatal(err)
			}
			awaitCall(raw, st.ID())
			mem := make([]byte, 200<<10)
			st.RecvInto(mem)
			f := dataFrame(st.ID(), 0, big)
			cut := wire.HeaderSize + 70<<10
			raw.mustWrite(f[:cut])
			errc := make(chan error, 1)
			go func() {
				_, err := st.Recv(ctx)
				errc <- err
			}()
			time.Sleep(30 * time.Millisecond) // let the reader block inside the payload
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("Recv after cancel = %v, want context.Canceled", err)
			}
			released := make(chan struct{})
			go func() {
				st.Cancel()
				st.Release()
				close(released)
			}()
			select {
			case <-released:
			case <-time.After(5 * time.Second):
				t.Fatal("Release did not return while the reply was stalled inside the lent memory")
			}
			if !bytes.Equal(mem[:70<<10-100], big[:70<<10-100]) {
				t.Fatal("the part of the reply sent was not read into the lent memory")
			}
			snapshot := append([]byte(nil), mem...)
			raw.mustWrite(f[cut:], trailersFrame(1, codeOK, ""))

			// A later call: its reply comes after the rest of the first.
			st2, err := c.Open(testCtx(t), mux.Call{Method: "Svc.Echo", Msg: []byte("again"), End: true})
			if err != nil {
				t.Fatal(err)
			}
			id := st2.ID()
			awaitCall(raw, id)
			want := payload(7, 40<<10)
			raw.mustWrite(dataFrame(id, 0, want), trailersFrame(id, codeOK, ""))
			got, err := st2.Recv(testCtx(t))
			if err != nil || !bytes.Equal(got.B, want) {
				t.Fatalf("call after the released one: %v", err)
			}
			st2.Release()
			endOther(t, raw, other, otherDone)
			if !bytes.Equal(mem, snapshot) {
				t.Fatal("the lent memory was written after Release returned")
			}
			if err := c.Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// awaitCall reads frames on raw up to the call header of stream id.
func awaitCall(raw *rawPeer, id uint32) {
	for {
		if f := raw.expectAny(); f.Type == wire.TypeHeaders && f.Stream == id {
			return
		}
	}
}

// endOther ends the other call a test kept waiting, if any: the server
// finishes it, and its Recv must end with io.EOF.
func endOther(t *testing.T, raw *rawPeer, other *mux.Stream, done <-chan error) {
	t.Helper()
	if other == nil {
		return
	}
	raw.mustWrite(trailersFrame(other.ID(), codeOK, ""))
	if err := <-done; err != io.EOF {
		t.Fatalf("other call: %v", err)
	}
	other.Release()
}

// TestRecvIntoOnce: a stream holds one message in lent memory at most. A
// second offer made while the first message waits unreceived is not used,
// so the first message stays intact.
func TestRecvIntoOnce(t *testing.T) {
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{MaxFrameSize: 256 << 10, InitialWindow: 1 << 20})
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "Svc.Two", Msg: []byte("req"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	awaitCall(raw, st.ID())
	first, second := payload(1, 100<<10), payload(2, 100<<10) // more than the reader's buffer
	mem1, mem2 := make([]byte, 128<<10), make([]byte, 128<<10)
	c.HoldReader() // read messages no one waits for
	defer c.ReleaseReader()
	st.RecvInto(mem1)
	raw.mustWrite(dataFrame(st.ID(), 0, first))
	for deadline := time.Now().Add(testTimeout); st.PendingSize() < 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first message did not arrive")
		}
	}
	st.RecvInto(mem2)
	raw.mustWrite(dataFrame(st.ID(), 0, second), trailersFrame(st.ID(), codeOK, ""))
	for i, want := range [][]byte{first, second} {
		got, err := st.Recv(ctx)
		if err != nil || !bytes.Equal(got.B, want) {
			t.Fatalf("message %d: %v, or its bytes differ", i, err)
		}
		if lent := &got.B[0] == &mem1[0]; lent != (i == 0) {
			t.Fatalf("message %d in the first lent memory: %v", i, lent)
		}
		if &got.B[0] == &mem2[0] {
			t.Fatalf("message %d in the second lent memory", i)
		}
	}
}

// TestRecvIntoRefusedOpen: an Open with Call.Recv refused by MaxStreams gives its
// stream back to the pool without the caller's memory, which the caller
// owns again: the next call on that stream, which offers none, gets its
// reply in memory of its own, and the first caller's is not written.
func TestRecvIntoRefusedOpen(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		raw, c := rawServer(t, k, nil, wire.Settings{MaxStreams: 1})
		ctx := testCtx(t)
		st1, err := c.Open(ctx, mux.Call{Method: "Svc.A", Msg: []byte("a"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		awaitCall(raw, st1.ID())
		mem := bytes.Repeat([]byte{'M'}, 64)
		if _, err := c.Open(ctx, mux.Call{Method: "Svc.B", Msg: []byte("b"), End: true, Recv: mem}); !errors.Is(err, mux.ErrTooManyStreams) {
			t.Fatalf("Open = %v, want ErrTooManyStreams", err)
		}
		st1.Cancel() // out of the table, not released
		st2, err := c.Open(ctx, mux.Call{Method: "Svc.C", Msg: []byte("c"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		awaitCall(raw, st2.ID())
		go raw.write(dataFrame(st2.ID(), 0, []byte("reply to another call")), trailersFrame(st2.ID(), codeOK, ""))
		got, err := st2.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.B) != "reply to another call" || &got.B[0] == &mem[0] {
			t.Errorf("reply %q, in the refused call's memory: %v", got.B, &got.B[0] == &mem[0])
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{'M'}, 64)) {
			t.Errorf("the refused call's memory was written: %q", mem)
		}
		pool.Put(got)
		st2.Release()
		st1.Release()
	})
}

// TestWindowForStreamsNotYetOpen has a server send WINDOW frames for the
// next stream ids, over and over, while callers open calls with their
// memory lent and release them. A frame for a stream the session is just
// registering reaches it before its call header has gone out: the session
// survives, with no data race on the stream's send state (under -race),
// and lent memory is never written after Release.
func TestWindowForStreamsNotYetOpen(t *testing.T) {
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{MaxFrameSize: 64 << 10, MaxStreams: 1000})
	var wmu sync.Mutex
	var last atomic.Uint32 // the highest stream id seen
	write := func(b ...[]byte) {
		wmu.Lock()
		defer wmu.Unlock()
		raw.write(b...)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the server: answer every call
		for f := range raw.frames {
			if f.Type == wire.TypeHeaders {
				last.Store(max(last.Load(), f.Stream))
				write(dataFrame(f.Stream, 0, bytes.Repeat([]byte{'r'}, 1000)), trailersFrame(f.Stream, codeOK, ""))
			}
		}
	})
	wg.Go(func() { // frames for the ids about to be opened
		for {
			select {
			case <-stop:
				return
			default:
			}
			var frames [][]byte
			for k := uint32(1); k <= 8; k++ {
				id := last.Load() + 2*k
				frames = append(frames, wire.AppendFrame(nil, id, wire.TypeWindow, 0, []byte{0, 0, 0, 1}))
			}
			write(frames...)
			time.Sleep(20 * time.Microsecond)
		}
	})
	var cw sync.WaitGroup
	for range 4 {
		cw.Go(func() {
			mem := make([]byte, 4096)
			for i := range 150 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%5)*time.Millisecond)
				st, err := c.Open(ctx, mux.Call{Method: "S.M", Msg: bytes.Repeat([]byte{'q'}, 1024), End: true, Recv: mem[:0]})
				if err != nil {
					cancel()
					t.Errorf("call %d: %v", i, err)
					return
				}
				recvErr(ctx, st)
				st.Release()
				cancel()
				after := bytes.Clone(mem)
				time.Sleep(10 * time.Microsecond)
				if !bytes.Equal(mem, after) {
					t.Errorf("call %d: lent memory written after Release", i)
					return
				}
			}
		})
	}
	cw.Wait()
	close(stop)
	if err := c.Err(); err != nil {
		t.Errorf("session ended: %v", err)
	}
	c.Close()
	raw.close()
	wg.Wait()
}

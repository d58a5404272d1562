package mux_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// TestCancelInterruptsOwnRead cancels a lone caller while it reads its own
// reply, with the reply's frame cut at different points (inside a frame
// header, inside a small payload read through the buffer, inside a large
// chunk read straight into the message). The caller returns at once with
// the context's error, and the session goes on: the rest of the cut frame is
// read by whoever reads next, and a later call gets its reply intact.
func TestCancelInterruptsOwnRead(t *testing.T) {
	const total = 200 << 10
	big := bigPayload(total)
	chunk := 48 << 10
	cases := []struct {
		name       string
		head, rest []byte // the reply to the canceled call, cut in two
	}{
		{"frame header", nil, nil},
		{"small payload", nil, nil},
		{"chunk read in place", nil, nil},
		{"first chunk's length", nil, nil},
		{"first chunk read in place", nil, nil},
	}
	for i := range cases {
		c := &cases[i]
		switch i {
		case 0:
			f := dataFrame(1, wire.FlagEnd, []byte("hello"))
			c.head, c.rest = f[:5], f[5:]
		case 1:
			f := dataFrame(1, wire.FlagEnd, bytes.Repeat([]byte("x"), 3000))
			c.head, c.rest = f[:1000], f[1000:]
		default:
			first := firstChunk(1, total, big[:chunk])
			second := dataFrame(1, wire.FlagMore, big[chunk:2*chunk])
			// Stop inside the second chunk's payload (after the first
			// chunk and the second one's header), inside the first one's
			// length prefix, or inside its payload.
			cut := map[int]int{
				2: len(first) + wire.HeaderSize + 10<<10,
				3: wire.HeaderSize + 2,
				4: wire.HeaderSize + 4 + 10<<10,
			}[i]
			all := append(first, second...)
			for off := 2 * chunk; off < total; off += chunk {
				end, fl := off+chunk, wire.FlagMore
				if end >= total {
					end, fl = total, 0
				}
				all = append(all, dataFrame(1, fl, big[off:end])...)
			}
			c.head, c.rest = all[:cut], all[cut:]
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			st, err := c.Open(ctx, mux.Call{Method: "Svc.Slow", Msg: []byte("req"), End: true})
			if err != nil {
				t.Fatal(err)
			}
			raw.expect(wire.TypeHeaders, st.ID())
			raw.mustWrite(tc.head)
			errc := make(chan error, 1)
			go func() {
				_, err := st.Recv(ctx)
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond) // let Recv block in its read
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Recv after cancel = %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Recv did not return after its context was canceled")
			}
			st.Cancel()
			st.Release()
			raw.mustWrite(tc.rest, trailersFrame(1, codeOK, ""))

			// The next call reads on from where the canceled one stopped.
			ctx2, cancel2 := context.WithCancel(testCtx(t))
			defer cancel2()
			st2, err := c.Open(ctx2, mux.Call{Method: "Svc.Echo", Msg: []byte("again"), End: true})
			if err != nil {
				t.Fatal(err)
			}
			id := st2.ID()
			for {
				f := raw.expectAny()
				if f.Type == wire.TypeHeaders && f.Stream == id {
					break
				}
			}
			want := payload(7, 5000)
			raw.mustWrite(dataFrame(id, 0, want), trailersFrame(id, codeOK, ""))
			got, err := st2.Recv(ctx2)
			if err != nil {
				t.Fatalf("call after the canceled one: %v", err)
			}
			if !bytes.Equal(got.B, want) {
				t.Fatalf("call after the canceled one got %d bytes, not the %d sent", len(got.B), len(want))
			}
			st2.Release()
			if err := c.Err(); err != nil {
				t.Fatalf("session ended: %v", err)
			}
		})
	}
}

// TestOwnReadContexts checks how a lone caller's read follows its context
// from call to call: a context used for many calls still interrupts the
// read when it ends, and ending a context used earlier does not interrupt
// a read for another one.
func TestOwnReadContexts(t *testing.T) {
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
	serve := func(st *mux.Stream, reply []byte) {
		t.Helper()
		for {
			f := raw.expectAny()
			if f.Type == wire.TypeHeaders && f.Stream == st.ID() {
				break
			}
		}
		if reply != nil {
			raw.mustWrite(dataFrame(st.ID(), 0, reply), trailersFrame(st.ID(), codeOK, ""))
		}
	}
	call := func(ctx context.Context, reply []byte, late time.Duration) error {
		t.Helper()
		st, err := c.Open(ctx, mux.Call{Method: "Svc.Echo", Msg: []byte("req"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		if late == 0 {
			serve(st, reply)
		} else {
			go func() {
				time.Sleep(late)
				raw.mustWrite(dataFrame(st.ID(), 0, reply), trailersFrame(st.ID(), codeOK, ""))
			}()
		}
		m, err := st.Recv(ctx)
		if err != nil {
			st.Cancel()
			return err
		}
		if !bytes.Equal(m.B, reply) {
			t.Fatalf("reply %q, want %q", m.B, reply)
		}
		return nil
	}

	a, cancelA := context.WithCancel(testCtx(t))
	for i := range 20 {
		if err := call(a, payload(uint64(i), 100), 0); err != nil {
			t.Fatalf("call %d with context a: %v", i, err)
		}
	}
	// A read for context b, with a cancelled meanwhile: not interrupted.
	b, cancelB := context.WithCancel(testCtx(t))
	defer cancelB()
	st, err := c.Open(b, mux.Call{Method: "Svc.Echo", Msg: []byte("req"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	serve(st, nil)
	got := make(chan error, 1)
	go func() {
		_, err := st.Recv(b)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancelA()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Recv with context b returned when a was cancelled: %v", err)
	default:
	}
	want := payload(99, 100)
	raw.mustWrite(dataFrame(st.ID(), 0, want), trailersFrame(st.ID(), codeOK, ""))
	if err := <-got; err != nil {
		t.Fatalf("Recv with context b: %v", err)
	}
	st.Release()

	// b, used for several calls, then cancelled while a read waits.
	for i := range 5 {
		if err := call(b, payload(uint64(i), 10), 0); err != nil {
			t.Fatalf("call %d with context b: %v", i, err)
		}
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancelB()
	}()
	st, err = c.Open(b, mux.Call{Method: "Svc.Echo", Msg: []byte("req"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	serve(st, nil)
	if _, err := st.Recv(b); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv when b was cancelled = %v, want context.Canceled", err)
	}
	st.Cancel()
	st.Release()
	// A context that has ended fails at once; a new one works.
	if err := call(b, []byte("x"), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a cancelled context = %v", err)
	}
	if err := call(testCtx(t), []byte("fine"), 10*time.Millisecond); err != nil {
		t.Fatalf("call after the cancellations: %v", err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// TestServerOpenedStream checks that a client refuses a stream the server
// opens: 12 for a call, 3 for a malformed call header, a connection error
// for an id not above the last one; the client's own calls go on.
func TestServerOpenedStream(t *testing.T) {
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "Svc.Echo", Msg: []byte("req"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	raw.expect(wire.TypeHeaders, st.ID())
	raw.mustWrite(headersFrame(2, wire.FlagEnd, "Cb.Notify"),
		wire.AppendFrame(nil, 4, wire.TypeHeaders, wire.FlagEnd, []byte{0, 0, 0}),
		dataFrame(st.ID(), 0, []byte("reply")), trailersFrame(st.ID(), codeOK, ""))
	if m, err := st.Recv(ctx); err != nil || string(m.B) != "reply" {
		t.Fatalf("Recv: %v", err)
	}
	for _, want := range []struct {
		id   uint32
		code wire.Code
	}{{2, codeUnimplemented}, {4, codeInvalidArgument}} {
		f := raw.expectAny()
		for f.Type != wire.TypeTrailers {
			f = raw.expectAny() // the call's DATA
		}
		tr, err := wire.ParseTrailer(f.P)
		if f.Stream != want.id || err != nil || wire.Code(tr.Code) != want.code {
			t.Fatalf("TRAILERS on stream %d: %+v %v, want code %v on stream %d", f.Stream, tr, err, want.code, want.id)
		}
	}
	if err := c.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
	raw.mustWrite(headersFrame(4, wire.FlagEnd, "Cb.Notify"))
	if _, err := c.Ping(ctx); err == nil {
		t.Fatal("stream 4 opened twice: the session is still up")
	}
	var pe *wire.ProtocolError
	if err := waitDone(t, c); !errors.As(err, &pe) {
		t.Fatalf("session ended with %T %v, want *wire.ProtocolError", err, err)
	}
}

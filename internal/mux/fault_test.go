package mux_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// TestProtocolViolations drives a server session with a hand-written client
// that breaks the protocol. Each violation must end the session with a
// *ProtocolError, close the connection and leave no goroutine behind.
func TestProtocolViolations(t *testing.T) {
	const small = 1 << 10 // window and frame size of the server in some cases
	smallSet := wire.Settings{InitialWindow: small, MaxFrameSize: small}
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	tests := []struct {
		name   string
		set    wire.Settings // the server's
		frames func() [][]byte
	}{
		{"unknown frame type", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendFrame(nil, 0, wire.Type(0x7f), 0, nil)}
		}},
		{"unknown frame type on a stream", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), wire.AppendFrame(nil, 1, wire.Type(0x20), 0, []byte("x"))}
		}},
		{"frame over MaxFrameSize", smallSet, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), dataFrame(1, 0, make([]byte, small+1))}
		}},
		{"frame header over MaxFrameSize, no payload", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendHeader(nil, wire.Header{Length: 16 << 20, Stream: 1, Type: wire.TypeData})}
		}},
		{"even stream id from client", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(2, 0, "m")}
		}},
		{"decreasing stream id", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(5, 0, "m"), headersFrame(3, 0, "m")}
		}},
		{"reused stream id", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), headersFrame(1, 0, "m")}
		}},
		{"stream frame on stream 0", wire.Settings{}, func() [][]byte {
			return [][]byte{dataFrame(0, 0, []byte("x"))}
		}},
		{"PING on a stream", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), wire.AppendFrame(nil, 1, wire.TypePing, 0, make([]byte, 8))}
		}},
		{"PING of 4 bytes", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendFrame(nil, 0, wire.TypePing, 0, make([]byte, 4))}
		}},
		{"WINDOW with zero increment", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendFrame(nil, 0, wire.TypeWindow, 0, u32(0))}
		}},
		{"WINDOW over 2^31-1", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendFrame(nil, 0, wire.TypeWindow, 0, u32(1<<31))}
		}},
		{"GOAWAY too short", wire.Settings{}, func() [][]byte {
			return [][]byte{wire.AppendFrame(nil, 0, wire.TypeGoAway, 0, []byte{0, 1})}
		}},
		{"DATA exceeding the stream window", smallSet, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), dataFrame(1, 0, make([]byte, small)), dataFrame(1, 0, []byte{1})}
		}},
		{"DATA exceeding the connection window", smallSet, func() [][]byte {
			var fs [][]byte
			for id := uint32(1); id <= 2*17; id += 2 { // 17 full stream windows: one more than the connection's
				fs = append(fs, headersFrame(id, 0, "m"), dataFrame(id, 0, make([]byte, small)))
			}
			return fs
		}},
		{"DATA after the end of the stream", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, wire.FlagEnd, "m"), dataFrame(1, 0, []byte("x"))}
		}},
		{"DATA after a message with FlagEnd", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), dataFrame(1, wire.FlagEnd, []byte("x")), dataFrame(1, 0, []byte("y"))}
		}},
		{"chunked message shorter than declared", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 3000, make([]byte, 1000)), dataFrame(1, 0, make([]byte, 500))}
		}},
		{"chunked message longer than declared", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 1500, make([]byte, 1000)), dataFrame(1, 0, make([]byte, 1000))}
		}},
		{"chunked message ended by FlagEnd with FlagMore", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 3000, make([]byte, 1000)), dataFrame(1, wire.FlagMore|wire.FlagEnd, make([]byte, 500))}
		}},
		{"chunked message completed by a frame with FlagMore", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 1500, make([]byte, 1000)), dataFrame(1, wire.FlagMore, make([]byte, 500))}
		}},
		{"chunked message with an empty continuation frame", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 1500, make([]byte, 1000)), dataFrame(1, wire.FlagMore, nil)}
		}},
		{"chunked message that fits its first frame", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 10, make([]byte, 100))}
		}},
		{"chunked message without its length", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), dataFrame(1, wire.FlagMore, []byte{0, 1})}
		}},
		{"TRAILERS inside a chunked message", wire.Settings{}, func() [][]byte {
			return [][]byte{headersFrame(1, 0, "m"), firstChunk(1, 3000, make([]byte, 1000)), trailersFrame(1, codeOK, "")}
		}},
	}
	forKinds(t, func(t *testing.T, k connKind) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ignore := goleak.IgnoreCurrent()
				t.Cleanup(func() { goleak.VerifyNone(t, ignore, ignoreWatchdog) })
				ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { <-ctx.Done() })
				raw, s := rawClient(t, k, ts.config(tt.set), wire.Settings{})
				// On a pipe a write fails once the session gives up reading.
				go raw.write(tt.frames()...)
				raw.expectClosed()
				err := waitDone(t, s)
				var pe *wire.ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("session ended with %T %v, want *wire.ProtocolError", err, err)
				}
				if pe.Reason == "" {
					t.Fatal("ProtocolError without a reason")
				}
				s.Close()
			})
		}
	})
}

// TestMalformedCallHeader checks that a call header that does not decode
// refuses only its stream, with InvalidArgument, and the session stays up.
func TestMalformedCallHeader(t *testing.T) {
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"truncated method", []byte{5, 'a', 'b'}},
		{"empty method", []byte{0, 0, 0}},
		{"missing codec", []byte{1, 'm'}},
		{"truncated timeout", []byte{1, 'm', 0, 0x80}},
		{"metadata count too large", []byte{1, 'm', 0, 0, 9, 1, 'k'}},
		{"metadata trailing bytes", []byte{1, 'm', 0, 0, 1, 1, 'k', 1, 'v', 0xff}},
	}
	forKinds(t, func(t *testing.T, k connKind) {
		ts := newServer(t, echoUnary)
		raw, s := rawClient(t, k, ts.config(wire.Settings{}), wire.Settings{})
		id := uint32(1)
		for _, tt := range tests {
			raw.mustWrite(wire.AppendFrame(nil, id, wire.TypeHeaders, 0, tt.payload), dataFrame(id, wire.FlagEnd, []byte("ignored")))
			code, msg := raw.expectTrailer(id)
			if code != codeInvalidArgument {
				t.Fatalf("%s: trailer %v %q, want InvalidArgument", tt.name, code, msg)
			}
			id += 2
		}
		raw.mustWrite(headersFrame(id, 0, "echo"), dataFrame(id, wire.FlagEnd, []byte("fine")))
		if f := raw.expect(wire.TypeData, id); string(f.P) != "fine" {
			t.Fatalf("echo %q", f.P)
		}
		if code, _ := raw.expectTrailer(id); code != codeOK {
			t.Fatalf("valid call after malformed ones: %v", code)
		}
		if got := ts.opened.Load(); got != 1 {
			t.Fatalf("OnStream ran %d times, want once (for the valid call)", got)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("session ended: %v", err)
		}
	})
}

// TestReceiverMessageLimit checks that a receiver enforces its own
// MaxMessageSize against a peer that ignores it: a server answers the stream
// with ResourceExhausted, a client cancels it; its Recv fails with
// *wire.MessageTooLargeError; and the session stays up.
func TestReceiverMessageLimit(t *testing.T) {
	const limit = 1000
	set := wire.Settings{MaxMessageSize: limit}
	isTooLarge := func(err error) bool {
		var mt *wire.MessageTooLargeError
		return errors.As(err, &mt) && mt.Limit == limit
	}
	// Each case writes an over-limit message on stream id.
	cases := []struct {
		name   string
		frames func(id uint32) [][]byte
	}{
		{"chunked", func(id uint32) [][]byte {
			return [][]byte{firstChunk(id, 5000, make([]byte, 1000)), dataFrame(id, wire.FlagMore, make([]byte, 2000)), dataFrame(id, 0, make([]byte, 2000))}
		}},
		{"one frame", func(id uint32) [][]byte {
			return [][]byte{dataFrame(id, 0, make([]byte, 2*limit))}
		}},
	}
	for _, tc := range cases {
		t.Run("server/"+tc.name, func(t *testing.T) {
			type recvResult struct {
				n   int
				err error
			}
			received := make(chan recvResult, 1)
			ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
				b, err := st.Recv(ctx)
				if err != nil {
					received <- recvResult{0, err}
					return
				}
				received <- recvResult{len(b.B), nil}
				pool.Put(b)
				st.Finish(ctx, mux.Reply{Code: codeOK, Message: "accepted"})
			})
			raw, s := rawClient(t, connKinds[1], ts.config(set), wire.Settings{})
			raw.mustWrite(headersFrame(1, 0, "upload"))
			raw.mustWrite(tc.frames(1)...)
			code, msg := raw.expectTrailer(1)
			if code != codeResourceExhausted {
				t.Errorf("over the limit: trailer %v %q, want ResourceExhausted", code, msg)
			}
			if r := <-received; !isTooLarge(r.err) {
				t.Errorf("over the limit: server Recv = %d bytes, %v; want *wire.MessageTooLargeError", r.n, r.err)
			}
			raw.ping(7)
			raw.mustWrite(headersFrame(3, 0, "upload"), dataFrame(3, wire.FlagEnd, make([]byte, limit)))
			if code, msg := raw.expectTrailer(3); code != codeOK {
				t.Errorf("a message of exactly the limit: %v %q", code, msg)
			}
			if r := <-received; r.err != nil || r.n != limit {
				t.Errorf("a message of exactly the limit: Recv = %d bytes, %v", r.n, r.err)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("session ended: %v", err)
			}
			// OnReset told the work behind stream 1 (which may be waiting
			// for the message, as a unary call is), and only stream 1.
			ts.mu.Lock()
			resets := slices.Clone(ts.resets)
			ts.mu.Unlock()
			if len(resets) != 1 || !isTooLarge(resets[0]) {
				t.Errorf("OnReset calls: %v, want one with *wire.MessageTooLargeError", resets)
			}
		})
		t.Run("client/"+tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			raw, c := rawServer(t, connKinds[1], &mux.Config{Settings: set}, wire.Settings{})
			st, err := c.Open(ctx, mux.Call{Method: "download", End: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			raw.expect(wire.TypeHeaders, st.ID())
			raw.mustWrite(tc.frames(st.ID())...)
			raw.mustWrite(trailersFrame(st.ID(), codeOK, ""))
			if err := recvErr(ctx, st); !isTooLarge(err) {
				t.Errorf("client Recv = %v, want *wire.MessageTooLargeError", err)
			}
			// Two pings one after the other: the second is written after
			// the first was answered, and so after everything the client
			// wrote while handling the oversized message.
			pingErr := make(chan error, 1)
			go func() {
				var err error
				for range 2 {
					if _, err = c.Ping(ctx); err != nil {
						break
					}
				}
				pingErr <- err
			}()
			canceled := false
			for pings := 0; pings < 2; {
				f := raw.expectAny()
				switch {
				case f.Type == wire.TypeCancel && f.Stream == st.ID():
					canceled = true
				case f.Type == wire.TypePing:
					raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, f.P))
					pings++
				}
			}
			if err := <-pingErr; err != nil {
				t.Fatalf("session broken: %v", err)
			}
			if !canceled {
				t.Errorf("the client did not CANCEL stream %d", st.ID())
			}
		})
	}
}

// TestConnectionLoss checks that when the connection drops, every pending
// Recv fails at once with *ConnError, messages received before the loss are
// still delivered first, and the server's OnReset runs for every stream.
func TestConnectionLoss(t *testing.T) {
	const streams = 64
	forKinds(t, func(t *testing.T, k connKind) {
		for _, side := range []string{"client", "server"} {
			t.Run("closed by "+side, func(t *testing.T) {
				ctx := testCtx(t)
				sent := make(chan struct{})
				ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) }).
					handle("three", func(ctx context.Context, st *mux.Stream, c callInfo) {
						for i := range 3 {
							if err := st.Send(ctx, []byte{byte(i)}, false); err != nil {
								t.Error(err)
							}
						}
						close(sent)
						recvErr(ctx, st)
					})
				ts.resetCh = make(chan error, streams+1)
				cc, sc := k.pair(t)
				c, s := handshake(t, cc, sc, nil, ts.config(wire.Settings{}))

				// Streams waiting in Recv: the session reads while they wait.
				var wg sync.WaitGroup
				errs := make(chan error, streams)
				opened := make(chan struct{}, streams)
				for i := range streams {
					st, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte{byte(i)}})
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						opened <- struct{}{}
						err := recvErr(ctx, st)
						st.Release() // at once, while the session is failing the others
						errs <- err
					})
				}
				for range streams {
					<-opened
				}
				three, err := c.Open(ctx, mux.Call{Method: "three"})
				if err != nil {
					t.Fatal(err)
				}
				<-sent
				// The PING is answered after the three messages and every
				// stream's HEADERS were handled: once it returns, the server
				// has opened every stream and the client holds the messages.
				if _, err := c.Ping(ctx); err != nil {
					t.Fatal(err)
				}
				if side == "client" {
					cc.Close()
				} else {
					sc.Close()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					var ce *wire.ConnError
					if !errors.As(err, &ce) {
						t.Fatalf("pending Recv = %v, want *ConnError", err)
					}
				}
				for i := range 3 {
					b, err := three.Recv(ctx)
					if err != nil {
						t.Fatalf("message %d received before the loss: %v", i, err)
					}
					if len(b.B) != 1 || b.B[0] != byte(i) {
						t.Fatalf("message %d = %v", i, b.B)
					}
					pool.Put(b)
				}
				var ce *wire.ConnError
				if _, err := three.Recv(ctx); !errors.As(err, &ce) {
					t.Fatalf("Recv after the delivered messages = %v, want *ConnError", err)
				}
				three.Release()
				if _, err := c.Open(ctx, mux.Call{Method: "hold", End: true}); !errors.As(err, &ce) {
					t.Fatalf("Open after the loss = %v, want *ConnError", err)
				}
				if err := waitDone(t, s); !errors.As(err, &ce) {
					t.Fatalf("server session ended with %v, want *ConnError", err)
				}
				for range streams + 1 {
					select {
					case err := <-ts.resetCh:
						if !errors.As(err, &ce) {
							t.Fatalf("OnReset error = %v, want *ConnError", err)
						}
					case <-time.After(testTimeout):
						t.Fatal("OnReset not called for every stream")
					}
				}
			})
		}
	})
}

// TestCancelWhileDataFlows cancels and releases client streams while the
// server is still sending on them, so that frames for a stream race with its
// release and reuse. Run with -race.
func TestCancelWhileDataFlows(t *testing.T) {
	const goroutines, rounds = 8, 50
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			msg := make([]byte, 512)
			for st.Send(ctx, msg, false) == nil {
			}
		})
		c, s := newPair(t, k, &mux.Config{Settings: wire.Settings{InitialWindow: 16 << 10}}, ts.config(wire.Settings{}))
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					st, err := c.Open(ctx, mux.Call{Method: "flood"})
					if err != nil {
						t.Error(err)
						return
					}
					b, err := st.Recv(ctx)
					if err != nil {
						t.Error(err)
						st.Release()
						return
					}
					pool.Put(b)
					st.Cancel()
					st.Release()
				}
			})
		}
		wg.Wait()
		if _, err := c.Ping(ctx); err != nil {
			t.Fatalf("session broken: %v (server: %v)", err, s.Err())
		}
	})
}

// TestSequentialCallsWithOneStreamSlot makes calls one after another against
// a server that accepts one concurrent stream: a call the client starts after
// the previous one ended must never be refused as one too many.
func TestSequentialCallsWithOneStreamSlot(t *testing.T) {
	const calls = 2000
	ctx := testCtx(t)
	ts := newServer(t, echoUnary)
	c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{MaxStreams: 1}))
	refused := 0
	for i := range calls {
		r, err := call(ctx, c, "echo", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if r.code == codeResourceExhausted {
			refused++
		} else if r.code != codeOK {
			t.Fatalf("call %d: %v %q", i, r.code, r.message)
		}
	}
	if refused > 0 {
		t.Fatalf("%d of %d sequential calls were refused as over the 1-stream limit: the server counts a stream "+
			"(NumStreams, MaxStreams) until after its trailers are written, so the client can open the next one first", refused, calls)
	}
}

// TestUnknownStreamData checks that DATA and CANCEL for streams the session
// does not know (never opened, or already finished) are ignored.
func TestUnknownStreamData(t *testing.T) {
	ts := newServer(t, echoUnary)
	raw, s := rawClient(t, connKinds[1], ts.config(wire.Settings{}), wire.Settings{})
	raw.mustWrite(headersFrame(1, 0, "echo"), dataFrame(1, wire.FlagEnd, []byte("a")))
	raw.expect(wire.TypeData, 1)
	raw.expectTrailer(1)
	raw.mustWrite(
		dataFrame(1, 0, []byte("late")),   // finished stream
		dataFrame(99, 0, []byte("never")), // never opened
		wire.AppendFrame(nil, 1, wire.TypeCancel, 0, nil),
		wire.AppendFrame(nil, 99, wire.TypeCancel, 0, nil),
		wire.AppendFrame(nil, 99, wire.TypeWindow, 0, binary.BigEndian.AppendUint32(nil, 100)),
	)
	raw.ping(3)
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// TestClientRejectsBadServerFrames checks the client side against a server
// that breaks the protocol.
func TestClientRejectsBadServerFrames(t *testing.T) {
	tests := []struct {
		name   string
		frames func(id uint32) [][]byte
	}{
		{"malformed trailers", func(id uint32) [][]byte {
			return [][]byte{wire.AppendFrame(nil, id, wire.TypeTrailers, wire.FlagEnd, []byte{0x80})}
		}},
		{"malformed reply metadata", func(id uint32) [][]byte {
			return [][]byte{wire.AppendFrame(nil, id, wire.TypeHeaders, 0, []byte{5, 1})}
		}},
		{"DATA after trailers", func(id uint32) [][]byte {
			return [][]byte{trailersFrame(id, codeOK, ""), dataFrame(id, 0, []byte("x"))}
		}},
		{"DATA over the stream window", func(id uint32) [][]byte {
			return [][]byte{dataFrame(id, 0, make([]byte, 1<<10)), dataFrame(id, 0, []byte("x"))}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, ignore, ignoreWatchdog) })
			ctx := testCtx(t)
			raw, c := rawServer(t, connKinds[1], &mux.Config{Settings: wire.Settings{InitialWindow: 1 << 10}}, wire.Settings{})
			st, err := c.Open(ctx, mux.Call{Method: "m", End: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			raw.expect(wire.TypeHeaders, st.ID())
			// A ping the raw peer never answers keeps the client reading,
			// without the application consuming (and so crediting) data.
			go c.Ping(ctx)
			go raw.write(tt.frames(st.ID())...)
			var pe *wire.ProtocolError
			if err := waitDone(t, c); !errors.As(err, &pe) {
				t.Fatalf("client session ended with %v, want *ProtocolError", err)
			}
			recvErr(ctx, st) // returns at once: the session has ended
			raw.expectClosed()
		})
	}
}

// TestOversizedFrameFromServer checks that the client enforces its own
// MaxFrameSize.
func TestOversizedFrameFromServer(t *testing.T) {
	ctx := testCtx(t)
	raw, c := rawServer(t, connKinds[1], &mux.Config{Settings: wire.Settings{MaxFrameSize: 1 << 10}}, wire.Settings{})
	st, err := c.Open(ctx, mux.Call{Method: "m", End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	raw.expect(wire.TypeHeaders, st.ID())
	go raw.write(dataFrame(st.ID(), 0, make([]byte, 1<<10+1)))
	recvErr(ctx, st)
	var pe *wire.ProtocolError
	if err := waitDone(t, c); !errors.As(err, &pe) {
		t.Fatalf("session ended with %v, want *ProtocolError", err)
	}
	if !bytes.Contains([]byte(pe.Reason), []byte("exceeds the limit")) {
		t.Fatalf("reason %q does not name the frame size limit", pe.Reason)
	}
}

// TestProtocolErrorWithUnresponsivePeer breaks the protocol from a peer that
// then neither reads nor closes the connection: the session must still end
// (its last GOAWAY cannot be written) and Close must return.
func TestProtocolErrorWithUnresponsivePeer(t *testing.T) {
	cc, sc := net.Pipe()
	defer cc.Close()
	type result struct {
		s   *mux.Session
		err error
	}
	started := make(chan result, 1)
	go func() {
		s, err := mux.Server(sc, newServer(t, nil).config(wire.Settings{}))
		started <- result{s, err}
	}()
	if _, err := cc.Write(wire.AppendPreface(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadPreface(cc); err != nil {
		t.Fatal(err)
	}
	r := <-started
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Returns once the session has read the frame; nothing reads after.
	if _, err := cc.Write(wire.AppendFrame(nil, 0, wire.Type(0x7f), 0, nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.s.Done():
	case <-time.After(3 * time.Second):
		// Close would block forever as well; leave the session be.
		t.Fatal("session still up 3s after a protocol violation from a peer that does not read: " +
			"the GOAWAY written on the way out failed, and the writer's error callback re-entered the " +
			"session's close (sync.Once inside itself): the reader goroutine is stuck for good")
	}
	var pe *wire.ProtocolError
	if err := r.s.Err(); !errors.As(err, &pe) {
		t.Fatalf("session ended with %v, want *ProtocolError", err)
	}
	r.s.Close()
}

// TestPipelinedCallsRefused opens several calls from one goroutine before
// reading any reply, against a server that refuses each one from OnStream
// (on its reader goroutine, as a server refuses unknown methods or calls over
// a limit). Every call must end with the refusal. Over a pipe every write
// waits for the peer to read.
func TestPipelinedCallsRefused(t *testing.T) {
	const calls = 20
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		scfg := &mux.Config{OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			st.Refuse(codeResourceExhausted, "over the limit")
		}}
		c, _ := newPair(t, k, nil, scfg)
		var streams []*mux.Stream
		for i := range calls {
			st, err := c.Open(ctx, mux.Call{Method: "m", Msg: []byte{byte(i)}, End: true})
			if err != nil {
				t.Fatalf("Open %d: %v", i, err)
			}
			defer st.Release()
			streams = append(streams, st)
		}
		for i, st := range streams {
			r, err := collect(ctx, st)
			if err != nil || r.code != codeResourceExhausted {
				t.Fatalf("call %d: %v, %v", i, r.code, err)
			}
		}
	})
}

package mux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

func TestUnaryCall(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		wantMD := []string{"k1", "v1", "k2", ""}
		ts := newServer(t, nil).
			handle("meta", func(ctx context.Context, st *mux.Stream, c callInfo) {
				b, err := st.Recv(ctx)
				if err != nil {
					st.Refuse(codeInternal, err.Error())
					return
				}
				defer pool.Put(b)
				if c.Codec != 7 || c.Timeout != 1500*time.Millisecond || !slices.Equal(c.MD, wantMD) {
					st.Finish(ctx, mux.Reply{Code: codeInvalidArgument, Message: fmt.Sprintf("call header %+v", c)})
					return
				}
				if _, err := st.Recv(ctx); err != io.EOF {
					st.Finish(ctx, mux.Reply{Code: codeInvalidArgument, Message: fmt.Sprintf("second Recv: %v, want EOF", err)})
					return
				}
				st.Finish(ctx, mux.Reply{Header: []string{"h", "1"}, Msg: append([]byte("re:"), b.B...), HasMsg: true, Code: codeOK, Trailer: []string{"t", "2"}})
			}).
			handle("fail", func(ctx context.Context, st *mux.Stream, c callInfo) {
				st.Finish(ctx, mux.Reply{Code: codeNotFound, Message: "no such key", Details: [][]byte{[]byte("d1"), []byte("d2")}})
			})
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))

		st, err := c.Open(ctx, mux.Call{Method: "meta", Codec: 7, Timeout: 1500 * time.Millisecond, Metadata: wantMD, Msg: []byte("ping"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.ID()%2 != 1 {
			t.Errorf("client stream id %d is even", st.ID())
		}
		r, err := collect(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if r.code != codeOK || len(r.msgs) != 1 || string(r.msgs[0]) != "re:ping" {
			t.Fatalf("reply: code %v %q, messages %q", r.code, r.message, r.msgs)
		}
		if !slices.Equal(r.header, []string{"h", "1"}) || !slices.Equal(r.trailer, []string{"t", "2"}) {
			t.Fatalf("reply header %q, trailer %q", r.header, r.trailer)
		}
		if _, err := st.Recv(ctx); err != io.EOF {
			t.Fatalf("Recv after the end = %v, want io.EOF", err)
		}
		st.Release()

		st, err = c.Open(ctx, mux.Call{Method: "fail", End: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(ctx); err != io.EOF {
			t.Fatalf("Recv = %v, want io.EOF", err)
		}
		p, ok := st.Trailer()
		if !ok {
			t.Fatal("no trailer")
		}
		tr, err := wire.ParseTrailer(p)
		if err != nil {
			t.Fatal(err)
		}
		details, err := wire.ParseDetails(tr.Details)
		if err != nil {
			t.Fatal(err)
		}
		if wire.Code(tr.Code) != codeNotFound || string(tr.Message) != "no such key" || len(details) != 2 || string(details[1]) != "d2" {
			t.Fatalf("trailer: code %d %q details %q", tr.Code, tr.Message, details)
		}
		if _, ok := st.Header(); ok {
			t.Fatal("Header reported a reply header the server did not send")
		}
		st.Release()

		r, err = call(ctx, c, "nope", []byte("x"))
		if err != nil || r.code != codeUnimplemented {
			t.Fatalf("unknown method: %+v, %v", r, err)
		}
		if n := c.NumStreams(); n != 0 {
			t.Fatalf("client NumStreams = %d after every stream was released", n)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("server session ended: %v", err)
		}
	})
}

// TestConcurrentStreams runs many concurrent calls on one session and checks
// every reply byte for byte, and that stream ids are odd and increase in the
// order the server sees them.
func TestConcurrentStreams(t *testing.T) {
	const goroutines, calls = 64, 100
	forKinds(t, func(t *testing.T, k connKind) {
		for _, mode := range []string{"goroutine", "inline"} {
			t.Run(mode, func(t *testing.T) {
				var scfg *mux.Config
				var ids func() []uint32
				if mode == "goroutine" {
					ts := newServer(t, echoUnary)
					scfg, ids = ts.config(wire.Settings{}), ts.streamIDs
				} else {
					scfg, ids = inlineEchoConfig()
				}
				c, s := newPair(t, k, nil, scfg)
				var wg sync.WaitGroup
				errs := make(chan error, goroutines)
				for g := range goroutines {
					// Half the callers use a context that cannot be
					// canceled, with which a client reads its own replies.
					ctx := context.Background()
					if g%2 == 1 {
						ctx = testCtx(t)
					}
					wg.Go(func() {
						for i := range calls {
							msg := payload(uint64(g*calls+i), (g*131+i*977)%5000)
							if err := unaryEcho(ctx, c, "echo", msg); err != nil {
								errs <- fmt.Errorf("goroutine %d, call %d: %w", g, i, err)
								return
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				got := ids()
				if len(got) != goroutines*calls {
					t.Fatalf("server saw %d streams, want %d", len(got), goroutines*calls)
				}
				for i, id := range got {
					if id%2 != 1 || (i > 0 && id <= got[i-1]) {
						t.Fatalf("stream id %d follows %d: ids must be odd and increase", id, got[max(i-1, 0)])
					}
				}
				if c.NumStreams() != 0 {
					t.Fatalf("client NumStreams = %d; want 0", c.NumStreams())
				}
				if err := s.Err(); err != nil {
					t.Fatalf("server session ended: %v", err)
				}
			})
		}
	})
}

func TestStreamIDs(t *testing.T) {
	ctx := testCtx(t)
	ts := newServer(t, echoUnary)
	c, _ := newPair(t, connKinds[0], nil, ts.config(wire.Settings{}))
	var want []uint32
	for i := range 10 {
		st, err := c.Open(ctx, mux.Call{Method: "echo", Msg: []byte{byte(i)}, End: true})
		if err != nil {
			t.Fatal(err)
		}
		if st.ID() != uint32(2*i+1) {
			t.Errorf("stream %d has id %d, want %d", i, st.ID(), 2*i+1)
		}
		want = append(want, st.ID())
		if _, err := collect(ctx, st); err != nil {
			t.Fatal(err)
		}
		st.Release()
	}
	if got := ts.streamIDs(); !slices.Equal(got, want) {
		t.Fatalf("server saw ids %v, client opened %v", got, want)
	}
}

// TestMessageSizes sends messages around the frame size and larger than it,
// in both directions, as single calls and all in order on one stream.
func TestMessageSizes(t *testing.T) {
	configs := []struct {
		name string
		set  wire.Settings
	}{
		{"64KiB frames", wire.Settings{MaxMessageSize: 8 << 20}},
		{"1KiB frames", wire.Settings{MaxFrameSize: 1 << 10, MaxMessageSize: 8 << 20}},
	}
	forKinds(t, func(t *testing.T, k connKind) {
		for _, cf := range configs {
			t.Run(cf.name, func(t *testing.T) {
				ctx := testCtx(t)
				f := int(cf.set.WithDefaults().MaxFrameSize)
				sizes := []int{0, 1, 100, f - 5, f - 4, f - 3, f - 1, f, f + 1, f + 4, 2*f - 4, 2 * f, 3*f + 7, 5 << 20}
				ts := newServer(t, echoUnary).handle("stream", echoStream)
				c, _ := newPair(t, k, &mux.Config{Settings: cf.set}, ts.config(cf.set))
				for i, n := range sizes {
					if err := unaryEcho(ctx, c, "echo", payload(uint64(i), n)); err != nil {
						t.Fatalf("%d bytes: %v", n, err)
					}
				}

				st, err := c.Open(ctx, mux.Call{Method: "stream"})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Release()
				sendErr := make(chan error, 1)
				go func() {
					for i, n := range sizes {
						if err := st.Send(ctx, payload(uint64(100+i), n), i == len(sizes)-1); err != nil {
							sendErr <- fmt.Errorf("Send of %d bytes: %w", n, err)
							return
						}
					}
					sendErr <- nil
				}()
				r, err := collect(ctx, st)
				if err != nil {
					t.Fatal(err)
				}
				if err := <-sendErr; err != nil {
					t.Fatal(err)
				}
				if len(r.msgs) != len(sizes) {
					t.Fatalf("stream: got %d messages back, want %d", len(r.msgs), len(sizes))
				}
				for i, n := range sizes {
					if !bytes.Equal(r.msgs[i], payload(uint64(100+i), n)) {
						t.Fatalf("stream: message %d (%d bytes) came back as %d different bytes", i, n, len(r.msgs[i]))
					}
				}
			})
		}
	})
}

// TestMessageTooLargeForPeer checks that a message over the peer's
// MaxMessageSize fails on the sender with *wire.MessageTooLargeError before
// anything is written, and that the stream and session stay usable.
func TestMessageTooLargeForPeer(t *testing.T) {
	const limit = 1000
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		finishErr := make(chan error, 1)
		ts := newServer(t, echoUnary).
			handle("big-reply", func(ctx context.Context, st *mux.Stream, c callInfo) {
				if _, err := st.Recv(ctx); err != nil {
					finishErr <- err
					return
				}
				err := st.Finish(ctx, mux.Reply{Msg: make([]byte, limit+1), HasMsg: true, Code: codeOK})
				finishErr <- err
				if err != nil {
					st.Refuse(codeResourceExhausted, "reply too large")
				}
			})
		cc, sc := k.pair(t)
		counted := &countingConn{Conn: cc}
		set := wire.Settings{MaxMessageSize: limit}
		c, s := handshake(t, counted, sc, &mux.Config{Settings: set}, ts.config(set))
		if got := c.PeerSettings().MaxMessageSize; got != limit {
			t.Fatalf("client sees peer MaxMessageSize %d", got)
		}
		isTooLarge := func(err error, size int) bool {
			var mt *wire.MessageTooLargeError
			return errors.As(err, &mt) && mt.Size == int64(size) && mt.Limit == limit
		}

		before := counted.written.Load()
		if _, err := c.Open(ctx, mux.Call{Method: "echo", Msg: make([]byte, limit+1), End: true}); !isTooLarge(err, limit+1) {
			t.Fatalf("Open with %d bytes: %v, want *wire.MessageTooLargeError", limit+1, err)
		}
		if n := counted.written.Load() - before; n != 0 {
			t.Fatalf("Open wrote %d bytes for a message over the peer's limit", n)
		}
		if n := c.NumStreams(); n != 0 {
			t.Fatalf("a failed Open left %d streams open", n)
		}

		st, err := c.Open(ctx, mux.Call{Method: "echo"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		before = counted.written.Load()
		if err := st.Send(ctx, make([]byte, 5<<20), false); !isTooLarge(err, 5<<20) {
			t.Fatalf("Send of 5 MiB: %v, want *wire.MessageTooLargeError", err)
		}
		if n := counted.written.Load() - before; n != 0 {
			t.Fatalf("Send wrote %d bytes for a message over the peer's limit", n)
		}
		msg := payload(1, limit)
		if err := st.Send(ctx, msg, true); err != nil {
			t.Fatalf("Send of exactly the limit after a refused one: %v", err)
		}
		r, err := collect(ctx, st)
		if err != nil || r.code != codeOK || len(r.msgs) != 1 || !bytes.Equal(r.msgs[0], msg) {
			t.Fatalf("echo of %d bytes: %+v, %v", limit, r.code, err)
		}

		r, err = call(ctx, c, "big-reply", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-finishErr; !isTooLarge(err, limit+1) {
			t.Fatalf("server Finish with a reply over the client's limit: %v, want *wire.MessageTooLargeError", err)
		}
		if r.code != codeResourceExhausted || len(r.msgs) != 0 {
			t.Fatalf("client saw %v with %d messages", r.code, len(r.msgs))
		}
		if c.Err() != nil || s.Err() != nil {
			t.Fatalf("session ended: %v / %v", c.Err(), s.Err())
		}
	})
}

func TestPing(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) })
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))
		// A call in flight, its caller waiting for the reply: the client
		// reads, and so answers the server's pings (TestIdleClientAnswersPings
		// covers a client with nothing in flight).
		st, err := c.Open(ctx, mux.Call{Method: "hold"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		go recvErr(ctx, st)
		for _, sess := range []*mux.Session{c, s, c, s} {
			rtt, err := sess.Ping(ctx)
			if err != nil || rtt <= 0 {
				t.Fatalf("Ping = %v, %v; want a positive round trip", rtt, err)
			}
		}
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if rtt, err := c.Ping(ctx); err != nil || rtt <= 0 {
					t.Errorf("concurrent Ping = %v, %v", rtt, err)
				}
			})
		}
		wg.Wait()
		c.Close()
		if _, err := c.Ping(ctx); !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("Ping after Close = %v, want ErrClosed", err)
		}
	})
}

// TestPingUnanswered uses a peer that acknowledges late: Ping honours its
// context, a late or unknown acknowledgement is ignored, and a Ping pending
// when the session ends fails at once.
func TestPingUnanswered(t *testing.T) {
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping = %v, want context.DeadlineExceeded", err)
	}
	f := raw.expect(wire.TypePing, 0)
	if f.Flags&wire.FlagAck != 0 {
		t.Fatal("client sent a PING with FlagAck")
	}
	raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, f.P))             // late
	raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, make([]byte, 8))) // never sent

	done := make(chan error, 1)
	go func() {
		_, err := c.Ping(testCtx(t))
		done <- err
	}()
	f = raw.expect(wire.TypePing, 0)
	raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, f.P))
	if err := <-done; err != nil {
		t.Fatalf("Ping answered by the peer: %v", err)
	}

	go func() {
		_, err := c.Ping(testCtx(t))
		done <- err
	}()
	raw.expect(wire.TypePing, 0)
	raw.close()
	var ce *wire.ConnError
	if err := <-done; !errors.As(err, &ce) {
		t.Fatalf("Ping pending when the connection dropped = %v, want *ConnError", err)
	}
}

// TestGoAway checks a graceful shutdown: streams the server already received
// finish normally, new ones fail with ErrGoAway on the client, and the
// client can read the reason.
func TestGoAway(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		release := make(chan struct{})
		started := make(chan struct{}, 2)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			started <- struct{}{}
			<-release
			echoUnary(ctx, st, c)
		})
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))
		if _, _, ok := c.GoAwayReason(); ok {
			t.Fatal("GoAwayReason reports a GOAWAY before any was sent")
		}
		// Two calls in flight, their callers waiting for the replies.
		type reply struct {
			r   result
			err error
		}
		replies := make([]chan reply, 2)
		for i := range replies {
			st, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte{byte(i)}, End: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			<-started
			replies[i] = make(chan reply, 1)
			go func() {
				r, err := collect(ctx, st)
				replies[i] <- reply{r, err}
			}()
		}
		if err := s.GoAway(codeUnavailable, "maintenance"); err != nil {
			t.Fatal(err)
		}
		// The PING is answered after the GOAWAY was written, so the client
		// has read the GOAWAY when Ping returns.
		if _, err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		code, msg, ok := c.GoAwayReason()
		if !ok || code != codeUnavailable || msg != "maintenance" {
			t.Fatalf("GoAwayReason = %v, %q, %v", code, msg, ok)
		}
		_, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("late"), End: true})
		if !isGoAway(err) {
			t.Fatalf("Open after GOAWAY = %v, want ErrGoAway", err)
		}
		var ge *wire.GoAwayError
		if !errors.As(err, &ge) || ge.Code != codeUnavailable || ge.Message != "maintenance" {
			t.Fatalf("Open after GOAWAY = %#v, want a *GoAwayError with the reason", err)
		}
		close(release)
		for i, ch := range replies {
			rp := <-ch
			if rp.err != nil || rp.r.code != codeOK || len(rp.r.msgs) != 1 || rp.r.msgs[0][0] != byte(i) {
				t.Fatalf("call %d opened before the GOAWAY: %+v, %v", i, rp.r, rp.err)
			}
		}
		if c.Err() != nil || s.Err() != nil {
			t.Fatalf("session ended: %v / %v", c.Err(), s.Err())
		}
	})
}

// TestGoAwayRefusesLaterStreams checks the server side of GOAWAY against a
// peer that opens a stream after it: the stream is refused with Unavailable
// and the session stays up.
func TestGoAwayRefusesLaterStreams(t *testing.T) {
	ts := newServer(t, echoUnary)
	raw, s := rawClient(t, connKinds[1], ts.config(wire.Settings{}), wire.Settings{})
	raw.mustWrite(headersFrame(1, 0, "echo"), dataFrame(1, wire.FlagEnd, []byte("a")))
	raw.expect(wire.TypeData, 1)
	if code, _ := raw.expectTrailer(1); code != codeOK {
		t.Fatalf("stream 1: %v", code)
	}
	if err := s.GoAway(codeUnavailable, "bye"); err != nil {
		t.Fatal(err)
	}
	f := raw.expect(wire.TypeGoAway, 0)
	last, code, msg, err := wire.ParseGoAway(f.P)
	if err != nil || last != 1 || wire.Code(code) != codeUnavailable || string(msg) != "bye" {
		t.Fatalf("GOAWAY last=%d code=%d msg=%q err=%v", last, code, msg, err)
	}
	raw.mustWrite(headersFrame(3, 0, "echo"), dataFrame(3, wire.FlagEnd, []byte("b")))
	if code, _ := raw.expectTrailer(3); code != codeUnavailable {
		t.Fatalf("stream opened after GOAWAY: %v, want Unavailable", code)
	}
	raw.ping(1)
	if got := ts.opened.Load(); got != 1 {
		t.Fatalf("OnStream ran for %d streams, want 1", got)
	}
}

// TestGoAwayCrossing uses a server that sends GOAWAY naming stream 3 as the
// last it processes while the client has streams 1, 3 and 5 open: stream 5
// fails with ErrGoAway and the others finish normally.
func TestGoAwayCrossing(t *testing.T) {
	ctx := testCtx(t)
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
	var streams []*mux.Stream
	for i := range 3 {
		st, err := c.Open(ctx, mux.Call{Method: "m", Msg: []byte{byte(i)}, End: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		streams = append(streams, st)
		raw.expect(wire.TypeHeaders, st.ID())
		raw.expect(wire.TypeData, st.ID())
	}
	raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 3, uint32(codeUnavailable), "drain")))
	if err := recvErr(ctx, streams[2]); !isGoAway(err) {
		t.Fatalf("stream 5 after GOAWAY(last=3): %v, want ErrGoAway", err)
	}
	for _, st := range streams[:2] {
		raw.mustWrite(dataFrame(st.ID(), 0, []byte("ok")), trailersFrame(st.ID(), codeOK, ""))
		r, err := collect(ctx, st)
		if err != nil || r.code != codeOK || len(r.msgs) != 1 {
			t.Fatalf("stream %d: %+v, %v", st.ID(), r, err)
		}
	}
	if _, err := c.Open(ctx, mux.Call{Method: "m", End: true}); !isGoAway(err) {
		t.Fatalf("Open = %v, want ErrGoAway", err)
	}
}

// TestClose checks that Close is immediate, idempotent, fails what is
// pending on both sides and makes later operations fail with ErrClosed.
func TestClose(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) })
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))
		st, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		recvDone := make(chan error, 1)
		go func() { recvDone <- recvErr(ctx, st) }()

		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("second Close = %v", err)
		}
		select {
		case <-c.Done():
		default:
			t.Fatal("Done not closed after Close returned")
		}
		if err := c.Err(); !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("Err = %v, want ErrClosed", err)
		}
		if err := <-recvDone; !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("pending Recv = %v, want ErrClosed", err)
		}
		if err := st.Send(ctx, []byte("y"), false); !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("Send after Close = %v, want ErrClosed", err)
		}
		if _, err := c.Open(ctx, mux.Call{Method: "hold", End: true}); !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("Open after Close = %v, want ErrClosed", err)
		}
		if err := c.GoAway(codeOK, ""); !errors.Is(err, mux.ErrClosed) {
			t.Fatalf("GoAway after Close = %v, want ErrClosed", err)
		}
		var ce *wire.ConnError
		if err := waitDone(t, s); !errors.As(err, &ce) {
			t.Fatalf("server session ended with %v, want *ConnError", err)
		}
		if !ce.Temporary() || ce.Timeout() {
			t.Fatalf("ConnError: Temporary %v, Timeout %v", ce.Temporary(), ce.Timeout())
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { s.Close() })
		}
		wg.Wait()
		if s.NumStreams() != 0 {
			t.Fatalf("server NumStreams = %d after the session ended", s.NumStreams())
		}
	})
}

// TestCancel checks that a client cancel reaches the server's OnReset and
// pending Recv, and leaves the session usable.
func TestCancel(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		serverErr := make(chan error, 1)
		ts := newServer(t, echoUnary).handle("hold", func(ctx context.Context, st *mux.Stream, c callInfo) {
			serverErr <- recvErr(ctx, st)
		})
		ts.resetCh = make(chan error, 1)
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))
		st, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("first")})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		st.Cancel()
		if err := <-ts.resetCh; !errors.Is(err, mux.ErrStreamCanceled) {
			t.Fatalf("OnReset error = %v, want ErrStreamCanceled", err)
		}
		if err := <-serverErr; !errors.Is(err, mux.ErrStreamCanceled) {
			t.Fatalf("server Recv = %v, want ErrStreamCanceled", err)
		}
		if _, err := st.Recv(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("client Recv after Cancel = %v, want context.Canceled", err)
		}
		if err := st.Send(ctx, []byte("x"), false); !errors.Is(err, context.Canceled) {
			t.Fatalf("client Send after Cancel = %v, want context.Canceled", err)
		}
		st.Release()
		if s.NumStreams() != 0 {
			t.Fatalf("server NumStreams = %d after the cancel", s.NumStreams())
		}
		for i := range 5 {
			if err := unaryEcho(ctx, c, "echo", []byte{byte(i)}); err != nil {
				t.Fatalf("call after a cancel: %v", err)
			}
		}
		if c.Err() != nil || s.Err() != nil {
			t.Fatalf("session ended: %v / %v", c.Err(), s.Err())
		}
	})
}

// TestCancelUnblocksSender checks that Cancel wakes a Send waiting for
// flow-control credit.
func TestCancelUnblocksSender(t *testing.T) {
	ctx := testCtx(t)
	ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { <-ctx.Done() })
	c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{InitialWindow: 4 << 10}))
	st, err := c.Open(ctx, mux.Call{Method: "stall"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	sendErr := make(chan error, 1)
	go func() {
		// The handler never reads: the first message ends up queued on
		// the server, and the credit for the second is never given.
		err := st.Send(ctx, make([]byte, 64<<10), false)
		if err == nil {
			err = st.Send(ctx, make([]byte, 64<<10), false)
		}
		sendErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Send block (a Send after Cancel fails the same way)
	st.Cancel()
	if err := <-sendErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send blocked on credit, then canceled: %v, want context.Canceled", err)
	}
}

// TestRefuse checks that a stream the server refuses ends on the client with
// the status it was refused with, and that the session stays up.
func TestRefuse(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, echoUnary)
		scfg := ts.config(wire.Settings{})
		next := scfg.OnStream
		scfg.OnStream = func(st *mux.Stream, h *wire.CallHeader) {
			if string(h.Method) == "secret" {
				st.Refuse(codePermissionDenied, "not for you")
				return
			}
			next(st, h)
		}
		c, s := newPair(t, k, nil, scfg)
		for range 3 {
			r, err := call(ctx, c, "secret", []byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if r.code != codePermissionDenied || r.message != "not for you" || len(r.msgs) != 0 {
				t.Fatalf("refused call: %+v", r)
			}
			if err := unaryEcho(ctx, c, "echo", []byte("y")); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("server session ended: %v", err)
		}
	})
}

// TestCancelAndReleaseTwice checks that Cancel is idempotent (one CANCEL
// frame), Cancel after the trailers sends nothing, and Release after Cancel
// is fine.
func TestCancelAndReleaseTwice(t *testing.T) {
	ctx := testCtx(t)
	raw, c := rawServer(t, connKinds[1], nil, wire.Settings{})
	st, err := c.Open(ctx, mux.Call{Method: "m"})
	if err != nil {
		t.Fatal(err)
	}
	raw.expect(wire.TypeHeaders, st.ID())
	st.Cancel()
	st.Cancel()
	raw.expect(wire.TypeCancel, st.ID())
	st.Release()

	st, err = c.Open(ctx, mux.Call{Method: "m", End: true})
	if err != nil {
		t.Fatal(err)
	}
	raw.expect(wire.TypeHeaders, st.ID())
	raw.mustWrite(trailersFrame(st.ID(), codeOK, ""))
	if _, err := st.Recv(ctx); err != io.EOF {
		t.Fatalf("Recv = %v", err)
	}
	st.Cancel() // the stream has ended: nothing to send
	st.Release()
	pingErr := make(chan error, 1)
	go func() {
		_, err := c.Ping(ctx)
		pingErr <- err
	}()
	// The PING is the next frame: no CANCEL for the finished stream, and
	// none repeated for the first.
	f := raw.expectAny()
	if f.Type != wire.TypePing {
		t.Fatalf("got %v, want only the PING", f.Header)
	}
	raw.mustWrite(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, f.P))
	if err := <-pingErr; err != nil {
		t.Fatal(err)
	}
}

// TestReleaseTwice checks that a second Release of the same stream does no
// harm: in particular the stream must not be handed out twice afterwards.
func TestReleaseTwice(t *testing.T) {
	ctx := testCtx(t)
	ts := newServer(t, echoUnary).handle("hold", func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) })
	c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{}))
	st, err := c.Open(ctx, mux.Call{Method: "echo", Msg: []byte("x"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := collect(ctx, st); err != nil {
		t.Fatal(err)
	}
	st.Release()
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("second Release panicked: %v", p)
			}
		}()
		st.Release()
	}()
	a, err := c.Open(ctx, mux.Call{Method: "hold"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Open(ctx, mux.Call{Method: "hold"})
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("after a stream was released twice, two open calls share it (ids now %d and %d): the second Release put it in the session's free list again", a.ID(), b.ID())
	}
	a.Release()
	b.Release()
	if err := unaryEcho(ctx, c, "echo", []byte("after")); err != nil {
		t.Fatal(err)
	}
}

// TestTooManyStreams checks that the client honours the server's MaxStreams.
func TestTooManyStreams(t *testing.T) {
	ctx := testCtx(t)
	release := make(chan struct{})
	ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
		<-release
		echoUnary(ctx, st, c)
	})
	c, s := newPair(t, connKinds[1], nil, ts.config(wire.Settings{MaxStreams: 2}))
	var streams []*mux.Stream
	for range 2 {
		st, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("x"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	if _, err := c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("x"), End: true}); !errors.Is(err, mux.ErrTooManyStreams) {
		t.Fatalf("third Open = %v, want ErrTooManyStreams", err)
	}
	close(release)
	for _, st := range streams {
		if _, err := collect(ctx, st); err != nil {
			t.Fatal(err)
		}
		st.Release()
	}
	// The server may still count a stream for a moment after its trailers
	// left (see TestSequentialCallsWithOneStreamSlot); wait for its count.
	for s.NumStreams() >= 2 {
		if ctx.Err() != nil {
			t.Fatalf("server NumStreams = %d long after both calls ended", s.NumStreams())
		}
		time.Sleep(time.Millisecond)
	}
	if err := unaryEcho(ctx, c, "echo", []byte("again")); err != nil {
		t.Fatalf("Open after streams were released: %v", err)
	}
}

// TestOnRequestHalfCloseWithoutMessage checks that OnRequest runs for a
// stream the client opens and half-closes at once, without a message, as
// Config.OnRequest documents.
func TestOnRequestHalfCloseWithoutMessage(t *testing.T) {
	requested := make(chan struct{}, 1)
	scfg := &mux.Config{
		OnStream: func(*mux.Stream, *wire.CallHeader) {},
		OnRequest: func(st *mux.Stream) {
			requested <- struct{}{}
			st.RunInline(func(st *mux.Stream) {
				st.Finish(context.Background(), mux.Reply{Msg: []byte("done"), HasMsg: true, Code: codeOK})
			})
		},
	}
	c, _ := newPair(t, connKinds[1], nil, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Open(ctx, mux.Call{Method: "list", End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	r, err := collect(ctx, st)
	if err != nil {
		t.Fatalf("call opened with end=true and no message: %v (OnRequest called: %v)", err, len(requested) > 0)
	}
	if len(r.msgs) != 1 || string(r.msgs[0]) != "done" {
		t.Fatalf("reply %q", r.msgs)
	}
}

// TestSendAfterHalfClose checks that sending after the send side was closed
// fails locally with ErrStreamClosed and does not break the session.
func TestSendAfterHalfClose(t *testing.T) {
	tests := []struct {
		name string
		open func(ctx context.Context, c *mux.Session) (*mux.Stream, error)
	}{
		{"Open with message and end", func(ctx context.Context, c *mux.Session) (*mux.Stream, error) {
			return c.Open(ctx, mux.Call{Method: "hold", Msg: []byte("x"), End: true})
		}},
		{"Send with end", func(ctx context.Context, c *mux.Session) (*mux.Stream, error) {
			st, err := c.Open(ctx, mux.Call{Method: "hold"})
			if err == nil {
				err = st.Send(ctx, []byte("x"), true)
			}
			return st, err
		}},
		{"Open without message, with end", func(ctx context.Context, c *mux.Session) (*mux.Stream, error) {
			return c.Open(ctx, mux.Call{Method: "hold", End: true})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) })
			c, s := newPair(t, connKinds[1], nil, ts.config(wire.Settings{}))
			st, err := tt.open(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			if err := st.Send(ctx, []byte("more"), false); !errors.Is(err, mux.ErrStreamClosed) {
				t.Errorf("Send after the half-close = %v, want ErrStreamClosed", err)
			}
			if _, err := c.Ping(ctx); err != nil {
				t.Fatalf("session broken: Ping = %v (server session: %v)", err, s.Err())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("server session ended: %v", err)
			}
		})
	}
}

// TestRecvContext checks that a Recv whose context ends returns the
// context's error and leaves the stream usable: the reply that comes later is
// still delivered.
func TestRecvContext(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		release := make(chan struct{})
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			<-release
			echoUnary(ctx, st, c)
		})
		c, _ := newPair(t, k, nil, ts.config(wire.Settings{}))
		st, err := c.Open(ctx, mux.Call{Method: "slow", Msg: []byte("late"), End: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := st.Recv(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Recv with an expiring context = %v, want context.DeadlineExceeded", err)
		}
		canceled, cancel2 := context.WithCancel(ctx)
		cancel2()
		if _, err := st.Recv(canceled); !errors.Is(err, context.Canceled) {
			t.Fatalf("Recv with a canceled context = %v, want context.Canceled", err)
		}
		close(release)
		r, err := collect(ctx, st)
		if err != nil || len(r.msgs) != 1 || string(r.msgs[0]) != "late" {
			t.Fatalf("reply after the timed-out Recv: %+v, %v", r, err)
		}
	})
}

// TestCloseSend checks half-closing a client stream without a message: the
// server reads every message and then io.EOF, OnRequest runs for a stream
// that sent none, a second CloseSend does nothing, and Send afterwards fails
// with ErrStreamClosed.
func TestCloseSend(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			n := 0
			for {
				b, err := st.Recv(ctx)
				if err == io.EOF {
					break
				}
				if err != nil {
					return
				}
				n += len(b.B)
				pool.Put(b)
			}
			st.Finish(ctx, mux.Reply{Msg: []byte(fmt.Sprint(n)), HasMsg: true, Code: codeOK})
		})
		c, _ := newPair(t, k, nil, ts.config(wire.Settings{}))
		for _, msgs := range []int{0, 1, 3} {
			st, err := c.Open(ctx, mux.Call{Method: "count"})
			if err != nil {
				t.Fatal(err)
			}
			for range msgs {
				if err := st.Send(ctx, []byte("abcd"), false); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := st.CloseSend(); err != nil {
				t.Fatalf("second CloseSend = %v", err)
			}
			if err := st.Send(ctx, []byte("x"), false); !errors.Is(err, mux.ErrStreamClosed) {
				t.Fatalf("Send after CloseSend = %v, want ErrStreamClosed", err)
			}
			r, err := collect(ctx, st)
			if err != nil || len(r.msgs) != 1 || string(r.msgs[0]) != fmt.Sprint(4*msgs) {
				t.Fatalf("%d messages: reply %q, %v", msgs, r.msgs, err)
			}
			st.Release()
		}

		// OnRequest runs once the client half-closes without a message.
		cfg, _ := inlineEchoConfig()
		cfg.OnRequest = func(st *mux.Stream) {
			st.RunInline(func(st *mux.Stream) {
				st.Finish(ctx, mux.Reply{Msg: []byte("empty"), HasMsg: true, Code: codeOK})
			})
		}
		c2, _ := newPair(t, k, nil, cfg)
		st, err := c2.Open(ctx, mux.Call{Method: "m"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		r, err := collect(ctx, st)
		if err != nil || len(r.msgs) != 1 || string(r.msgs[0]) != "empty" {
			t.Fatalf("OnRequest after CloseSend: %q, %v", r.msgs, err)
		}
	})
}

// TestSendHeader checks reply metadata sent ahead of the messages of a
// streaming reply.
func TestSendHeader(t *testing.T) {
	ctx := testCtx(t)
	ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
		if err := st.SendHeader([]string{"x-count", "2"}); err != nil {
			return
		}
		st.Send(ctx, []byte("one"), false)
		st.Send(ctx, []byte("two"), false)
		st.Finish(ctx, mux.Reply{Code: codeOK})
	})
	c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{}))
	r, err := call(ctx, c, "list", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.header, []string{"x-count", "2"}) || len(r.msgs) != 2 {
		t.Fatalf("header %q, messages %q", r.header, r.msgs)
	}
}

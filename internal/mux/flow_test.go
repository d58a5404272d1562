package mux_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// blockedSend reports whether a Send of msg on st waits for credit: it gives
// the Send d to complete and expects context.DeadlineExceeded. A Send that
// fails otherwise fails the test.
func blockedSend(t *testing.T, ctx context.Context, st *mux.Stream, msg []byte, d time.Duration) bool {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := st.Send(sctx, msg, false)
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return false
}

// TestFlowControlStalledStream checks that a receiver that stops reading one
// stream blocks only that stream's sender, after exactly one window of data,
// while other streams on the session keep flowing; and that once it reads
// again every message arrives once and in order.
func TestFlowControlStalledStream(t *testing.T) {
	const (
		window  = 64 << 10
		msgSize = 1 << 10
		total   = 200
	)
	msg := func(i int) []byte { return payload(uint64(i), msgSize) }
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		resume := make(chan struct{})
		stalled := make(chan error, 1)
		ts := newServer(t, echoUnary).
			handle("echo-stream", echoStream).
			handle("stall", func(ctx context.Context, st *mux.Stream, c callInfo) {
				<-resume
				for i := 0; ; i++ {
					b, err := st.Recv(ctx)
					if err == io.EOF {
						if i != total {
							err = fmt.Errorf("got %d messages, want %d", i, total)
						} else {
							err = nil
						}
						stalled <- err
						st.Finish(ctx, mux.Reply{Code: codeOK})
						return
					}
					if err != nil {
						stalled <- err
						return
					}
					ok := bytes.Equal(b.B, msg(i))
					pool.Put(b)
					if !ok {
						stalled <- fmt.Errorf("message %d is not the %d-th message sent", i, i)
						st.Refuse(codeDataLoss, "out of order")
						return
					}
				}
			})
		c, _ := newPair(t, k, nil, ts.config(wire.Settings{InitialWindow: window}))
		st, err := c.Open(ctx, mux.Call{Method: "stall"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Release()

		sent := 0
		for ; sent < total; sent++ {
			if blockedSend(t, ctx, st, msg(sent), 100*time.Millisecond) {
				break
			}
		}
		if sent != window/msgSize {
			t.Fatalf("the sender got %d messages (%d bytes) out before blocking; the stream window is %d bytes", sent, sent*msgSize, window)
		}

		// Other streams keep flowing: a long-lived streaming echo and many
		// calls, together several times the stalled stream's window.
		es, err := c.Open(ctx, mux.Call{Method: "echo-stream"})
		if err != nil {
			t.Fatal(err)
		}
		defer es.Release()
		for i := range 64 {
			m := payload(uint64(1000+i), 8<<10)
			if err := es.Send(ctx, m, false); err != nil {
				t.Fatalf("echo stream Send %d: %v", i, err)
			}
			b, err := es.Recv(ctx)
			if err != nil {
				t.Fatalf("echo stream Recv %d: %v", i, err)
			}
			if !bytes.Equal(b.B, m) {
				t.Fatalf("echo stream message %d corrupt", i)
			}
			pool.Put(b)
		}
		for i := range 64 {
			if err := unaryEcho(ctx, c, "echo", payload(uint64(i), 16<<10)); err != nil {
				t.Fatalf("call %d while a stream is stalled: %v", i, err)
			}
		}
		if !blockedSend(t, ctx, st, msg(sent), 50*time.Millisecond) {
			t.Fatal("the stalled stream's sender got credit although the receiver read nothing")
		}

		close(resume)
		for ; sent < total; sent++ {
			if err := st.Send(ctx, msg(sent), sent == total-1); err != nil {
				t.Fatalf("Send %d after the receiver resumed: %v", sent, err)
			}
		}
		r, err := collect(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-stalled; err != nil {
			t.Fatal(err)
		}
		if r.code != codeOK {
			t.Fatalf("stalled stream ended with %v %q", r.code, r.message)
		}
		if err := es.Send(ctx, []byte("end"), true); err != nil {
			t.Fatal(err)
		}
		if r, err := collect(ctx, es); err != nil || len(r.msgs) != 1 {
			t.Fatalf("echo stream end: %v, %d messages", err, len(r.msgs))
		}
	})
}

// TestFlowControlSmallWindow checks that flow control never deadlocks when a
// side advertises a small window: with a 64 KiB InitialWindow and the default
// 64 KiB frames, a message that needs more than half the window must get
// through after smaller ones were received.
func TestFlowControlSmallWindow(t *testing.T) {
	const window = 64 << 10
	seqs := [][]int{
		{10 << 10, 60 << 10},
		{100, 64 << 10},
		{1, 64 << 10, 64 << 10, 200 << 10},
	}
	set := wire.Settings{InitialWindow: window}
	for _, seq := range seqs {
		t.Run(fmt.Sprint(seq), func(t *testing.T) {
			ts := newServer(t, echoStream)
			c, _ := newPair(t, connKinds[1], &mux.Config{Settings: set}, ts.config(set))
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			st, err := c.Open(ctx, mux.Call{Method: "echo"})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			for i, n := range seq {
				m := payload(uint64(i), n)
				if err := st.Send(ctx, m, false); err != nil {
					t.Fatalf("Send of message %d (%d bytes, after %v were echoed): %v: flow control deadlocked; the sender "+
						"needs more credit than the %d bytes it has left, and the receiver, holding less than half the window "+
						"unacknowledged, grants none", i, n, seq[:i], err, window-sum(seq[:i]))
				}
				b, err := st.Recv(ctx)
				if err != nil {
					t.Fatalf("Recv of echo %d (%d bytes): %v", i, n, err)
				}
				if !bytes.Equal(b.B, m) {
					t.Fatalf("echo %d corrupt", i)
				}
				pool.Put(b)
			}
		})
	}
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// TestFlowControlBoundsChunkedMessages checks that flow control bounds what
// a receiver that does not read holds for a stream also when the messages
// are chunked: the sender must block once about a window of data is queued.
func TestFlowControlBoundsChunkedMessages(t *testing.T) {
	const (
		window = 16 << 10
		frame  = 4 << 10
		// The last chunk of such a message carries 1 byte.
		msgSize = (frame - 4) + 3*frame + 1
		tries   = 64
	)
	ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { <-ctx.Done() })
	c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{InitialWindow: window, MaxFrameSize: frame}))
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "stall"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	m := payload(1, msgSize)
	sent := 0
	for ; sent < tries; sent++ {
		if blockedSend(t, ctx, st, m, 100*time.Millisecond) {
			break
		}
	}
	if queued := sent * msgSize; queued > window+2*msgSize {
		t.Fatalf("a receiver that reads nothing accepted %d messages of %d bytes (%d bytes) on a stream whose window is %d bytes: "+
			"chunked messages escape flow control", sent, msgSize, queued, window)
	}
}

// TestConnectionCreditReturned checks that data a receiver drops unread (the
// stream was canceled, finished or released) gives its connection credit
// back: many times the connection window goes through such streams.
func TestConnectionCreditReturned(t *testing.T) {
	const window = 1 << 10 // the connection window is 16 of these
	const rounds = 64
	t.Run("client cancels", func(t *testing.T) {
		ctx := testCtx(t)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) { recvErr(ctx, st) })
		ts.resetCh = make(chan error, rounds)
		c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{InitialWindow: window}))
		for i := range rounds {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := c.Open(sctx, mux.Call{Method: "ignore", Msg: make([]byte, window)})
			cancel()
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			st.Cancel()
			st.Release()
			<-ts.resetCh
		}
	})
	t.Run("server finishes unread", func(t *testing.T) {
		ctx := testCtx(t)
		proceed := make(chan struct{})
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			select {
			case <-proceed:
			case <-ctx.Done():
				return
			}
			st.Finish(ctx, mux.Reply{Code: codeOK})
		})
		c, _ := newPair(t, connKinds[1], nil, ts.config(wire.Settings{InitialWindow: window}))
		for i := range rounds {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := c.Open(sctx, mux.Call{Method: "ignore", Msg: make([]byte, window)})
			cancel()
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			if _, err := c.Ping(ctx); err != nil { // the server has read the data
				t.Fatal(err)
			}
			proceed <- struct{}{}
			if _, err := collect(ctx, st); err != nil {
				t.Fatal(err)
			}
			st.Release()
		}
	})
	t.Run("client releases unread", func(t *testing.T) {
		ctx := testCtx(t)
		finished := make(chan error, 1)
		ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
			// Half a window: one frame, sent without waiting for the client
			// (which reads only while it waits for something).
			finished <- st.Finish(ctx, mux.Reply{Msg: make([]byte, window/2), HasMsg: true, Code: codeOK})
		})
		c, _ := newPair(t, connKinds[1], &mux.Config{Settings: wire.Settings{InitialWindow: window}}, ts.config(wire.Settings{}))
		for i := range rounds {
			st, err := c.Open(ctx, mux.Call{Method: "reply", End: true})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-finished:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("round %d: the server's reply is blocked on connection credit the client never returned", i)
			}
			if _, err := c.Ping(ctx); err != nil { // the client has read the reply
				t.Fatal(err)
			}
			st.Release()
		}
	})
}

// TestLargeMessageDoesNotStallOthers checks that while a 64 MiB message is
// being sent on one stream, small calls on others complete: each one
// finishes before the large message has arrived.
func TestLargeMessageDoesNotStallOthers(t *testing.T) {
	const big = 64 << 20
	want := bigPayload(big)
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		var bigArrived atomic.Bool
		bigErr := make(chan error, 1)
		ts := newServer(t, echoUnary).handle("big", func(ctx context.Context, st *mux.Stream, c callInfo) {
			b, err := st.Recv(ctx)
			if err != nil {
				bigErr <- err
				st.Refuse(codeInternal, err.Error())
				return
			}
			bigArrived.Store(true)
			if !bytes.Equal(b.B, want) {
				err = errors.New("the 64 MiB message arrived corrupt")
			}
			pool.Put(b)
			bigErr <- err
			st.Finish(ctx, mux.Reply{Code: codeOK})
		})
		cc, sc := k.pair(t)
		started := make(chan struct{})
		var once sync.Once
		counted := &countingConn{Conn: cc, onWrite: func(n int64) {
			if n >= 4<<20 {
				once.Do(func() { close(started) })
			}
		}}
		c, _ := handshake(t, counted, sc, nil, ts.config(wire.Settings{MaxMessageSize: big}))
		callErr := make(chan error, 1)
		go func() {
			r, err := call(ctx, c, "big", want)
			if err == nil && r.code != codeOK {
				err = fmt.Errorf("status %v %q", r.code, r.message)
			}
			callErr <- err
		}()
		select {
		case <-started:
		case err := <-callErr:
			t.Fatalf("the large call ended before 4 MiB were written: %v", err)
		}
		for i := range 3 {
			if err := unaryEcho(ctx, c, "echo", payload(uint64(i), 100)); err != nil {
				t.Fatal(err)
			}
			if bigArrived.Load() {
				t.Fatalf("small call %d completed only after the 64 MiB message had arrived", i)
			}
		}
		if err := <-callErr; err != nil {
			t.Fatal(err)
		}
		if err := <-bigErr; err != nil {
			t.Fatal(err)
		}
	})
}

// TestBidirectionalBulk streams large messages both ways at once on several
// streams. Over a pipe, where a write waits for the peer to read, it checks
// that the two sessions never end up both blocked writing.
func TestBidirectionalBulk(t *testing.T) {
	const streams, msgs, size = 4, 8, 256 << 10
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, echoStream)
		c, _ := newPair(t, k, nil, ts.config(wire.Settings{}))
		var wg sync.WaitGroup
		for s := range streams {
			st, err := c.Open(ctx, mux.Call{Method: "echo"})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Release()
			wg.Go(func() {
				for i := range msgs {
					if err := st.Send(ctx, payload(uint64(s*msgs+i), size), i == msgs-1); err != nil {
						t.Errorf("stream %d: Send %d: %v", s, i, err)
						return
					}
				}
			})
			wg.Go(func() {
				r, err := collect(ctx, st)
				if err != nil {
					t.Errorf("stream %d: %v (after %d messages)", s, err, len(r.msgs))
					return
				}
				for i, m := range r.msgs {
					if !bytes.Equal(m, payload(uint64(s*msgs+i), size)) {
						t.Errorf("stream %d: message %d corrupt", s, i)
						return
					}
				}
				if len(r.msgs) != msgs {
					t.Errorf("stream %d: %d messages, want %d", s, len(r.msgs), msgs)
				}
			})
		}
		wg.Wait()
	})
}

// TestUploadWithoutPendingRecv makes a call whose request is several times
// the server's stream window while the client has nothing else in flight:
// while the request is being written, no client goroutine waits in Recv.
// The server grants credit as the request arrives; the sessions must keep
// both directions moving. Over a pipe every write waits for the peer to read.
func TestUploadWithoutPendingRecv(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, echoUnary)
		set := wire.Settings{MaxMessageSize: 8 << 20}
		c, _ := newPair(t, k, &mux.Config{Settings: set}, ts.config(set))
		msg := payload(1, 4<<20)
		done := make(chan error, 1)
		go func() { done <- unaryEcho(ctx, c, "echo", msg) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a call with a 4 MiB request did not complete within 3s: deadlock between the client " +
				"writing the request and the server's reader writing WINDOW frames that no client goroutine reads")
		}
	})
}

package mux_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// inlineEchoConfig returns a server Config that answers every call with its
// first message, inline on the session's reader goroutine, and a function
// that lists the stream ids OnStream saw.
func inlineEchoConfig() (*mux.Config, func() []uint32) {
	var mu sync.Mutex
	var ids []uint32
	cfg := &mux.Config{
		OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			mu.Lock()
			ids = append(ids, st.ID())
			mu.Unlock()
		},
		OnRequest: func(st *mux.Stream) {
			st.RunInline(func(st *mux.Stream) { echoUnary(context.Background(), st, callInfo{}) })
		},
	}
	return cfg, func() []uint32 {
		mu.Lock()
		defer mu.Unlock()
		return append([]uint32(nil), ids...)
	}
}

// inlineServer runs each request inline through OnRequest, with the handler
// registered for its method.
type inlineServer struct {
	handlers map[string]func(*mux.Stream)
}

func (is *inlineServer) config(set wire.Settings) *mux.Config {
	return &mux.Config{
		Settings: set,
		OnStream: func(st *mux.Stream, h *wire.CallHeader) {
			fn := is.handlers[string(h.Method)]
			if fn == nil {
				st.Refuse(codeUnimplemented, "unknown method")
				return
			}
			st.Owner = fn
		},
		OnRequest: func(st *mux.Stream) {
			if fn, ok := st.Owner.(func(*mux.Stream)); ok {
				st.RunInline(fn)
			}
		},
	}
}

// finishEcho answers with the request message.
func finishEcho(st *mux.Stream) { echoUnary(context.Background(), st, callInfo{}) }

// TestRunInlineTakeover checks that a request that runs long inline on the
// reader goroutine does not stop the session from serving other streams: a
// handler that waits for another call to complete must not deadlock. The
// slow handler holds its request message while the reader that takes over
// reads the other calls: it still echoes its own bytes.
func TestRunInlineTakeover(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		entered := make(chan struct{})
		fastDone := make(chan struct{})
		is := &inlineServer{handlers: map[string]func(*mux.Stream){
			"fast": finishEcho,
			"slow": func(st *mux.Stream) {
				b, err := st.Recv(ctx)
				if err != nil {
					st.Refuse(codeInternal, err.Error())
					return
				}
				close(entered)
				select {
				case <-fastDone:
				case <-time.After(testTimeout):
				}
				st.Finish(ctx, mux.Reply{Msg: b.B, HasMsg: true, Code: codeOK})
				pool.Put(b)
			},
		}}
		c, s := newPair(t, k, nil, is.config(wire.Settings{}))
		slowErr := make(chan error, 1)
		go func() { slowErr <- unaryEcho(ctx, c, "slow", payload(99, 2000)) }()
		<-entered
		for i := range 20 {
			if err := unaryEcho(ctx, c, "fast", payload(uint64(i), 3000)); err != nil {
				t.Fatalf("fast call %d while a slow one runs inline: %v", i, err)
			}
		}
		if _, err := s.Ping(ctx); err != nil {
			t.Fatalf("server Ping while a request runs inline: %v", err)
		}
		close(fastDone)
		if err := <-slowErr; err != nil {
			t.Fatal(err)
		}
		// The session goes on after the takeover.
		for i := range 20 {
			if err := unaryEcho(ctx, c, "fast", payload(uint64(i), 100)); err != nil {
				t.Fatalf("fast call %d after the slow one: %v", i, err)
			}
		}
	})
}

// TestRunInlineSleepers mixes inline handlers that sleep 50 ms with fast
// ones from many goroutines: fast calls are not held up behind the sleepers.
func TestRunInlineSleepers(t *testing.T) {
	ctx := testCtx(t)
	var sleeping atomic.Int32
	var fastDuringSleep atomic.Int32
	is := &inlineServer{handlers: map[string]func(*mux.Stream){
		"fast": func(st *mux.Stream) {
			if sleeping.Load() > 0 {
				fastDuringSleep.Add(1)
			}
			finishEcho(st)
		},
		"sleep": func(st *mux.Stream) {
			sleeping.Add(1)
			time.Sleep(50 * time.Millisecond)
			sleeping.Add(-1)
			finishEcho(st)
		},
	}}
	c, _ := newPair(t, connKinds[1], nil, is.config(wire.Settings{}))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3 {
				if err := unaryEcho(ctx, c, "sleep", payload(uint64(g*10+i), 10)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				if err := unaryEcho(ctx, c, "fast", payload(uint64(g*1000+i), 200)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if fastDuringSleep.Load() == 0 {
		t.Fatal("no fast call was served while an inline handler slept")
	}
}

// TestRunInlineRecvAndSend checks an inline handler that streams: it reads
// the request, sends several messages and finishes.
func TestRunInlineRecvAndSend(t *testing.T) {
	ctx := testCtx(t)
	is := &inlineServer{handlers: map[string]func(*mux.Stream){
		"count": func(st *mux.Stream) {
			b, err := st.Recv(ctx)
			if err != nil {
				st.Refuse(codeInternal, err.Error())
				return
			}
			n := int(b.B[0])
			pool.Put(b)
			for i := range n {
				if err := st.Send(ctx, []byte{byte(i)}, false); err != nil {
					return
				}
			}
			st.Finish(ctx, mux.Reply{Code: codeOK})
		},
	}}
	forKinds(t, func(t *testing.T, k connKind) {
		c, _ := newPair(t, k, nil, is.config(wire.Settings{}))
		for _, n := range []int{0, 1, 10, 200} {
			r, err := call(ctx, c, "count", []byte{byte(n)})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.msgs) != n {
				t.Fatalf("count %d: got %d messages", n, len(r.msgs))
			}
			for i, m := range r.msgs {
				if len(m) != 1 || m[0] != byte(i) {
					t.Fatalf("count %d: message %d = %v", n, i, m)
				}
			}
		}
	})
}

// TestCloseWaitsForInlineHandler checks that Close waits for every reader
// goroutine, including one that is still running a request inline after
// another took over reading.
func TestCloseWaitsForInlineHandler(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var handlerDone atomic.Bool
	is := &inlineServer{handlers: map[string]func(*mux.Stream){
		"block": func(st *mux.Stream) {
			close(entered)
			<-release
			handlerDone.Store(true)
		},
		"fast": finishEcho,
	}}
	c, s := newPair(t, connKinds[1], nil, is.config(wire.Settings{}))
	ctx := testCtx(t)
	st, err := c.Open(ctx, mux.Call{Method: "block", Msg: []byte("x"), End: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	<-entered
	if err := unaryEcho(ctx, c, "fast", []byte("y")); err != nil { // served by the goroutine that took over
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a reader goroutine was still running an inline request")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !handlerDone.Load() {
		t.Fatal("Close returned before the inline handler ended")
	}
	s.Close()
}

package mux_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/wire"
)

// TestSharedContextCancel: callers that share a context wait for their
// replies on their streams alone once the session watches that context;
// when it ends, each of them returns at once with its error, while calls
// with other contexts go on and complete, and the next shared context is
// watched in its turn.
func TestSharedContextCancel(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		release := make(chan struct{})
		ts := newServer(t, echoUnary).handle("Hold", func(ctx context.Context, st *mux.Stream, _ callInfo) {
			b, err := st.Recv(ctx)
			if err != nil {
				return
			}
			defer pool.Put(b)
			select {
			case <-release:
				st.Finish(ctx, mux.Reply{Msg: b.B, HasMsg: true, Code: codeOK})
			case <-ctx.Done():
			}
		})
		client, _ := newPair(t, k, nil, ts.config(wire.Settings{}))
		base := testCtx(t)

		for round := range 2 {
			shared, cancel := context.WithCancel(base)
			// Concurrent calls with the shared context make it the watched one.
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					for j := range 50 {
						if err := unaryEcho(shared, client, "Echo", payload(uint64(i*100+j), 64)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if got := mux.WatchedContext(client); got != any(shared.Done()) {
				t.Fatalf("round %d: watched context is %v, want the shared one", round, got)
			}

			other, cancelOther := context.WithCancel(base)
			errs := make(chan error, 6)
			for i := range 6 {
				ctx := shared
				if i >= 4 {
					ctx = other
				}
				go func() {
					_, err := call(ctx, client, "Hold", []byte{byte(i)})
					if ctx == other && err == nil {
						err = errOtherDone
					}
					errs <- err
				}()
			}
			testutil.WaitFor(t, func() bool { return client.NumStreams() == 6 })
			cancel()
			for range 4 {
				select {
				case err := <-errs:
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: call with the canceled context: %v", round, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("round %d: a call with the canceled context did not return", round)
				}
			}
			// (The callers may see the end before the watch does. The
			// other calls, woken for nothing, may make theirs the next
			// watched context.)
			testutil.WaitFor(t, func() bool { return mux.WatchedContext(client) != any(shared.Done()) })
			select {
			case err := <-errs:
				t.Fatalf("round %d: a call with another context returned early: %v", round, err)
			case <-time.After(20 * time.Millisecond):
			}
			for range 6 { // the handlers of the canceled calls wait too
				release <- struct{}{}
			}
			for range 2 {
				if err := <-errs; err != errOtherDone {
					t.Fatalf("round %d: call with another context: %v", round, err)
				}
			}
			cancelOther()
		}
	})
}

var errOtherDone = errors.New("completed")

package mux_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/wire"
)

// TestNonCancelableCallers makes rounds of concurrent calls with contexts
// that cannot be canceled, with which a client goroutine reads the
// connection itself and hands the reading on to the others when its reply
// is in. No caller may be left waiting for a reply the server sent.
func TestNonCancelableCallers(t *testing.T) {
	const rounds, callers = 1000, 4
	forKinds(t, func(t *testing.T, k connKind) {
		ts := newServer(t, echoUnary)
		c, _ := newPair(t, k, nil, ts.config(wire.Settings{}))
		for r := range rounds {
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for i := range callers {
				wg.Go(func() { errs <- unaryEcho(context.Background(), c, "echo", []byte{byte(r), byte(i)}) })
			}
			done := make(chan struct{})
			go func() {
				wg.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				stuck := callers - len(errs)
				c.Close() // fails the stuck callers so the test can end
				<-done
				t.Fatalf("round %d: %d of %d callers still waited for their reply after 3s: "+
					"the reading role was handed to a caller that did not take it", r, stuck, callers)
			}
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("round %d: %v", r, err)
				}
			}
		}
	})
}

// A client reads only while one of its goroutines waits for something (see
// clientread.go and PROTOCOL.md, Ping): a server's PING to an idle client is
// answered when the client next reads, at its next call at the latest.
func TestIdleClientAnswersPingsOnNextCall(t *testing.T) {
	forKinds(t, func(t *testing.T, k connKind) {
		ctx := testCtx(t)
		ts := newServer(t, echoUnary)
		c, s := newPair(t, k, nil, ts.config(wire.Settings{}))
		if err := unaryEcho(ctx, c, "echo", []byte("warm up")); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			done := make(chan error, 1)
			go func() {
				_, err := s.Ping(ctx)
				done <- err
			}()
			// The PING goes out on the server's goroutine: it may reach the
			// client after a call has read its reply, in which case the call
			// after answers it.
			deadline := time.Now().Add(5 * time.Second)
			for answered := false; !answered; {
				if time.Now().After(deadline) {
					t.Fatalf("server ping %d unanswered after the client's calls", i)
				}
				if err := unaryEcho(ctx, c, "echo", []byte("next call")); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("server ping %d: %v", i, err)
					}
					answered = true
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	})
}

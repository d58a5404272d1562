package rpc

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// TestCancelDuringLargeReplies cancels calls while their multi-frame replies
// are arriving, so that the client releases streams that the connection's
// reader is still delivering frames to. Every call must end with OK or
// Canceled, and the connection must survive.
func TestCancelDuringLargeReplies(t *testing.T) {
	srv := NewServer(&ServerOptions{CallRate: -1})
	reply := make([]byte, 256<<10) // four frames
	HandleRaw(srv, "Soak.Big", func(ctx context.Context, req []byte) ([]byte, error) { return reply, nil })
	path := filepath.Join(t.TempDir(), "big.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	useMode(t, srv)
	go func() { serveErr <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-serveErr
	}()
	c, err := Dial("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	calls := 2000
	if testing.Short() {
		calls = 500
	}
	var next, ok, canceled atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			var out []byte
			for next.Add(1) <= int64(calls) {
				ctx, cancel := context.WithCancel(context.Background())
				tm := time.AfterFunc(time.Duration(rng.IntN(20000))*time.Microsecond, cancel)
				err := c.Invoke(ctx, "Soak.Big", []byte{1}, &out)
				tm.Stop()
				cancel()
				switch status.CodeOf(err) {
				case status.OK:
					ok.Add(1)
					if len(out) != len(reply) {
						t.Errorf("reply of %d bytes", len(out))
					}
				case status.Canceled:
					canceled.Add(1)
				default:
					t.Errorf("unexpected outcome %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls: ok %d, canceled %d", calls, ok.Load(), canceled.Load())
	var out []byte
	if err := c.Invoke(context.Background(), "Soak.Big", []byte{1}, &out); err != nil {
		t.Fatalf("call after the cancels: %v", err)
	}
	waitCalls(t, srv, 0)
}

// TestCanceledDialDoesNotFailOtherCalls makes the first call of a client
// with a context that is already canceled, so that the connection attempt
// made for it fails. That failure is the caller's own doing, not the
// server's: the next call, with a live context, must connect and succeed
// rather than fail with Unavailable during a backoff.
func TestCanceledDialDoesNotFailOtherCalls(t *testing.T) {
	srv := NewServer(nil)
	HandleRaw(srv, "T.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	path := filepath.Join(t.TempDir(), "d.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	useMode(t, srv)
	go func() { serveErr <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-serveErr
	}()
	c, err := Dial("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out []byte
	if err := c.Invoke(ctx, "T.Echo", []byte("x"), &out); status.CodeOf(err) != status.Canceled {
		t.Fatalf("call with a canceled context: %v, want Canceled", err)
	}
	if err := c.Invoke(context.Background(), "T.Echo", []byte("y"), &out); err != nil {
		t.Fatalf("next call: %v", err)
	}
}

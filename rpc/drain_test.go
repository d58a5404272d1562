package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/status"
)

// TestShutdownUnderLoad shuts a server down while 8 clients call it, round
// after round, on both engines. Every call ends exactly one way: completed
// (the handler ran once and the reply arrived), or refused as never
// processed (the handler never ran, and the client was told so by a GOAWAY
// or could not connect). A call the handler ran that the client saw fail,
// a call that failed with the connection (reset, EOF) and a call both
// completed and refused all fail the test. WARREN_DRAIN_ROUNDS sets the
// rounds per engine (default 50: 100 in all).
func TestShutdownUnderLoad(t *testing.T) {
	rounds := 50
	if v := os.Getenv("WARREN_DRAIN_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		rounds = n
	}
	if testing.Short() {
		rounds = 5
	}
	for _, loop := range []bool{false, true} {
		name := "goroutine"
		if loop {
			name = "eventloop"
		}
		t.Run(name, func(t *testing.T) {
			var completed, refused int
			for round := range rounds {
				c, r := drainRound(t, round, loop)
				completed += c
				refused += r
				if t.Failed() {
					return
				}
			}
			t.Logf("%d rounds: %d calls completed, %d refused as never processed", rounds, completed, refused)
		})
	}
}

// drainRound runs one shutdown under load and returns the calls completed
// and the calls refused as never processed.
func drainRound(t *testing.T, round int, loop bool) (completed, refused int) {
	const callers = 8
	srv := NewServer(&ServerOptions{EventLoop: loop, Logger: slog.New(slog.DiscardHandler)})
	var ran sync.Map // call id -> *atomic.Int32, the times its handler ran
	HandleRaw(srv, "Drain.Call", func(ctx context.Context, req []byte) ([]byte, error) {
		n, _ := ran.LoadOrStore(binary.BigEndian.Uint64(req), new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if d := req[8]; d > 0 {
			time.Sleep(time.Duration(d) * 100 * time.Microsecond)
		}
		return req, nil
	})
	path := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	type outcome struct {
		id  uint64
		err error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
		started  sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range callers {
		c, err := Dial("unix://"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			first := true
			for seq := uint64(0); ; seq++ {
				id := uint64(w)<<32 | seq
				req := make([]byte, 9)
				binary.BigEndian.PutUint64(req, id)
				req[8] = byte(rand.IntN(20) &^ 15) // most calls without a pause
				var out []byte
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.Invoke(ctx, "Drain.Call", req, &out)
				cancel()
				if err == nil && binary.BigEndian.Uint64(out) != id {
					err = errors.New("reply to another call")
				}
				mu.Lock()
				outcomes = append(outcomes, outcome{id, err})
				mu.Unlock()
				if first {
					first = false
					started.Done()
				}
				if err != nil {
					return // the server is gone
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	started.Wait()
	time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = srv.Shutdown(ctx)
	cancel()
	if err != nil {
		t.Errorf("round %d: Shutdown: %v", round, err)
	}
	close(stop)
	wg.Wait()
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("round %d: Serve returned %v", round, err)
	}
	for _, o := range outcomes {
		var times int32
		if n, ok := ran.Load(o.id); ok {
			times = n.(*atomic.Int32).Load()
		}
		switch {
		case times > 1:
			t.Errorf("round %d: call %x ran %d times", round, o.id, times)
		case o.err == nil && times == 1:
			completed++
		case o.err == nil:
			t.Errorf("round %d: call %x completed but never ran", round, o.id)
		case times == 1:
			t.Errorf("round %d: call %x ran, but its caller was told %v", round, o.id, o.err)
		case !neverProcessed(o.err):
			t.Errorf("round %d: call %x failed as it may have run: %v", round, o.id, o.err)
		default:
			refused++
		}
	}
	return completed, refused
}

// neverProcessed reports an error that tells a caller its call was not
// processed: refused after a drain's GOAWAY, or no connection to send it on.
func neverProcessed(err error) bool {
	if status.CodeOf(err) != status.Unavailable {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return false
	}
	var ce *ConnError
	if errors.As(err, &ce) {
		return false // the connection failed under the call
	}
	return true
}

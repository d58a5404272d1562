package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// Soak request: an 8-byte id and a byte telling the handler what to do.
const (
	soakQuick byte = iota // answer at once
	soakSleep             // sleep up to 2 ms, unless the context ends first
	soakYield             // yield once, then answer
)

// How a soak call is made, and so which outcomes it may have.
const (
	soakPlain    = iota // no deadline, never canceled: only OK
	soakCancel          // canceled after a random short delay: OK or Canceled
	soakDeadline        // a random deadline, some already tight: OK or DeadlineExceeded
	soakBoth            // both: OK, Canceled or DeadlineExceeded
)

// soakStall is how long the soak may go without any call ending before it
// is declared stuck: the goroutines are dumped and the client closed, which
// fails the calls still waiting.
const soakStall = 20 * time.Second

// TestSoak makes many concurrent calls on one client, canceling some and
// giving others deadlines, some already tight, and checks that every call
// ends exactly once with an outcome allowed for it, that every success the
// client saw was a success on the server, and that the server, the
// connection and the goroutines are all in order afterwards.
func TestSoak(t *testing.T) {
	total := 200_000
	if testing.Short() {
		total = 20_000
	}
	const workers = 64
	ignore := goleak.IgnoreCurrent()

	srv := NewServer(&ServerOptions{CallRate: -1})
	var serverOK atomic.Int64
	var completed sync.Map // id of every call whose handler returned success
	HandleRaw(srv, "Soak.Call", func(ctx context.Context, req []byte) ([]byte, error) {
		if len(req) != 10 {
			return nil, status.Errorf(status.InvalidArgument, "request of %d bytes", len(req))
		}
		id := binary.BigEndian.Uint64(req)
		switch req[8] {
		case soakSleep:
			tm := time.NewTimer(time.Duration(req[9]) * 8 * time.Microsecond)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return nil, ctx.Err()
			}
		case soakYield:
			time.Sleep(0)
		}
		serverOK.Add(1)
		completed.Store(id, struct{}{})
		return req, nil
	})

	path := filepath.Join(t.TempDir(), "soak.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	useMode(t, srv)
	go func() { serveErr <- srv.Serve(l) }()
	c, err := Dial("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeAll := func() {
		if closed {
			return
		}
		closed = true
		c.Close()
		srv.Close()
		if err := <-serveErr; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	}
	defer closeAll()

	// One call first, to open the connection the soak must keep.
	var out []byte
	if err := c.Invoke(context.Background(), "Soak.Call", make([]byte, 10), &out); err != nil {
		t.Fatal(err)
	}
	sess := c.pool.Endpoints()[0].Current()

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var (
		next                                       atomic.Int64
		ok, canceled, deadline, unexpected, missed atomic.Int64
		perMode                                    [4]atomic.Int64
	)
	report := func(format string, args ...any) {
		if unexpected.Add(1) <= 10 {
			t.Errorf(format, args...)
		}
	}
	var progress atomic.Int64
	stop := make(chan struct{})
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		last, lastAt := int64(-1), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if p := progress.Load(); p != last {
				last, lastAt = p, time.Now()
				continue
			}
			if time.Since(lastAt) > soakStall {
				var buf strings.Builder
				pprof.Lookup("goroutine").WriteTo(&buf, 1)
				t.Errorf("no call ended for %v after %d calls; goroutines:\n%s", soakStall, last, buf.String())
				c.Close()
				return
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			req := make([]byte, 10)
			var reply []byte
			for {
				id := next.Add(1)
				if id > int64(total) {
					return
				}
				binary.BigEndian.PutUint64(req, uint64(id))
				req[8], req[9] = soakQuick, 0
				switch r := rng.IntN(100); {
				case r < 5:
					req[8], req[9] = soakSleep, byte(rng.IntN(256)) // up to 2 ms
				case r < 15:
					req[8] = soakYield
				}
				mode := soakPlain
				switch r := rng.IntN(100); {
				case r < 20:
					mode = soakCancel
				case r < 40:
					mode = soakDeadline
				case r < 50:
					mode = soakBoth
				}
				perMode[mode].Add(1)
				// Plain calls use a context that cannot end, which a client
				// may serve on a faster path than a cancelable one.
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if mode == soakCancel {
					ctx, cancel = context.WithCancel(context.Background())
				}
				if mode == soakDeadline || mode == soakBoth {
					var d time.Duration
					switch r := rng.IntN(100); {
					case r < 10:
						d = -time.Millisecond // already expired
					case r < 50:
						d = time.Duration(rng.IntN(100)) * time.Microsecond // tight
					default:
						d = time.Duration(rng.IntN(3000)) * time.Microsecond
					}
					ctx, cancel = context.WithTimeout(context.Background(), d)
				}
				var tm *time.Timer
				if mode == soakCancel || mode == soakBoth {
					tm = time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, cancel)
				}
				err := c.Invoke(ctx, "Soak.Call", req, &reply)
				if tm != nil {
					tm.Stop()
				}
				cancel()
				progress.Add(1)
				switch code := status.CodeOf(err); {
				case code == status.OK:
					ok.Add(1)
					if string(reply) != string(req) {
						report("call %d: reply %x, want %x", id, reply, req)
					}
					if _, found := completed.Load(uint64(id)); !found {
						missed.Add(1)
						report("call %d succeeded on the client but its handler never returned success", id)
					}
				case code == status.Canceled && (mode == soakCancel || mode == soakBoth):
					canceled.Add(1)
				case code == status.DeadlineExceeded && (mode == soakDeadline || mode == soakBoth):
					deadline.Add(1)
				default:
					report("call %d (mode %d, handler %d): unexpected outcome %v", id, mode, req[8], err)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	<-monitorDone

	n := ok.Load() + canceled.Load() + deadline.Load() + unexpected.Load()
	t.Logf("%d calls from %d goroutines in %v (%.0f calls/s): ok %d, canceled %d, deadline exceeded %d, unexpected %d",
		n, workers, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), ok.Load(), canceled.Load(), deadline.Load(), unexpected.Load())
	t.Logf("modes: plain %d, cancel %d, deadline %d, both %d; server: %d handler successes, %d calls admitted",
		perMode[soakPlain].Load(), perMode[soakCancel].Load(), perMode[soakDeadline].Load(), perMode[soakBoth].Load(),
		serverOK.Load()-1, srv.Stats().CallsTotal-1)
	if n != int64(total) {
		t.Errorf("%d outcomes for %d calls", n, total)
	}
	if ok.Load() > serverOK.Load()-1 {
		t.Errorf("%d client successes but only %d handler successes", ok.Load(), serverOK.Load()-1)
	}
	if missed.Load() > 0 {
		t.Errorf("%d client successes without a handler success", missed.Load())
	}

	// Every handler ends: canceled ones too.
	for wait := time.Now().Add(5 * time.Second); srv.Stats().Calls != 0; {
		if time.Now().After(wait) {
			t.Fatalf("server still has %d calls in progress", srv.Stats().Calls)
		}
		time.Sleep(time.Millisecond)
	}
	// The same connection is still up and usable.
	if err := c.Invoke(context.Background(), "Soak.Call", make([]byte, 10), &out); err != nil {
		t.Fatalf("call after the soak: %v", err)
	}
	same := c.pool.Endpoints()[0].Current() == sess
	if !same || sess.Err() != nil {
		t.Fatalf("the client reconnected during the soak (first session: %v)", sess.Err())
	}
	if st := srv.Stats(); st.Conns != 1 || st.Calls != 0 || st.Panics != 0 {
		t.Fatalf("server stats after the soak: %+v", st)
	}
	closeAll()
	goleak.VerifyNone(t, ignore)
}

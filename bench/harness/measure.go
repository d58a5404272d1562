package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/warrenipc/warren/bench/systems"
)

// Sample is what one repetition of a case measured.
type Sample struct {
	Elapsed time.Duration
	Calls   int             // calls or messages completed
	Bytes   int64           // bytes moved, for throughput (each message once)
	Lat     []time.Duration // per-call latencies, when measured

	// Allocations during the measurement, client and server together.
	HaveAllocs         bool
	Allocs, AllocBytes uint64
}

// payload returns n pseudo-random bytes, different for each seed, so that
// an echo that returns the wrong caller's bytes (or zeros) is caught.
func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{0: byte(seed), 1: byte(seed >> 8), 2: 'w'}).Read(b)
	return b
}

// checkEvery is how often an echoed reply's content is compared with the
// request (its length is checked every time): often enough that a broken
// system cannot post numbers, rarely enough not to weigh on the timing.
const checkEvery = 64

// allocCounter reads allocation counters of both sides: this process's, and
// the server child's if there is one (in process, this process's counters
// already include the server).
type allocCounter struct {
	srv        *server
	self, peer memStats
	peerOK     bool
}

func (a *allocCounter) start() error {
	var err error
	a.peer, a.peerOK, err = a.srv.mem()
	a.self = readMem()
	return err
}

func (a *allocCounter) stop(s *Sample) error {
	self := readMem()
	s.Allocs, s.AllocBytes = self.Mallocs-a.self.Mallocs, self.TotalAlloc-a.self.TotalAlloc
	peer, ok, err := a.srv.mem()
	if err != nil {
		return err
	}
	if ok != a.peerOK {
		return errors.New("server allocation counters came and went")
	}
	if ok {
		s.Allocs += peer.Mallocs - a.peer.Mallocs
		s.AllocBytes += peer.TotalAlloc - a.peer.TotalAlloc
	}
	s.HaveAllocs = true
	return nil
}

// dialAll opens n connections to sys's server over network. Canceling ctx
// closes them, which ends calls of systems that take no context (net/rpc).
func dialAll(ctx context.Context, sys systems.System, srv *server, network string, n int) ([]systems.Conn, func(), error) {
	var conns []systems.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for range n {
		c, err := sys.Dial(ctx, network, srv.addrs[network])
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("dial %s over %s: %w", sys.Name(), network, err)
		}
		conns = append(conns, c)
	}
	stop := context.AfterFunc(ctx, closeAll)
	return conns, func() {
		if stop() { // not already closed by the AfterFunc
			closeAll()
		}
	}, nil
}

// unary makes calls echo calls of size bytes from callers goroutines, after
// a warm-up, and returns their latencies. Callers share one connection
// unless the system carries one call per connection, in which case each has
// its own.
func unary(ctx context.Context, sys systems.System, srv *server, network string, size, callers, calls int, minTime time.Duration) (Sample, error) {
	nconns := 1
	if sys.OneCallPerConn() {
		nconns = callers
	}
	conns, closeConns, err := dialAll(ctx, sys, srv, network, nconns)
	if err != nil {
		return Sample{}, err
	}
	defer closeConns()

	reqs := make([][]byte, callers)
	cls := make([]systems.Caller, callers)
	for i := range reqs {
		reqs[i] = payload(size, uint64(i))
		cls[i] = conns[i%nconns].Caller()
	}
	// call makes n calls for caller i, recording latencies in lat if it is
	// not nil.
	call := func(i, n int, lat []time.Duration) error {
		cl, req := cls[i], reqs[i]
		for j := range n {
			t0 := time.Now()
			out, err := cl.Echo(ctx, req)
			if lat != nil {
				lat[j] = time.Since(t0)
			}
			if err != nil {
				return fmt.Errorf("%s echo of %d bytes: %w", sys.Name(), size, err)
			}
			if len(out) != size {
				return fmt.Errorf("%s echoed %d bytes for %d", sys.Name(), len(out), size)
			}
			if j%checkEvery == 0 && !bytes.Equal(out, req) {
				return fmt.Errorf("%s echoed different bytes", sys.Name())
			}
		}
		return nil
	}
	run := func(per func(i int) int, lat []time.Duration) (time.Duration, error) {
		var wg sync.WaitGroup
		errs := make([]error, callers)
		start := make(chan struct{})
		off := 0
		for i := range callers {
			n := per(i)
			var l []time.Duration
			if lat != nil {
				l = lat[off : off+n]
			}
			off += n
			wg.Go(func() {
				<-start
				errs[i] = call(i, n, l)
			})
		}
		t0 := time.Now()
		close(start)
		wg.Wait()
		return time.Since(t0), errors.Join(errs...)
	}

	// Warm up connections, buffers, pools and flow-control windows: a
	// tenth of the calls (at least 4 and at most 100 per caller).
	warm := min(max(calls/callers/10, 4), 100)
	warmTime, err := run(func(int) int { return warm }, nil)
	if err != nil {
		return Sample{}, err
	}
	calls = callsFor(calls, callers, warm*callers, warmTime, minTime)

	var s Sample
	s.Calls = calls
	s.Lat = make([]time.Duration, calls)
	ac := allocCounter{srv: srv}
	if err := ac.start(); err != nil {
		return s, err
	}
	s.Elapsed, err = run(func(i int) int {
		n := calls / callers
		if i < calls%callers {
			n++
		}
		return n
	}, s.Lat)
	if err != nil {
		return s, err
	}
	return s, ac.stop(&s)
}

// callsFor is the number of calls a repetition makes: calls, or more if
// that is needed for it to last minTime at the rate of the warm-up (n calls
// in d), rounded up to a multiple of callers.
func callsFor(calls, callers, n int, d, minTime time.Duration) int {
	if minTime <= 0 || n <= 0 || d <= 0 {
		return calls
	}
	need := int(float64(n) * minTime.Seconds() / d.Seconds())
	if need <= calls {
		return calls
	}
	return (need + callers - 1) / callers * callers
}

// streamWindow bounds the messages in flight on a stream, the same for
// every system: enough to keep both directions busy, few enough that a
// system without flow control (ttrpc) is not made to buffer without bound.
const streamWindow = 8

// stream echoes msgs messages of size bytes on one bidirectional stream,
// one goroutine sending while this one receives.
func stream(ctx context.Context, sys systems.System, srv *server, network string, size, msgs int) (Sample, error) {
	conns, closeConns, err := dialAll(ctx, sys, srv, network, 1)
	if err != nil {
		return Sample{}, err
	}
	defer closeConns()
	streamer, ok := conns[0].(systems.Streamer)
	if !ok {
		return Sample{}, fmt.Errorf("%s has no streams", sys.Name())
	}
	st, err := streamer.EchoStream(ctx)
	if err != nil {
		return Sample{}, fmt.Errorf("%s stream: %w", sys.Name(), err)
	}
	msg := payload(size, 1)
	// exchange echoes n messages. On an error it returns at once; a sender
	// still blocked in Send is released when the connection is closed.
	exchange := func(n int) error {
		window := make(chan struct{}, streamWindow)
		failed := make(chan struct{})
		defer close(failed)
		sendErr := make(chan error, 1)
		go func() {
			for range n {
				select {
				case window <- struct{}{}:
				case <-failed:
					return
				}
				if err := st.Send(msg); err != nil {
					sendErr <- err
					return
				}
			}
			sendErr <- nil
		}()
		for i := range n {
			m, err := st.Recv()
			if err != nil {
				return fmt.Errorf("%s stream receive: %w", sys.Name(), err)
			}
			<-window
			if len(m) != size {
				return fmt.Errorf("%s stream echoed %d bytes for %d", sys.Name(), len(m), size)
			}
			if i%(checkEvery/4) == 0 && !bytes.Equal(m, msg) {
				return fmt.Errorf("%s stream echoed different bytes", sys.Name())
			}
		}
		if err := <-sendErr; err != nil {
			return fmt.Errorf("%s stream send: %w", sys.Name(), err)
		}
		return nil
	}
	if err := exchange(4); err != nil { // warm up
		return Sample{}, err
	}
	var s Sample
	ac := allocCounter{srv: srv}
	if err := ac.start(); err != nil {
		return s, err
	}
	t0 := time.Now()
	if err := exchange(msgs); err != nil {
		return s, err
	}
	s.Elapsed = time.Since(t0)
	s.Calls, s.Bytes = msgs, int64(msgs)*int64(size)
	if err := ac.stop(&s); err != nil {
		return s, err
	}
	if err := st.Close(); err != nil {
		return s, fmt.Errorf("%s stream close: %w", sys.Name(), err)
	}
	return s, nil
}

// sink writes total bytes over a bare socket in writes of size bytes and
// waits for the server to have read them all.
func sink(ctx context.Context, srv *server, network string, size int, total int64) (Sample, error) {
	conns, closeConns, err := dialAll(ctx, systems.Raw{}, srv, network, 1)
	if err != nil {
		return Sample{}, err
	}
	defer closeConns()
	buf := payload(size, 1)
	if err := systems.RawSink(conns[0], buf, max(total/8, int64(size))); err != nil { // warm up
		return Sample{}, err
	}
	t0 := time.Now()
	if err := systems.RawSink(conns[0], buf, total); err != nil {
		return Sample{}, err
	}
	return Sample{Elapsed: time.Since(t0), Bytes: total}, nil
}

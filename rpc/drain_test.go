package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
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

	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
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
		// The server is gone for good after its shutdown: retry briefly.
		c, err := Dial("unix://"+path, &ClientOptions{MaxBackoff: time.Millisecond})
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

// TestShutdownAnswersCrossingCalls: a peer keeps opening calls until it
// reads the GOAWAY, so some cross it on the wire. Shutdown reads and answers
// every one (TRAILERS; code 14 above the GOAWAY's last stream id) before it
// closes, and the connection ends with the server's EOF, not a reset. Over
// TCP, on both engines.
func TestShutdownAnswersCrossingCalls(t *testing.T) {
	for _, loop := range []bool{false, true} {
		name := "goroutine"
		if loop {
			name = "eventloop"
		}
		t.Run(name, func(t *testing.T) {
			for round := range 20 {
				crossingRound(t, round, loop)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func crossingRound(t *testing.T, round int, loop bool) {
	srv := NewServer(&ServerOptions{EventLoop: loop, Logger: slog.New(slog.DiscardHandler)})
	HandleRaw(srv, "Drain.Call", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(wire.AppendPreface(nil, wire.Settings{})); err != nil {
		t.Fatal(err)
	}
	if _, err := wire.ReadPreface(conn); err != nil {
		t.Fatal(err)
	}
	var (
		wmu     sync.Mutex // orders the writer's frames with PING acknowledgements
		away    atomic.Bool
		sentMax atomic.Uint32
	)
	inflight := make(chan struct{}, 64) // within MaxStreams
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for id := uint32(1); !away.Load(); id += 2 {
			select {
			case inflight <- struct{}{}:
			case <-time.After(20 * time.Millisecond):
				return // no answers: the connection ended
			}
			b := wire.AppendFrame(nil, id, wire.TypeHeaders, 0, wire.AppendCallHeader(nil, "Drain.Call", 0, 0, nil))
			b = wire.AppendFrame(b, id, wire.TypeData, wire.FlagEnd, []byte("x"))
			wmu.Lock()
			if away.Load() { // a peer opens no stream once it has read the GOAWAY
				wmu.Unlock()
				return
			}
			_, err := conn.Write(b)
			if err == nil {
				sentMax.Store(id)
			}
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	shut := make(chan error, 1)
	go func() {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	answered := map[uint32]uint32{} // stream -> code
	var last uint32
	gotAway := false
	rd := frameio.NewReader(conn, 16<<20)
	var rerr error
	for {
		h, p, err := rd.Next()
		if err != nil {
			rerr = err
			break
		}
		switch h.Type {
		case wire.TypeGoAway:
			last, _, _, _ = wire.ParseGoAway(p)
			gotAway = true
			wmu.Lock()
			away.Store(true)
			wmu.Unlock()
		case wire.TypePing:
			if h.Flags&wire.FlagAck == 0 {
				wmu.Lock()
				conn.Write(wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, p))
				wmu.Unlock()
			}
		case wire.TypeTrailers:
			if _, dup := answered[h.Stream]; dup {
				t.Errorf("round %d: stream %d answered twice", round, h.Stream)
			}
			tr, err := wire.ParseTrailer(p)
			if err != nil {
				t.Fatal(err)
			}
			if !gotAway && tr.Code != 0 {
				t.Errorf("round %d: stream %d ended with %d before the GOAWAY", round, h.Stream, tr.Code)
			}
			answered[h.Stream] = tr.Code
			select {
			case <-inflight:
			default:
			}
		}
	}
	<-writerDone
	if err := <-shut; err != nil {
		t.Errorf("round %d: Shutdown: %v", round, err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Errorf("round %d: Serve returned %v", round, err)
	}
	if rerr != io.EOF {
		t.Errorf("round %d: connection ended with %v, want EOF", round, rerr)
	}
	if !gotAway {
		t.Fatalf("round %d: no GOAWAY", round)
	}
	for id := uint32(1); id <= sentMax.Load(); id += 2 {
		code, ok := answered[id]
		switch {
		case !ok:
			t.Errorf("round %d: stream %d (last stream id %d) never answered", round, id, last)
		case id <= last && code != 0:
			t.Errorf("round %d: stream %d at or below the last stream id %d ended with %d", round, id, last, code)
		case id > last && code != uint32(status.Unavailable):
			t.Errorf("round %d: stream %d above the last stream id %d ended with %d, want 14", round, id, last, code)
		}
	}
}

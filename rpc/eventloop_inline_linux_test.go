//go:build linux

package rpc

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Calls run inline on the event loop (internal/eventloop, inline_linux.go).

// handlerPlace records where a handler ran: "loop" inline on the event
// loop, "worker" on a worker goroutine.
func handlerPlace() string {
	buf := make([]byte, 64<<10)
	st := string(buf[:runtime.Stack(buf, false)])
	switch {
	case strings.Contains(st, "eventloop.(*evLoop).runInline"):
		return "loop"
	case strings.Contains(st, "rpc.(*Server).worker"):
		return "worker"
	}
	return "elsewhere:\n" + st
}

// twoLoopClients serves srv from an event loop and returns two clients of
// it, on two connections, closed when the test ends.
func twoLoopClients(t *testing.T, srv *Server) (a, b *Client) {
	e := startLoop(t, srv)
	var cs [2]*Client
	for i := range cs {
		c, err := Dial(e.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		checkServing(t, c, fmt.Sprint("client ", i))
		cs[i] = c
	}
	return cs[0], cs[1]
}

// TestEventLoopInlinePlace: small unary calls run on the loop (over
// WebSocket too); with NoInline, or with a request larger than inlineMax,
// on a worker.
func TestEventLoopInlinePlace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noInline bool
		size     int
		want     string
	}{
		{"small", false, 100, "loop"},
		{"large", false, inlineMax + 1, "worker"},
		{"NoInline", true, 100, "worker"},
		{"ws", false, 100, "loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := loopServer(&ServerOptions{NoInline: tc.noInline})
			places := make(chan string, 1)
			HandleRaw(srv, "Inline.Where", func(ctx context.Context, req []byte) ([]byte, error) {
				places <- handlerPlace()
				return req, nil
			})
			var c *Client
			if tc.name == "ws" {
				c = startWS(t, srv, "ws").client(t, nil)
			} else {
				var err error
				if c, err = Dial(startLoop(t, srv).addr, nil); err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			req := bytes.Repeat([]byte{'x'}, tc.size)
			var out []byte
			if err := c.Invoke(context.Background(), "Inline.Where", req, &out); err != nil || !bytes.Equal(out, req) {
				t.Fatalf("reply of %d bytes, %v", len(out), err)
			}
			if p := <-places; p != tc.want {
				t.Fatalf("ran on %s; want %s", p, tc.want)
			}
		})
	}
}

// TestEventLoopInlineBlockedHandler: a handler that blocks on the loop
// holds up neither the other connections nor the other calls of its own
// connection: the loop is taken over after about eventloop.InlineBudget. The
// blocked call still gets its reply once it returns.
func TestEventLoopInlineBlockedHandler(t *testing.T) {
	srv := loopServer(nil)
	entered, release := make(chan struct{}), make(chan struct{})
	HandleRaw(srv, "Inline.Block", func(ctx context.Context, req []byte) ([]byte, error) {
		close(entered)
		<-release
		return []byte("released"), nil
	})
	a, b := twoLoopClients(t, srv)

	blocked := make(chan error, 1)
	go func() {
		var out []byte
		err := a.Invoke(context.Background(), "Inline.Block", []byte("b"), &out)
		if err == nil && string(out) != "released" {
			err = fmt.Errorf("reply %q", out)
		}
		blocked <- err
	}()
	select {
	case <-entered:
	case err := <-blocked:
		t.Fatalf("the blocking call ended: %v", err)
	}
	for _, c := range []*Client{b, a} { // another connection, then the blocked call's own
		for i := range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			msg := fmt.Sprint("call ", i)
			var out []byte
			err := c.Invoke(ctx, "Bad.Echo", []byte(msg), &out)
			cancel()
			if err != nil || string(out) != msg {
				t.Fatalf("call %d while a handler blocks: %q %v", i, out, err)
			}
		}
	}
	select {
	case err := <-blocked:
		t.Fatalf("the blocked call ended early: %v", err)
	default:
	}
	if n := srv.ev.Takeovers.Load(); n == 0 {
		t.Error("no takeover")
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	checkServing(t, a, "a after the release")
	waitCalls(t, srv, 0)
}

// TestEventLoopInlineStall: while handlers sleep on the loop, another
// connection's calls keep completing (the loop is taken over after about
// eventloop.InlineBudget), and the latencies show how long they were held up.
func TestEventLoopInlineStall(t *testing.T) {
	const nap = 200 * time.Millisecond
	srv := loopServer(nil)
	type window struct{ from, to time.Time }
	var mu sync.Mutex
	var naps []window // the sleeps that began on the loop (others began on a worker: the round's budget was spent)
	HandleRaw(srv, "Inline.Sleep", func(ctx context.Context, req []byte) ([]byte, error) {
		onLoop := handlerPlace() == "loop"
		from := time.Now()
		time.Sleep(nap)
		if onLoop {
			mu.Lock()
			naps = append(naps, window{from, time.Now()})
			mu.Unlock()
		}
		return req, nil
	})
	a, b := twoLoopClients(t, srv)
	before := srv.ev.Takeovers.Load()

	done := make(chan error, 1)
	go func() {
		for range 5 {
			var out []byte
			if err := a.Invoke(context.Background(), "Inline.Sleep", []byte("z"), &out); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var lat []time.Duration
	var ends []time.Time
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
		}
		start := time.Now()
		var out []byte
		if err := b.Invoke(context.Background(), "Bad.Echo", []byte("e"), &out); err != nil {
			t.Fatal(err)
		}
		end := time.Now()
		lat = append(lat, end.Sub(start))
		ends = append(ends, end)
	}
	// A loop that waited for a handler would complete no call of b's
	// from shortly after the handler began until it returned. On a loaded
	// machine any call may be held up now and then (as in goroutine
	// mode), so most of the sleeps, not all, must see calls complete.
	served := 0
	for _, w := range naps {
		from := w.from.Add(nap / 4)
		i := sort.Search(len(ends), func(i int) bool { return ends[i].After(from) })
		if i < len(ends) && ends[i].Before(w.to) {
			served++
		}
	}
	takeovers := srv.ev.Takeovers.Load() - before
	slices.Sort(lat)
	t.Logf("%d calls while %d handlers slept on the loop (%d takeovers; calls completed during %d of the sleeps): median %v, slowest %v",
		len(lat), len(naps), takeovers, served, lat[len(lat)/2], lat[max(0, len(lat)-5):])
	if takeovers < uint64(len(naps)) {
		t.Errorf("%d takeovers for %d calls sleeping on the loop", takeovers, len(naps))
	}
	if len(naps) > 0 && served < (len(naps)+1)/2 {
		t.Errorf("calls on another connection completed during only %d of %d sleeps on the loop", served, len(naps))
	}
}

// TestEventLoopInlineMixed: many connections mixing short calls with calls
// that run past the budget (each one a takeover) and calls that fail or
// panic; every reply is right and nothing is left running.
func TestEventLoopInlineMixed(t *testing.T) {
	srv := loopServer(&ServerOptions{MaxConnsPerUID: -1})
	HandleRaw(srv, "Inline.Mixed", func(ctx context.Context, req []byte) ([]byte, error) {
		switch req[0] {
		case 's':
			time.Sleep(3 * time.Millisecond)
		case 'p':
			panic("inline panic")
		case 'f':
			return nil, fmt.Errorf("failed")
		}
		return req, nil
	})
	e := startLoop(t, srv)
	const conns, callers, calls = 6, 4, 60
	var wg sync.WaitGroup
	errs := make(chan error, conns*callers)
	for range conns {
		c, err := Dial(e.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for j := range callers {
			wg.Go(func() {
				for i := range calls {
					kind := "e"
					switch (i + j) % 15 {
					case 3:
						kind = "s"
					case 7:
						kind = "p"
					case 11:
						kind = "f"
					}
					msg := fmt.Sprintf("%s %d %d", kind, j, i)
					var out []byte
					err := c.Invoke(context.Background(), "Inline.Mixed", []byte(msg), &out)
					switch {
					case kind == "p" || kind == "f":
						if err == nil {
							errs <- fmt.Errorf("%s: no error", msg)
							return
						}
					case err != nil || string(out) != msg:
						errs <- fmt.Errorf("%s: %q %v", msg, out, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	waitCalls(t, srv, 0)
	t.Logf("%d takeovers", srv.ev.Takeovers.Load())
	if srv.ev.Takeovers.Load() == 0 {
		t.Error("no takeover")
	}
}

// TestEventLoopInlineCloseWhileBlocked: Close ends a server whose loop was
// taken over from a handler that waits for its context: the handler is
// canceled and everything ends (the package's leak check runs at exit).
func TestEventLoopInlineCloseWhileBlocked(t *testing.T) {
	srv := loopServer(nil)
	e := startLoop(t, srv)
	c, err := Dial(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res := make(chan error, 1)
	go func() { res <- c.Invoke(context.Background(), "Bad.Hold", []byte("h"), new([]byte)) }()
	waitLoop(t, "the takeover", func() bool { return srv.ev.Takeovers.Load() > 0 })
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := <-res; err == nil {
		t.Fatal("the held call succeeded")
	}
}

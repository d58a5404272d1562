package rpc

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// countRingMaps counts the mappings of shared-memory rings in this process.
func countRingMaps(t testing.TB) int { return countMaps(t, "/memfd:ring.warren") }

// TestShmRing runs calls over the rings when both sides ask: small and
// large messages (larger than a ring), concurrent callers, descriptors,
// deadlines; and checks the rings are mapped while the connection lives
// and unmapped after.
func TestShmRing(t *testing.T) {
	maps := countRingMaps(t)
	set := wire.Settings{MaxFiles: 16, MaxMessageSize: 128 << 20, ShmRing: 64 << 10}
	c := sharedPair(t, ServerOptions{Settings: set}, ClientOptions{Settings: set})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []int{0, 128, 64 << 10, 1 << 20, 9 << 20} {
		checkEcho(t, ctx, c, n)
	}
	if got := countRingMaps(t); got != maps+2 {
		t.Fatalf("%d ring mappings, want %d (both ends of one connection)", got, maps+2)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := bytes.Repeat([]byte{byte(i)}, 1024)
			for range 200 {
				var out []byte
				if err := c.Invoke(ctx, "T.Echo", &req, &out); err != nil || !bytes.Equal(out, req) {
					errs <- errors.Join(err, errors.New("echo differs"))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A message in a sealed memfd, with its descriptor, through the rings.
	buf, release, err := c.NewSharedBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	var out []byte
	if err := c.Invoke(ctx, "T.Echo", &buf, &out); err != nil || len(out) != len(buf) {
		t.Fatalf("shared buffer: %d bytes, %v", len(out), err)
	}
	// A deadline ends a call whose handler holds it.
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := c.Invoke(short, "T.Block", &out, &out); status.CodeOf(err) != status.DeadlineExceeded {
		t.Fatalf("blocked call: %v", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for countRingMaps(t) != maps {
		if time.Now().After(deadline) {
			t.Fatalf("%d ring mappings after Close, want %d", countRingMaps(t), maps)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShmRingFallback: a side that does not ask, and the event loop,
// keep the frames on the socket.
func TestShmRingFallback(t *testing.T) {
	ring := wire.Settings{ShmRing: 64 << 10}
	for _, tc := range []struct {
		name     string
		srv, cli wire.Settings
		loop     bool
	}{
		{"server does not ask", wire.Settings{}, ring, false},
		{"client does not ask", ring, wire.Settings{}, false},
		{"event loop", ring, ring, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			maps := countRingMaps(t)
			c := sharedPair(t, ServerOptions{Settings: tc.srv, EventLoop: tc.loop}, ClientOptions{Settings: tc.cli})
			req := []byte("hello")
			var out []byte
			if err := c.Invoke(context.Background(), "T.Echo", &req, &out); err != nil || string(out) != "hello" {
				t.Fatalf("echo: %q, %v", out, err)
			}
			if got := countRingMaps(t); got != maps {
				t.Fatalf("%d ring mappings, want %d", got, maps)
			}
		})
	}
}

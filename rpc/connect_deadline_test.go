package rpc

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/warrenipc/warren/status"
)

// TestCallDeadlineWhileConnecting checks that a call's deadline bounds the
// connection's handshake: against a listener that accepts and never
// answers, a call with a 200 ms deadline ends in about 200 ms with
// DeadlineExceeded, not after the 10 s handshake timeout.
func TestCallDeadlineWhileConnecting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mute.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c // never read, never written
		}
	}()
	defer func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	}()
	c, err := Dial("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Call[Empty, Empty](ctx, c, "Any.Method", &Empty{})
	took := time.Since(start)
	if took > 2*time.Second {
		t.Fatalf("call took %v with a 200ms deadline", took)
	}
	if status.CodeOf(err) != status.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	// Cancellation too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel2)
	start = time.Now()
	_, err = Call[Empty, Empty](ctx2, c, "Any.Method", &Empty{})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("canceled call took %v", took)
	}
	if status.CodeOf(err) != status.Canceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled", err)
	}
}

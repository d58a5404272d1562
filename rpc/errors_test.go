package rpc

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/stream"
	"github.com/warrenipc/warren/wire"
)

// serveUnix serves srv on a fresh unix socket and returns its address.
func serveUnix(t *testing.T, srv *Server) string {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return "unix://" + path
}

// TestConnErrorNames checks that the cause of a call whose connection was
// lost matches rpc.ConnError, wire.ConnError and stream.ConnError alike.
func TestConnErrorNames(t *testing.T) {
	srv := NewServer(nil)
	started := make(chan struct{})
	Handle(srv, "Block.Call", func(ctx context.Context, _ *Empty) (*Empty, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	addr := serveUnix(t, srv)
	var mu sync.Mutex
	var conns []net.Conn
	c, err := Dial(addr, &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", addr[len("unix://"):])
		mu.Lock()
		conns = append(conns, conn)
		mu.Unlock()
		return conn, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		<-started
		mu.Lock()
		conns[0].Close()
		mu.Unlock()
	}()
	_, err = Call[Empty, Empty](testCtx(t, 10*time.Second), c, "Block.Call", &Empty{})
	if status.CodeOf(err) != status.Unavailable {
		t.Fatalf("call on a lost connection: %v, want Unavailable", err)
	}
	var ce *ConnError
	var we *wire.ConnError
	var se *stream.ConnError
	if !errors.As(err, &ce) || !errors.As(err, &we) || !errors.As(err, &se) {
		t.Fatalf("%v: errors.As rpc.ConnError %v, wire.ConnError %v, stream.ConnError %v", err, ce != nil, we != nil, se != nil)
	}
	if !ce.Temporary() || ce.Op != "" {
		t.Fatalf("ConnError %+v: Temporary %v", ce, ce.Temporary())
	}
}

// TestGoAwayErrorNames checks that the cause of a call the server refused
// matches rpc.GoAwayError and wire.GoAwayError alike, with the server's
// code as a status.Code.
func TestGoAwayErrorNames(t *testing.T) {
	if os.Geteuid() == 12345 {
		t.Skip("running as uid 12345")
	}
	addr := serveUnix(t, NewServer(&ServerOptions{Policy: peer.AllowUIDs(12345), Logger: slogTo(io.Discard)}))
	c, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = Call[Empty, Empty](testCtx(t, 10*time.Second), c, IntrospectionMethod, &Empty{})
	var ga *GoAwayError
	var wa *wire.GoAwayError
	if !errors.As(err, &ga) || !errors.As(err, &wa) {
		t.Fatalf("refused call: %v, want a *GoAwayError cause", err)
	}
	if ga.Code != status.PermissionDenied || status.CodeOf(err) != status.PermissionDenied {
		t.Fatalf("refused call: %v, GOAWAY code %v, want PermissionDenied", err, ga.Code)
	}
}

// TestConnectionErrorStatus checks PROTOCOL.md, Errors: a call open on a
// connection that its client closes for a protocol error fails with
// Internal; the next call dials again.
func TestConnectionErrorStatus(t *testing.T) {
	dials := 0
	c, err := Dial("unix:///fake", &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
		dials++
		cc, sc := net.Pipe()
		go func() {
			if _, err := wire.ReadPreface(sc); err != nil {
				return
			}
			sc.Write(wire.AppendPreface(nil, wire.Settings{}))
			var hb [wire.HeaderSize]byte
			if _, err := io.ReadFull(sc, hb[:]); err != nil {
				return
			}
			h, _ := wire.ParseHeader(hb[:])
			go io.Copy(io.Discard, sc) // net.Pipe does not buffer
			// An unknown frame type on the call's stream.
			sc.Write(wire.AppendHeader(nil, wire.Header{Stream: h.Stream, Type: 0x9}))
		}()
		return cc, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		_, err = Call[Empty, Empty](testCtx(t, 10*time.Second), c, "Any.Call", &Empty{})
		if status.CodeOf(err) != status.Internal {
			t.Fatalf("call %d: %v, want Internal", i, err)
		}
	}
	if dials != 2 {
		t.Fatalf("%d dials, want 2", dials)
	}
}

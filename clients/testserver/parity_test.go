package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// TestNoReplyMessage pins the Go client's error for a unary call that the
// server ends with OK and no reply: the Python and TypeScript clients raise
// the same code and message (clients/python/tests/test_parity.py,
// clients/ts/test/parity.test.mjs).
func TestNoReplyMessage(t *testing.T) {
	cli, srv := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer srv.Close()
		if _, err := wire.ReadPreface(srv); err != nil {
			t.Error(err)
			return
		}
		if _, err := srv.Write(wire.AppendPreface(nil, wire.Settings{})); err != nil {
			t.Error(err)
			return
		}
		var buf []byte
		b := make([]byte, 4096)
		for {
			n, err := srv.Read(b)
			if err != nil {
				return
			}
			buf = append(buf, b[:n]...)
			for {
				rest, h, _, ok, err := wire.ParseFrame(buf, 1<<20)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					break
				}
				buf = rest
				if h.Type == wire.TypeHeaders {
					tr := wire.AppendTrailer(nil, 0, "", nil, nil)
					if _, err := srv.Write(wire.AppendFrame(nil, h.Stream, wire.TypeTrailers, wire.FlagEnd, tr)); err != nil {
						return
					}
				}
			}
		}
	}()
	c, err := rpc.Dial("pipe", &rpc.ClientOptions{Dialer: func(context.Context, string) (net.Conn, error) { return cli, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out map[string]any
	err = c.Invoke(ctx, "X.Y", map[string]any{}, &out)
	c.Close()
	<-done
	se, ok := err.(*status.Error)
	if !ok || se.Code != status.Internal || se.Message != "X.Y: no reply message" {
		t.Fatalf("got %#v, want internal %q", err, "X.Y: no reply message")
	}
}

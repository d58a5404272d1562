package rpc

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warrenipc/warren/status"
)

// TestConnDuringShutdownUnavailable serves a connection that arrives once
// Shutdown has begun (accepted just before the listener closed). Its GOAWAY
// carries Unavailable, a drain, as PROTOCOL.md says: the client fails over
// (here the redial fails) instead of reporting ResourceExhausted, a limit.
func TestConnDuringShutdownUnavailable(t *testing.T) {
	var logs strings.Builder
	srv := newEchoServer(&ServerOptions{Logger: newTestLogger(&logs, new(sync.Mutex))})
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		conn, err := l.Accept()
		if err != nil {
			return
		}
		srv.ServeConn(conn)
	}()
	var dials atomic.Int32
	c, err := Dial("unix://unused", &ClientOptions{Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
		if dials.Add(1) > 1 {
			return nil, errors.New("no server")
		}
		var d net.Dialer
		return d.DialContext(ctx, "unix", l.Addr().String())
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = Call[echoReq, echoReply](context.Background(), c, "Echo.Say", &echoReq{Text: "x"})
	t.Logf("%v", err)
	if status.CodeOf(err) != status.Unavailable {
		t.Errorf("call on a connection refused during shutdown: %v, want Unavailable", err)
	}
	var ga *GoAwayError
	if errors.As(err, &ga) && ga.Code != status.Unavailable {
		t.Errorf("GOAWAY code %v, want Unavailable", ga.Code)
	}
	c.Close()
	<-served
}

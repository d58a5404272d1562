package grpcbridge_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type httpEnv struct {
	srv  *rpc.Server
	path string
	addr string
	hc   *http.Client
}

// startHTTP serves a new server with the bridge on a socket file until the
// test ends. register adds methods; the counter service is always there.
func startHTTP(t *testing.T, opts *rpc.ServerOptions, register func(*rpc.Server)) *httpEnv {
	t.Helper()
	if opts == nil {
		opts = &rpc.ServerOptions{}
	}
	opts.Bridge = grpcbridge.New()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := rpc.NewServer(opts)
	counter.New().Register(srv)
	if register != nil {
		register(srv)
	}
	path := filepath.Join(t.TempDir(), "h.sock")
	addr := "unix://" + path
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	e := &httpEnv{srv: srv, path: path, addr: addr, hc: rpc.HTTPClient(addr, nil)}
	t.Cleanup(func() {
		e.hc.CloseIdleConnections()
		srv.Close()
		if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return e
}

// setCounter dials the server over warren, for the rest of the test, and
// sets counter name to value.
func (e *httpEnv) setCounter(t *testing.T, name string, value int64) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := rpc.Call[counter.SetRequest, counter.Entry](t.Context(), c, "Counter.Set", &counter.SetRequest{Name: name, Value: value}); err != nil {
		t.Fatal(err)
	}
	return c
}

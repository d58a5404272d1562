package grpcunary

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// serve starts a warren server with the gRPC bridge and the counter
// service on a loopback TCP port, requiring token.
func serve(t *testing.T, token string) string {
	t.Helper()
	ln, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New(), Auth: &rpc.TokenAuth{Token: token}})
	store := counter.New()
	store.Register(srv)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		store.Shutdown()
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func TestCall(t *testing.T) {
	addr := serve(t, "sesame")
	c := New(addr, http.Header{"Authorization": {"Bearer sesame"}})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var e counter.Entry
	if err := c.Call(ctx, "/warren.counter.v1.Counter/Set", &counter.SetRequest{Name: "a", Value: 4}, &e); err != nil {
		t.Fatal(err)
	}
	by := int64(3)
	if err := c.Call(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "a", By: &by}, &e); err != nil || e.Value != 7 {
		t.Fatalf("Inc: %v, %v; want 7", &e, err)
	}
	// An error in the trailers (or trailers-only headers): its code and message.
	err := c.Call(ctx, "/warren.counter.v1.Counter/Get", &counter.GetRequest{Name: "nope"}, &e)
	if se := status.FromError(err); se.Code != status.NotFound || se.Message == "" {
		t.Fatalf("Get of a missing counter: %v", err)
	}
	if err := c.Call(ctx, "/warren.counter.v1.Counter/Nope", &counter.GetRequest{}, &e); status.CodeOf(err) != status.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
	// Without the token.
	bare := New(addr, nil)
	defer bare.Close()
	if err := bare.Call(ctx, "/warren.counter.v1.Counter/Get", &counter.GetRequest{Name: "a"}, &e); status.CodeOf(err) != status.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
}

// TestHTTPStatus: an answer without grpc-status, as a load balancer gives
// when it has no server, maps to the gRPC code of its HTTP status.
func TestHTTPStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	})}
	go hs.Serve(ln)
	defer hs.Close()
	c := New(ln.Addr().String(), nil)
	defer c.Close()
	err = c.Call(context.Background(), "/x.Y/Z", &counter.GetRequest{}, &counter.Entry{})
	if status.CodeOf(err) != status.Unavailable {
		t.Fatalf("502: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Call(ctx, "/x.Y/Z", &counter.GetRequest{}, &counter.Entry{})
	if status.CodeOf(err) != status.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func FuzzDecodeReply(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 10, 0})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e counter.Entry
		if err := decodeReply(b, &e); err != nil && status.CodeOf(err) != status.Internal {
			t.Fatalf("code %v", status.CodeOf(err))
		}
	})
}

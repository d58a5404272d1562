package connect_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// TestGRPCGoDrain shuts a server down while gRPC-Go's client calls it over
// HTTP/2 with a health Watch open: the Watch gets NOT_SERVING, then ends
// with Unavailable; every Counter.Inc call either completed (the handler
// ran and the client got its reply) or failed with Unavailable without the
// handler running (gRPC-Go retries a stream above the GOAWAY's last stream
// id on a new connection, which the closed listener refuses).
func TestGRPCGoDrain(t *testing.T) {
	var ok, failed int
	for range 10 {
		o, f := grpcDrainRound(t)
		ok, failed = ok+o, failed+f
	}
	t.Logf("gRPC-Go, 10 shutdowns under load: %d calls completed, %d failed as never processed", ok, failed)
}

func grpcDrainRound(t *testing.T) (ok, failed int) {
	var processed atomic.Int64
	count := func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
		out, err := next(ctx, req)
		if err == nil && strings.HasSuffix(info.Method, "Inc") {
			processed.Add(1)
		}
		return out, err
	}
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New(), Interceptors: []rpc.UnaryServerInterceptor{count}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	counter.New().Register(srv)
	path := filepath.Join(t.TempDir(), "g.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	conn, err := grpc.NewClient("passthrough:///warren",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first: %v %v", r, err)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	var started atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				started.Add(1)
				var e counter.Entry
				err := conn.Invoke(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "n"}, &e)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					ok++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	for started.Load() < 64 {
		time.Sleep(time.Millisecond)
	}
	shutCtx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(shutCtx) }()
	if r, err := watch.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("once the drain starts: %v %v", r, err)
	}
	if r, err := watch.Recv(); grpcstatus.Code(err) != codes.Unavailable {
		t.Fatalf("the watch ended with %v %v, want Unavailable", r, err)
	}
	wg.Wait()
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := int(processed.Load()); got != ok {
		t.Fatalf("%d calls completed for the client, %d processed by the server (errors %v)", ok, got, errs)
	}
	for _, err := range errs {
		if grpcstatus.Code(err) != codes.Unavailable || strings.Contains(err.Error(), "reset") {
			t.Fatalf("a call failed with %v, want Unavailable (never processed), no reset", err)
		}
	}
	return ok, len(errs)
}

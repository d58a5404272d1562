package connect_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// TestGRPCGo calls the counter service with gRPC-Go's client over a unix
// socket (HTTP/2 with prior knowledge): unary calls by full name, a server
// stream, an error's code, health and server reflection.
func TestGRPCGo(t *testing.T) {
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
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

	var e counter.Entry
	if err := conn.Invoke(ctx, "/warren.counter.v1.Counter/Set", &counter.SetRequest{Name: "g", Value: 1 << 62}, &e); err != nil || e.Value != 1<<62 {
		t.Fatalf("Set: %v %v", &e, err)
	}
	if err := conn.Invoke(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "g"}, &e); err != nil || e.Value != 1<<62+1 {
		t.Fatalf("Inc: %v %v", &e, err)
	}
	err = conn.Invoke(ctx, "/warren.counter.v1.Counter/Get", &counter.GetRequest{Name: "nope"}, &e)
	if st := grpcstatus.Convert(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), `no counter named "nope"`) {
		t.Fatalf("Get of a missing counter: %v", err)
	}
	err = conn.Invoke(ctx, "/warren.counter.v1.Counter/Nope", &counter.GetRequest{}, &e)
	if grpcstatus.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}

	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	ws, err := conn.NewStream(wctx, &grpc.StreamDesc{ServerStreams: true}, "/warren.counter.v1.Counter/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.SendMsg(&counter.WatchRequest{Name: "g"}); err != nil {
		t.Fatal(err)
	}
	ws.CloseSend()
	if err := ws.RecvMsg(&e); err != nil || e.Value != 1<<62+1 {
		t.Fatalf("watched: %v %v", &e, err)
	}
	if err := ws.RecvMsg(&e); grpcstatus.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("after the deadline: %v", err)
	}

	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "warren.counter.v1.Counter"})
	if err != nil || hr.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hr, err)
	}

	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "grpc.health.v1.Health warren.counter.v1.Counter" {
		t.Fatalf("reflection lists %v", names)
	}
	rs.CloseSend()
	if _, err := rs.Recv(); err != io.EOF {
		t.Fatalf("reflection end: %v", err)
	}
}

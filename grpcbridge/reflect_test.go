package grpcbridge_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/proto"

	"github.com/warrenipc/warren/rpc"
)

// TestReflectionAndHealth lists the services through gRPC server
// reflection (v1 and v1alpha), fetches the counter's schema, and checks
// health, in each protocol over HTTP/2 with prior knowledge, and health
// over HTTP/1.1 too.
func TestReflectionAndHealth(t *testing.T) {
	e := startHTTP(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pc := range []protoCase{{protocol: "grpc", http2: true}, {protocol: "connect", http2: true}, {protocol: "grpcweb", http2: true}, {protocol: "connect"}} {
		hc := pc.httpClient(e.path)
		defer hc.CloseIdleConnections()
		for _, alpha := range []bool{false, true} {
			if !pc.http2 {
				break // reflection is a bidi stream: HTTP/2 only
			}
			var rhc connect.HTTPClient = hc
			if alpha {
				// v1alpha has the same messages under another name.
				rhc = toV1Alpha{hc}
			}
			rc := grpcreflect.NewClient(rhc, "http://w", pc.options()...)
			st := rc.NewStream(ctx)
			names, err := st.ListServices()
			if err != nil || fmt.Sprint(names) != "[grpc.health.v1.Health warren.counter.v1.Counter]" {
				t.Fatalf("%v alpha=%v: services %v %v", pc, alpha, names, err)
			}
			files, err := st.FileContainingSymbol("warren.counter.v1.Counter")
			if err != nil || len(files) == 0 || files[0].GetPackage() != "warren.counter.v1" || len(files[0].GetService()[0].GetMethod()) != 5 {
				t.Fatalf("%v: schema %v %v", pc, files, err)
			}
			if _, err := st.FileContainingSymbol("warren.counter.v1.Nope"); connect.CodeOf(err) != connect.CodeNotFound {
				t.Fatalf("%v: unknown symbol: %v", pc, err)
			}
			if _, err := st.Close(); err != nil {
				t.Fatal(err)
			}
		}
		health := grpchealth.NewClient(hc, "http://w", pc.options()...)
		for _, svc := range []string{"", "warren.counter.v1.Counter"} {
			r, err := health.Check(ctx, &grpchealth.CheckRequest{Service: svc})
			if err != nil || r.Status != grpchealth.StatusServing {
				t.Fatalf("%v: health of %q: %v %v", pc, svc, r, err)
			}
		}
		if _, err := health.Check(ctx, &grpchealth.CheckRequest{Service: "nope.Nope"}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%v: health of an unknown service: %v", pc, err)
		}
	}
	e.srv.Shutdown(ctx)
}

// toV1Alpha sends reflection requests to the v1alpha service.
type toV1Alpha struct{ hc *http.Client }

func (c toV1Alpha) Do(r *http.Request) (*http.Response, error) {
	r.URL.Path = strings.Replace(r.URL.Path, "grpc.reflection.v1.", "grpc.reflection.v1alpha.", 1)
	return c.hc.Do(r)
}

// TestReflectionLimits: reflection and health calls count against the
// server's limits like any other call. With MaxCalls 4, four reflection
// streams held open take every slot; a flood of 40 more streams and a
// health check are refused with ResourceExhausted, at once, and nothing is
// left counted; once the four end, reflection and health work again. The
// interceptors see every call that was admitted, by its full name.
func TestReflectionLimits(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(m string) { mu.Lock(); seen[m]++; mu.Unlock() }
	e := startHTTP(t, &rpc.ServerOptions{
		MaxCalls: 4,
		Interceptors: []rpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
			// grpchealth's own copy of the message, in a package of its own.
			if m, ok := req.(proto.Message); !ok || !strings.HasSuffix(string(m.ProtoReflect().Descriptor().FullName()), ".grpc.health.v1.HealthCheckRequest") {
				t.Errorf("%s: request %T", info.Method, req)
			}
			note(info.Method)
			return next(ctx, req)
		}},
		StreamInterceptors: []rpc.StreamServerInterceptor{func(ctx context.Context, info *rpc.CallInfo, next func(context.Context) error) error {
			note(info.Method)
			return next(ctx)
		}},
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pc := protoCase{protocol: "grpc", http2: true}
	hc := pc.httpClient(e.path)
	defer hc.CloseIdleConnections()
	rc := grpcreflect.NewClient(hc, "http://w", pc.options()...)
	health := grpchealth.NewClient(hc, "http://w", pc.options()...)

	var held []*grpcreflect.ClientStream
	for range 4 {
		st := rc.NewStream(ctx)
		if _, err := st.ListServices(); err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	if n := e.srv.Stats().Calls; n != 4 {
		t.Fatalf("%d calls in progress with four streams open, want 4", n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Go(func() {
			st := rc.NewStream(ctx)
			_, err := st.ListServices()
			st.Close()
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "too many concurrent calls on this server (limit 4)") {
			t.Fatalf("a stream past MaxCalls: %v", err)
		}
	}
	if _, err := health.Check(ctx, &grpchealth.CheckRequest{}); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("a health check past MaxCalls: %v", err)
	}
	if st := e.srv.Stats(); st.Calls != 4 || st.Refused < 41 {
		t.Fatalf("after the flood: %+v", st)
	}
	for _, st := range held {
		if _, err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.Stats().Calls != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := e.srv.Stats().Calls; n != 0 {
		t.Fatalf("%d calls still counted after the streams ended", n)
	}
	if r, err := health.Check(ctx, &grpchealth.CheckRequest{}); err != nil || r.Status != grpchealth.StatusServing {
		t.Fatalf("health after the streams ended: %v %v", r, err)
	}
	st := rc.NewStream(ctx)
	if _, err := st.ListServices(); err != nil {
		t.Fatalf("reflection after the streams ended: %v", err)
	}
	st.Close()
	mu.Lock()
	defer mu.Unlock()
	if seen["grpc.reflection.v1.ServerReflection.ServerReflectionInfo"] != 5 || seen["grpc.health.v1.Health.Check"] != 1 || len(seen) != 2 {
		t.Fatalf("interceptors saw %v", seen)
	}
}

// TestReflectionPerConn: MaxCallsPerConn bounds reflection streams on one
// HTTP/2 connection; another connection still gets its own.
func TestReflectionPerConn(t *testing.T) {
	e := startHTTP(t, &rpc.ServerOptions{MaxCallsPerConn: 2}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc := protoCase{protocol: "grpc", http2: true}
	var clients []*http.Client
	for range 2 {
		hc := pc.httpClient(e.path)
		defer hc.CloseIdleConnections()
		clients = append(clients, hc)
	}
	rc := grpcreflect.NewClient(clients[0], "http://w", pc.options()...)
	var held []*grpcreflect.ClientStream
	for range 2 {
		st := rc.NewStream(ctx)
		if _, err := st.ListServices(); err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	st := rc.NewStream(ctx)
	if _, err := st.ListServices(); connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "on this connection (limit 2)") {
		t.Fatalf("a third stream on the connection: %v", err)
	}
	st.Close()
	other := grpcreflect.NewClient(clients[1], "http://w", pc.options()...).NewStream(ctx)
	if _, err := other.ListServices(); err != nil {
		t.Fatalf("a stream on another connection: %v", err)
	}
	other.Close()
	for _, st := range held {
		st.Close()
	}
}

// TestHealthInterceptorPanic: a panic in an interceptor around a health
// check is the call's Internal error, counted, and the call's slot is
// released.
func TestHealthInterceptorPanic(t *testing.T) {
	e := startHTTP(t, &rpc.ServerOptions{
		Interceptors: []rpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
			panic("interceptor")
		}},
	}, nil)
	pc := protoCase{protocol: "grpc", http2: true}
	hc := pc.httpClient(e.path)
	defer hc.CloseIdleConnections()
	_, err := grpchealth.NewClient(hc, "http://w", pc.options()...).Check(context.Background(), &grpchealth.CheckRequest{})
	if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "handler for grpc.health.v1.Health.Check panicked") {
		t.Fatalf("health check: %v", err)
	}
	if st := e.srv.Stats(); st.Panics != 1 || st.Calls != 0 {
		t.Fatalf("stats after the panic: %+v", st)
	}
}

// TestHealthWatch watches the server's health with grpchealth's client over
// gRPC: SERVING, then NOT_SERVING as soon as Shutdown starts, and the end
// of the stream when the server closes.
func TestHealthWatch(t *testing.T) {
	e := startHTTP(t, nil, nil)
	pc := protoCase{protocol: "grpc", http2: true}
	hc := pc.httpClient(e.path)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	health := grpchealth.NewClient(hc, "http://w", pc.options()...)
	if ev := <-health.Watch(ctx, &grpchealth.CheckRequest{Service: "nope.Nope"}); connect.CodeOf(ev.Err) != connect.CodeNotFound {
		t.Fatalf("watch of an unknown service: %+v", ev)
	}
	events := health.Watch(ctx, &grpchealth.CheckRequest{})
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusServing {
		t.Fatalf("first: %+v", ev)
	}
	grace, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	shut := make(chan struct{})
	go func() {
		e.srv.Shutdown(grace) // the watch holds it to the end of the grace period
		close(shut)
	}()
	if ev := <-events; ev.Err != nil || ev.Response.Status != grpchealth.StatusNotServing {
		t.Fatalf("once the drain starts: %+v", ev)
	}
	for range events { // ends, with or without an error, once the server closes
	}
	<-shut
}

package grpcbridge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
)

// protoCase is one way a stock client reaches the server.
type protoCase struct {
	protocol string // connect, grpc, grpcweb
	http2    bool   // HTTP/2 with prior knowledge, else HTTP/1.1
	json     bool   // protojson, else binary protobuf
	gzip     bool   // requests compressed with gzip
}

func (pc protoCase) String() string {
	s := pc.protocol
	if pc.http2 {
		s += "/h2c"
	} else {
		s += "/http1"
	}
	if pc.json {
		s += "/json"
	} else {
		s += "/proto"
	}
	if pc.gzip {
		s += "/gzip"
	}
	return s
}

func protoCases() []protoCase {
	var out []protoCase
	for _, p := range []string{"connect", "grpc", "grpcweb"} {
		for _, h2 := range []bool{false, true} {
			for _, js := range []bool{false, true} {
				for _, gz := range []bool{false, true} {
					out = append(out, protoCase{p, h2, js, gz})
				}
			}
		}
	}
	return out
}

// httpClient returns an http.Client dialing path, over HTTP/1.1 or over
// HTTP/2 with prior knowledge.
func (pc protoCase) httpClient(path string) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	if pc.http2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr}
}

// forEachProtoCase runs f as a subtest for every protoCase, with an HTTP
// client for the socket at path and a context that ends in 10 s.
func forEachProtoCase(t *testing.T, path string, f func(t *testing.T, pc protoCase, hc *http.Client, ctx context.Context)) {
	for _, pc := range protoCases() {
		t.Run(pc.String(), func(t *testing.T) {
			hc := pc.httpClient(path)
			defer hc.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f(t, pc, hc, ctx)
		})
	}
}

func (pc protoCase) options() []connect.ClientOption {
	var opts []connect.ClientOption
	switch pc.protocol {
	case "grpc":
		opts = append(opts, connect.WithGRPC())
	case "grpcweb":
		opts = append(opts, connect.WithGRPCWeb())
	}
	if pc.json {
		opts = append(opts, connect.WithProtoJSON())
	}
	if pc.gzip {
		opts = append(opts, connect.WithSendGzip())
	}
	return opts
}

// TestConnectProtocols calls the counter service and streaming test
// methods with connect-go's client in every protocol, HTTP version, codec
// and compression the server speaks, on one unix socket.
func TestConnectProtocols(t *testing.T) {
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.HandleClientStream(srv, "Num.Sum", func(ctx context.Context, st *rpc.Stream[wrapperspb.Int64Value, wrapperspb.Int64Value]) (*wrapperspb.Int64Value, error) {
			var sum int64
			for {
				n, err := st.Recv()
				if err == io.EOF {
					rpc.SetTrailer(ctx, rpc.Metadata{"count": {"done"}})
					return wrapperspb.Int64(sum), nil
				}
				if err != nil {
					return nil, err
				}
				sum += n.Value
			}
		})
		rpc.HandleBidiStream(srv, "Num.Running", func(ctx context.Context, st *rpc.Stream[wrapperspb.Int64Value, wrapperspb.Int64Value]) error {
			var sum int64
			for {
				n, err := st.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				sum += n.Value
				if err := st.Send(wrapperspb.Int64(sum)); err != nil {
					return err
				}
			}
		})
	})
	forEachProtoCase(t, e.path, func(t *testing.T, pc protoCase, hc *http.Client, ctx context.Context) {
		opts := pc.options()
		name := strings.ReplaceAll(pc.String(), "/", "-")
		// The full name, as generated clients call it, and the short
		// names warren's users already use.
		set := connect.NewClient[counter.SetRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Set", opts...)
		inc := connect.NewClient[counter.IncRequest, counter.Entry](hc, "http://w/Counter/Inc", opts...)
		get := connect.NewClient[counter.GetRequest, counter.Entry](hc, "http://w/Counter.Get", opts...)
		r, err := set.CallUnary(ctx, connect.NewRequest(&counter.SetRequest{Name: name, Value: 1 << 60}))
		if err != nil || r.Msg.Value != 1<<60 {
			t.Fatalf("Set: %v %v", r, err)
		}
		by := int64(-5)
		r, err = inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: name, By: &by}))
		if err != nil || r.Msg.Value != 1<<60-5 {
			t.Fatalf("Inc: %v %v", r, err)
		}
		_, err = get.CallUnary(ctx, connect.NewRequest(&counter.GetRequest{Name: "nope-" + name}))
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || !strings.Contains(ce.Message(), "no counter named") {
			t.Fatalf("Get of a missing counter: %v", err)
		}
		_, err = connect.NewClient[counter.GetRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Nope", opts...).
			CallUnary(ctx, connect.NewRequest(&counter.GetRequest{}))
		if connect.CodeOf(err) != connect.CodeUnimplemented {
			t.Fatalf("unknown method: %v", err)
		}

		// A server stream: the current value, a change, then the
		// deadline.
		watch := connect.NewClient[counter.WatchRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Watch", opts...)
		wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer wcancel()
		ws, err := watch.CallServerStream(wctx, connect.NewRequest(&counter.WatchRequest{Name: name}))
		if err != nil {
			t.Fatal(err)
		}
		if !ws.Receive() || ws.Msg().Value != 1<<60-5 {
			t.Fatalf("first watched: %v %v", ws.Msg(), ws.Err())
		}
		if _, err := inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: name})); err != nil {
			t.Fatal(err)
		}
		if !ws.Receive() || ws.Msg().Value != 1<<60-4 {
			t.Fatalf("second watched: %v %v", ws.Msg(), ws.Err())
		}
		if ws.Receive() || connect.CodeOf(ws.Err()) != connect.CodeDeadlineExceeded {
			t.Fatalf("after the deadline: %v", ws.Err())
		}
		ws.Close()

		// A client stream, with a trailer.
		cs := connect.NewClient[wrapperspb.Int64Value, wrapperspb.Int64Value](hc, "http://w/Num/Sum", opts...).CallClientStream(ctx)
		for i := int64(1); i <= 4; i++ {
			if err := cs.Send(wrapperspb.Int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		sum, err := cs.CloseAndReceive()
		if err != nil || sum.Msg.Value != 10 || sum.Trailer().Get("Count") != "done" {
			t.Fatalf("client stream: %v %v", sum, err)
		}

		// A full-duplex bidi stream needs HTTP/2 (gRPC-Web and
		// Connect allow it nowhere else either).
		if !pc.http2 {
			return
		}
		bs := connect.NewClient[wrapperspb.Int64Value, wrapperspb.Int64Value](hc, "http://w/Num/Running", opts...).CallBidiStream(ctx)
		for i := int64(1); i <= 3; i++ {
			if err := bs.Send(wrapperspb.Int64(i)); err != nil {
				t.Fatal(err)
			}
			got, err := bs.Receive()
			if err != nil || got.Value != i*(i+1)/2 {
				t.Fatalf("bidi %d: %v %v", i, got, err)
			}
		}
		bs.CloseRequest()
		if _, err := bs.Receive(); !errors.Is(err, io.EOF) {
			t.Fatalf("bidi end: %v", err)
		}
		bs.CloseResponse()
	})
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 0 })
}

// TestConnectPolicies checks that calls through connect-go are admitted
// like warren calls: a method policy and the interceptors apply.
func TestConnectPolicies(t *testing.T) {
	var seen []string
	e := startHTTP(t, &rpc.ServerOptions{
		Interceptors: []rpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
			seen = append(seen, info.Method)
			return next(ctx, req)
		}},
	}, func(srv *rpc.Server) {
		rpc.Handle(srv, "Locked.Get", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return req, nil
		}, rpc.WithPolicy(peer.PolicyFunc(func(*peer.Peer) error { return errors.New("nobody") })))
	})
	pc := protoCase{protocol: "grpc", http2: true}
	hc := pc.httpClient(e.path)
	defer hc.CloseIdleConnections()
	ctx := context.Background()
	_, err := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](hc, "http://w/Locked/Get", pc.options()...).
		CallUnary(ctx, connect.NewRequest(wrapperspb.String("x")))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("policy: %v", err)
	}
	set := connect.NewClient[counter.SetRequest, counter.Entry](hc, "http://w/warren.counter.v1.Counter/Set", pc.options()...)
	if _, err := set.CallUnary(ctx, connect.NewRequest(&counter.SetRequest{Name: "p"})); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[Counter.Set]" {
		t.Fatalf("interceptor saw %v", seen)
	}
}

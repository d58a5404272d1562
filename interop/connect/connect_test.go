// Package connect_test checks warren's HTTP bridge against a Connect client
// nobody here wrote: connectrpc.com/connect's Go client, over a unix socket
// served by rpc.Server.
//
//	cd interop/connect && go test -race ./...
package connect_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jsonCodec lets the Connect client send plain Go structs as JSON; its
// built-in codecs need proto.Message values.
type jsonCodec struct{}

func (jsonCodec) Name() string                    { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// env is a warren server with the counter service on a socket file and an
// http.Client whose transport dials that socket.
type env struct {
	srv *rpc.Server
	hc  *http.Client
}

const base = "http://warren" // any host: the transport dials the socket

func start(t *testing.T, register func(*rpc.Server)) *env {
	t.Helper()
	srv := rpc.NewServer(&rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler), Bridge: grpcbridge.New()})
	counter.New().Register(srv)
	if register != nil {
		register(srv)
	}
	path := filepath.Join(t.TempDir(), "c.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	e := &env{srv: srv, hc: &http.Client{Transport: tr}}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		<-done
	})
	return e
}

// client returns a Connect client for method: with connect-go's default
// codec (protobuf) for protobuf messages, with jsonCodec for the plain Go
// types of JSON-only methods.
func client[Req, Res any](e *env, method string, opts ...connect.ClientOption) *connect.Client[Req, Res] {
	if _, ok := any(new(Req)).(proto.Message); !ok && len(opts) == 0 {
		opts = []connect.ClientOption{connect.WithCodec(jsonCodec{})}
	}
	return connect.NewClient[Req, Res](e.hc, base+method, opts...)
}

func TestUnary(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	set := client[counter.SetRequest, counter.Entry](e, "/Counter/Set")
	get := client[counter.GetRequest, counter.Entry](e, "/Counter/Get")
	inc := client[counter.IncRequest, counter.Entry](e, "/Counter.Inc") // warren's spelling works too

	resp, err := set.CallUnary(ctx, connect.NewRequest(&counter.SetRequest{Name: "a", Value: 10}))
	if err != nil || resp.Msg.Name != "a" || resp.Msg.Value != 10 {
		t.Fatalf("Set: %v %v", resp, err)
	}
	by := int64(5)
	resp, err = inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: "a", By: &by}))
	if err != nil || resp.Msg.Value != 15 {
		t.Fatalf("Inc: %v %v", resp, err)
	}
	resp, err = inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: "a"}))
	if err != nil || resp.Msg.Value != 16 {
		t.Fatalf("Inc: %v %v", resp, err)
	}
	resp, err = get.CallUnary(ctx, connect.NewRequest(&counter.GetRequest{Name: "a"}))
	if err != nil || resp.Msg.Value != 16 {
		t.Fatalf("Get: %v %v", resp, err)
	}

	_, err = get.CallUnary(ctx, connect.NewRequest(&counter.GetRequest{Name: "missing"}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), `no counter named "missing"`) {
		t.Fatalf("Get of a missing counter: %v (code %v)", err, connect.CodeOf(err))
	}
	_, err = inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Inc without a name: %v", err)
	}
	_, err = client[counter.GetRequest, counter.Entry](e, "/Counter/Reset").CallUnary(ctx, connect.NewRequest(&counter.GetRequest{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("unknown method: %v", err)
	}
}

// TestMetadataAndDetails: request headers reach the handler as metadata,
// reply headers and trailers come back, and error details decode.
func TestMetadataAndDetails(t *testing.T) {
	e := start(t, func(srv *rpc.Server) {
		rpc.Handle(srv, "Md.Echo", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			md := rpc.IncomingMetadata(ctx)
			rpc.SetHeader(ctx, rpc.Metadata{"request-id": {md.Get("request-id")}})
			rpc.SetTrailer(ctx, rpc.Metadata{"served-by": {"warren"}})
			return &rpc.Empty{}, nil
		})
		rpc.Handle(srv, "Md.Fail", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			rpc.SetTrailer(ctx, rpc.Metadata{"retry-after": {"3"}})
			return nil, &status.Error{Code: status.ResourceExhausted, Message: "slow down", Details: [][]byte{[]byte(`{"limit":10}`)}}
		})
	})
	ctx := context.Background()
	req := connect.NewRequest(&rpc.Empty{})
	req.Header().Set("Request-Id", "r-7")
	resp, err := client[rpc.Empty, rpc.Empty](e, "/Md/Echo").CallUnary(ctx, req)
	if err != nil || resp.Header().Get("Request-Id") != "r-7" || resp.Trailer().Get("Served-By") != "warren" {
		t.Fatalf("%v: header %v trailer %v", err, resp.Header(), resp.Trailer())
	}
	_, err = client[rpc.Empty, rpc.Empty](e, "/Md/Fail").CallUnary(ctx, connect.NewRequest(&rpc.Empty{}))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || ce.Message() != "slow down" || ce.Meta().Get("Retry-After") != "3" {
		t.Fatalf("error %v", err)
	}
	if len(ce.Details()) != 1 {
		t.Fatalf("details %v", ce.Details())
	}
	v, err := ce.Details()[0].Value()
	if sv, ok := v.(*structpb.Value); err != nil || !ok || sv.GetStructValue().GetFields()["limit"].GetNumberValue() != 10 {
		t.Fatalf("detail %v %v", v, err)
	}
}

func TestDeadline(t *testing.T) {
	e := start(t, func(srv *rpc.Server) {
		rpc.Handle(srv, "Slow.Wait", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			if _, ok := ctx.Deadline(); !ok {
				return nil, status.New(status.Internal, "no deadline")
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := client[rpc.Empty, rpc.Empty](e, "/Slow/Wait").CallUnary(ctx, connect.NewRequest(&rpc.Empty{}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("%v", err)
	}
}

// TestWatch runs the server stream Counter.Watch: the current value, then
// the changes made while watching, until the client cancels.
func TestWatch(t *testing.T) {
	e := start(t, nil)
	ctx := context.Background()
	set := client[counter.SetRequest, counter.Entry](e, "/Counter/Set")
	inc := client[counter.IncRequest, counter.Entry](e, "/Counter/Inc")
	watch := client[counter.WatchRequest, counter.Entry](e, "/Counter/Watch")
	if _, err := set.CallUnary(ctx, connect.NewRequest(&counter.SetRequest{Name: "w", Value: 1})); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := watch.CallServerStream(wctx, connect.NewRequest(&counter.WatchRequest{Name: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 4; want++ {
		if !stream.Receive() {
			t.Fatalf("stream ended: %v", stream.Err())
		}
		if got := stream.Msg(); got.Name != "w" || got.Value != want {
			t.Fatalf("got %+v, want value %d", got, want)
		}
		if stream.ResponseHeader().Get("Content-Type") != "application/connect+proto" {
			t.Fatalf("header %v", stream.ResponseHeader())
		}
		if want < 4 {
			if _, err := inc.CallUnary(ctx, connect.NewRequest(&counter.IncRequest{Name: "w"})); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	if stream.Receive() {
		t.Fatalf("message after cancel: %+v", stream.Msg())
	}
	if code := connect.CodeOf(stream.Err()); code != connect.CodeCanceled {
		t.Fatalf("after cancel: %v", stream.Err())
	}
	stream.Close()
	waitFor(t, func() bool { return e.srv.Stats().Calls == 0 })

	// An error ends the stream with its code.
	stream, err = watch.CallServerStream(ctx, connect.NewRequest(&counter.WatchRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if stream.Receive() || connect.CodeOf(stream.Err()) != connect.CodeInvalidArgument {
		t.Fatalf("watch without a name: %v", stream.Err())
	}
	stream.Close()

	// A deadline ends it with deadline_exceeded, after the current value.
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	stream, err = watch.CallServerStream(dctx, connect.NewRequest(&counter.WatchRequest{Name: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for stream.Receive() {
		n++
	}
	if n != 1 || connect.CodeOf(stream.Err()) != connect.CodeDeadlineExceeded {
		t.Fatalf("%d messages, then %v", n, stream.Err())
	}
	stream.Close()
}

// TestStreamTrailers checks a stream's headers and trailers, and a
// client stream over HTTP/1.1.
func TestStreamTrailers(t *testing.T) {
	e := start(t, func(srv *rpc.Server) {
		rpc.HandleServerStream(srv, "Count.To", func(ctx context.Context, n *int, st *rpc.Stream[int, int]) error {
			rpc.SetHeader(ctx, rpc.Metadata{"unit": {"one"}})
			for i := 1; i <= *n; i++ {
				if err := st.Send(&i); err != nil {
					return err
				}
			}
			rpc.SetTrailer(ctx, rpc.Metadata{"sent": {fmt.Sprint(*n)}})
			return nil
		})
		rpc.HandleClientStream(srv, "Sum.Add", func(ctx context.Context, st *rpc.Stream[int, int]) (*int, error) {
			sum := 0
			for {
				n, err := st.Recv()
				if err == io.EOF {
					return &sum, nil
				}
				if err != nil {
					return nil, err
				}
				sum += *n
			}
		})
	})
	ctx := context.Background()
	n := 3
	stream, err := client[int, int](e, "/Count/To").CallServerStream(ctx, connect.NewRequest(&n))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for stream.Receive() {
		got = append(got, *stream.Msg())
	}
	if stream.Err() != nil || fmt.Sprint(got) != "[1 2 3]" || stream.ResponseHeader().Get("Unit") != "one" || stream.ResponseTrailer().Get("Sent") != "3" {
		t.Fatalf("%v %v header %v trailer %v", got, stream.Err(), stream.ResponseHeader(), stream.ResponseTrailer())
	}
	stream.Close()

	cs := client[int, int](e, "/Sum/Add").CallClientStream(ctx)
	for i := 1; i <= 4; i++ {
		if err := cs.Send(&i); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := cs.CloseAndReceive()
	if err != nil || *sum.Msg != 10 {
		t.Fatalf("sum %v %v", sum, err)
	}
}

// TestProto calls a protobuf method with Connect's default codec
// (application/proto) and with protojson.
func TestProto(t *testing.T) {
	e := start(t, func(srv *rpc.Server) {
		rpc.Handle(srv, "Str.Upper", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			if req.Value == "" {
				return nil, status.New(status.InvalidArgument, "empty")
			}
			return wrapperspb.String(strings.ToUpper(req.Value)), nil
		})
	})
	ctx := context.Background()
	for _, opts := range [][]connect.ClientOption{{connect.WithClientOptions()}, {connect.WithProtoJSON()}} {
		c := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](e.hc, base+"/Str/Upper", opts...)
		resp, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("warren")))
		if err != nil || resp.Msg.Value != "WARREN" {
			t.Fatalf("%v %v", resp, err)
		}
		_, err = c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("")))
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("%v", err)
		}
	}
}

// TestHTTPClientHelper drives the Connect client through rpc.HTTPClient.
func TestHTTPClientHelper(t *testing.T) {
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
	counter.New().Register(srv)
	addr := "unix://" + filepath.Join(t.TempDir(), "h.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	set := connect.NewClient[counter.SetRequest, counter.Entry](hc, "http://localhost/Counter/Set")
	resp, err := set.CallUnary(context.Background(), connect.NewRequest(&counter.SetRequest{Name: "h", Value: 3}))
	if err != nil || resp.Msg.Value != 3 {
		t.Fatalf("%v %v", resp, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

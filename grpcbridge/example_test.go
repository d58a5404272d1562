package grpcbridge_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// A server with the bridge answers gRPC clients; a method registered with
// its protobuf schema answers by its full name, as generated clients call
// it. Here over HTTP/2 with prior knowledge on a unix socket.
func ExampleNew() {
	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
	methods := counter.File_counter_proto.Services().ByName("Counter").Methods()
	store := counter.New()
	rpc.Handle(srv, "Counter.Set", func(ctx context.Context, req *counter.SetRequest) (*counter.Entry, error) {
		return store.Set(req.Name, req.Value), nil
	}, rpc.WithSchema(methods.ByName("Set")))

	dir, _ := os.MkdirTemp("", "warren-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	l, err := transport.Listen("unix://"+path, nil)
	if err != nil {
		panic(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	tr := &http.Transport{Protocols: new(http.Protocols), DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	set := connect.NewClient[counter.SetRequest, counter.Entry](&http.Client{Transport: tr},
		"http://warren/warren.counter.v1.Counter/Set", connect.WithGRPC())
	resp, err := set.CallUnary(context.Background(), connect.NewRequest(&counter.SetRequest{Name: "a", Value: 1 << 60}))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Msg.Name, resp.Msg.Value)
	// Output: a 1152921504606846976
}

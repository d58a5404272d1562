package rpc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// A method registered with its protobuf schema answers by its full name
// too, as generated clients call it: here a Connect unary call over HTTP/2
// with prior knowledge on a unix socket. (gRPC clients need the bridge: see
// package grpcbridge.)
func ExampleWithSchema() {
	srv := rpc.NewServer(nil)
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
	resp, err := (&http.Client{Transport: tr}).Post("http://warren/warren.counter.v1.Counter/Set",
		"application/json", strings.NewReader(`{"name":"a","value":1}`))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Proto, resp.StatusCode, string(body))
	// Output: HTTP/2.0 200 {"name":"a","value":"1"}
}

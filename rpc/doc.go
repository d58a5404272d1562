// Package rpc is warren's remote procedure call layer: typed handlers
// registered without code generation, a server with limits and a graceful
// lifecycle, and a client that multiplexes any number of concurrent calls on
// one connection.
//
// A handler is a plain function:
//
//	rpc.Handle(srv, "Counter.Inc", func(ctx context.Context, req *IncRequest) (*IncReply, error) { ... })
//
// and a call is typed the same way:
//
//	reply, err := rpc.Call[IncRequest, IncReply](ctx, client, "Counter.Inc", &IncRequest{Name: "a"})
//
// The codec (JSON, Protocol Buffers or raw bytes) travels with each call;
// errors are *status.Error values with gRPC-numbered codes.
//
// Every listener of a Server also answers HTTP/1.1 and HTTP/2 in the
// Connect, gRPC and gRPC-Web protocols (POST /Service/Method with a JSON or
// protobuf body, identity or gzip), so that curl, Connect and gRPC clients
// can call the same methods under the same policies and limits, with gRPC
// server reflection and health for methods registered WithSchema;
// HTTPClient returns an http.Client that dials a warren address.
package rpc

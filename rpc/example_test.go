package rpc_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

type IncRequest struct {
	Name string `json:"name"`
	By   int    `json:"by"`
}

type IncReply struct {
	Value int `json:"value"`
}

// A typed handler and a typed call over a unix socket. Request and reply are
// plain structs, encoded as JSON.
func ExampleHandle() {
	srv := rpc.NewServer(nil)
	var mu sync.Mutex
	counters := map[string]int{}
	rpc.Handle(srv, "Counter.Inc", func(ctx context.Context, req *IncRequest) (*IncReply, error) {
		mu.Lock()
		defer mu.Unlock()
		counters[req.Name] += req.By
		return &IncReply{Value: counters[req.Name]}, nil
	})

	dir, err := os.MkdirTemp("", "warren-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "counter.sock")
	l, err := transport.Listen(addr, nil) // mode 0600, same-user peers only
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	client, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	for _, by := range []int{2, 3} {
		reply, err := rpc.Call[IncRequest, IncReply](ctx, client, "Counter.Inc", &IncRequest{Name: "a", By: by})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("a =", reply.Value)
	}
	// Output:
	// a = 2
	// a = 5
}

// serve runs srv on a socket file in a new temporary directory and returns
// the address and a function that stops the server and removes the
// directory.
func serve(srv *rpc.Server) (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "warren-example")
	if err != nil {
		log.Fatal(err)
	}
	addr = "unix://" + filepath.Join(dir, "example.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		srv.Serve(l)
		close(done)
	}()
	return addr, func() {
		srv.Close()
		<-done
		os.RemoveAll(dir)
	}
}

// A raw-bytes handler runs no codec. On the client, a []byte request is
// sent as is and the reply is copied into the *[]byte, reusing its
// capacity.
func ExampleHandleRaw() {
	srv := rpc.NewServer(nil)
	rpc.HandleRaw(srv, "Bytes.Upper", func(ctx context.Context, req []byte) ([]byte, error) {
		return bytes.ToUpper(req), nil // req is valid only until the handler returns
	})
	addr, stop := serve(srv)
	defer stop()

	client, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var out []byte
	for _, s := range []string{"hello", "warren"} {
		if err := client.Invoke(context.Background(), "Bytes.Upper", []byte(s), &out); err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(out))
	}
	// Output:
	// HELLO
	// WARREN
}

// Handlers return *status.Error values to choose the code the caller sees;
// any other error becomes Unknown. Callers branch on status.CodeOf.
func Example_statusErrors() {
	srv := rpc.NewServer(nil)
	rpc.Handle(srv, "Counter.Get", func(ctx context.Context, req *IncRequest) (*IncReply, error) {
		return nil, &status.Error{
			Code:    status.NotFound,
			Message: fmt.Sprintf("no counter %q", req.Name),
			Details: [][]byte{[]byte(`{"known":["a","b"]}`)},
		}
	})
	addr, stop := serve(srv)
	defer stop()
	client, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	_, err = rpc.Call[IncRequest, IncReply](ctx, client, "Counter.Get", &IncRequest{Name: "z"})
	switch status.CodeOf(err) {
	case status.OK:
		fmt.Println("found")
	case status.NotFound:
		se := status.FromError(err)
		fmt.Printf("%v: %s, details %s\n", se.Code, se.Message, se.Details[0])
	default:
		log.Fatal(err)
	}

	_, err = rpc.Call[IncRequest, IncReply](ctx, client, "Counter.Reset", &IncRequest{})
	fmt.Println(status.CodeOf(err))
	fmt.Println(err)
	// Output:
	// not_found: no counter "z", details {"known":["a","b"]}
	// unimplemented
	// warren: unimplemented: unknown method "Counter.Reset"
}

// Metadata travels with a call; the handler reads it and can send reply
// headers and trailers back.
func ExampleWithMetadata() {
	srv := rpc.NewServer(nil)
	rpc.Handle(srv, "Echo.Hello", func(ctx context.Context, req *IncRequest) (*IncReply, error) {
		md := rpc.IncomingMetadata(ctx)
		rpc.SetHeader(ctx, rpc.Metadata{"request-id": {md.Get("request-id")}})
		rpc.SetTrailer(ctx, rpc.Metadata{"served-by": {"example"}})
		return &IncReply{Value: len(md["tag"])}, nil
	})
	addr, stop := serve(srv)
	defer stop()
	client, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	var header, trailer rpc.Metadata
	reply, err := rpc.Call[IncRequest, IncReply](context.Background(), client, "Echo.Hello", &IncRequest{},
		rpc.WithMetadata(rpc.Metadata{"request-id": {"r-42"}, "tag": {"x", "y"}}),
		rpc.Header(&header), rpc.Trailer(&trailer))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tags seen by the server:", reply.Value)
	fmt.Println("header request-id:", header.Get("request-id"))
	fmt.Println("trailer served-by:", trailer.Get("served-by"))
	// Output:
	// tags seen by the server: 2
	// header request-id: r-42
	// trailer served-by: example
}

// Every server answers rpc.IntrospectionMethod with its methods and the
// shapes of their messages, which tools use to build requests.
func ExampleMethodList() {
	srv := rpc.NewServer(nil)
	rpc.Handle(srv, "Counter.Inc", func(ctx context.Context, req *IncRequest) (*IncReply, error) {
		return &IncReply{}, nil
	})
	rpc.HandleRaw(srv, "Bytes.Upper", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	addr, stop := serve(srv)
	defer stop()
	client, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	list, err := rpc.Call[rpc.Empty, rpc.MethodList](context.Background(), client, rpc.IntrospectionMethod, &rpc.Empty{})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range list.Methods {
		fmt.Printf("%s (%s): %s -> %s\n", m.Name, m.Kind, describe(m.Request), describe(m.Reply))
	}
	// Output:
	// Bytes.Upper (unary): bytes -> bytes
	// Counter.Inc (unary): {name string, by integer} -> {value integer}
	// Warren.Methods (unary): {} -> {methods array, version object}
}

// describe writes a shape in one line.
func describe(s *rpc.Shape) string {
	if s.Type != "object" || s.Proto != "" {
		return s.Type
	}
	var fields []string
	for _, f := range s.Fields {
		fields = append(fields, f.Name+" "+f.Shape.Type)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}

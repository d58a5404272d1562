package rpc_test

import (
	"context"
	"fmt"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// A server on a network address that requires a token, and a client that
// sends it.
func ExampleTokenAuth() {
	token := "an-example-token" // at least 128 random bits in real use
	srv := rpc.NewServer(&rpc.ServerOptions{Auth: &rpc.TokenAuth{Token: token}})
	rpc.Handle(srv, "Greeter.Hello", func(ctx context.Context, name *string) (*string, error) {
		s := "hello, " + *name
		return &s, nil
	})
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		panic(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	addr := "tcp://" + l.Addr().String()

	anon, _ := rpc.Dial(addr, nil)
	defer anon.Close()
	name := "world"
	_, err = rpc.Call[string, string](context.Background(), anon, "Greeter.Hello", &name)
	fmt.Println(err)

	c, _ := rpc.Dial(addr, &rpc.ClientOptions{Token: token})
	defer c.Close()
	reply, err := rpc.Call[string, string](context.Background(), c, "Greeter.Hello", &name)
	fmt.Println(*reply, err)
	// Output:
	// warren: unauthenticated: this server requires a token: send call metadata "authorization: Bearer TOKEN" (warren call --token, or WARREN_TOKEN), or open the URL that warren serve printed
	// hello, world <nil>
}

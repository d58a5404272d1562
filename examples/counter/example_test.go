package counter_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// Serve the counter service on a unix socket and call it through the
// generated client.
func Example() {
	dir, err := os.MkdirTemp("", "counter-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := "unix://" + filepath.Join(dir, "counter.sock")

	srv := rpc.NewServer(nil)
	store := counter.New()
	store.Register(srv)
	l, err := transport.Listen(addr, nil) // mode 0600, same-user policy
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)
	defer func() {
		store.Shutdown() // end watches first: they never end by themselves
		srv.Shutdown(context.Background())
	}()

	c, err := rpc.Dial(addr, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	cc := counter.NewCounterClient(c) // generated: protobuf binary on the wire
	set, err := cc.Set(ctx, &counter.SetRequest{Name: "a", Value: 40})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("set:", set.Name, set.Value)

	by := int64(2)
	inc, err := cc.Inc(ctx, &counter.IncRequest{Name: "a", By: &by})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("inc:", inc.Name, inc.Value)

	_, err = cc.Get(ctx, &counter.GetRequest{Name: "b"})
	fmt.Println("get b:", status.CodeOf(err))

	// Watch: the current value, then each change.
	ws, err := cc.Watch(ctx, &counter.WatchRequest{Name: "a"})
	if err != nil {
		log.Fatal(err)
	}
	defer ws.Close()
	first, err := ws.Recv()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("watch:", first.Value)
	cc.Inc(ctx, &counter.IncRequest{Name: "a"}) // by 1
	next, err := ws.Recv()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("watch:", next.Value)

	// The short names and JSON work too, as for clients without generated code.
	e, err := rpc.Call[counter.GetRequest, counter.Entry](ctx, c, "Counter.Get", &counter.GetRequest{Name: "a"}, rpc.WithCodec(codec.JSON))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("get a (JSON):", e.Value)
	// Output:
	// set: a 40
	// inc: a 42
	// get b: not_found
	// watch: 42
	// watch: 43
	// get a (JSON): 43
}

// The store can be used directly, without a server.
func ExampleStore() {
	s := counter.New()
	s.Set("b", 2)
	s.Set("a", 1)
	if _, err := s.Inc("a", 10); err != nil {
		log.Fatal(err)
	}
	if _, err := s.Inc("c", 5); err != nil { // a counter that did not exist starts at 0
		log.Fatal(err)
	}
	_, err := s.Get("missing")
	fmt.Println(err)
	for _, c := range s.List() {
		fmt.Println(c.Name, c.Value)
	}
	// Output:
	// warren: not_found: no counter named "missing" (create it with Counter.Set)
	// a 11
	// b 2
	// c 5
}

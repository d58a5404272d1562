// Command server is the console's browser-test server: the counter service
// and methods whose names, shapes, replies and errors carry HTML, served
// with the console on a TCP address with a token. It prints "listening on
// ADDR" (tcp), "unix ADDR" (a unix socket it also serves) and "open URL",
// and stops on SIGTERM or when stdin closes.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// Hostile is HTML that must reach the page as text.
const Hostile = `<img src=x onerror="document.title='xss'">`

// HostileName is a valid method name (no space, tab, newline or slash)
// that is also HTML: form feeds separate the attributes.
const HostileName = "Evil.<img\fsrc=x\fonerror=document.title='xss'>"

type evilReq struct {
	Text string `json:"<img src=x onerror=document.title='xss'>"`
}

type evilReply struct {
	Echo string `json:"echo"`
}

func main() {
	srv := rpc.NewServer(&rpc.ServerOptions{Console: true, Bridge: grpcbridge.New(), Auth: &rpc.TokenAuth{Token: "console-test-token-0123456789abcdef"}})
	counter.New().Register(srv)
	rpc.Handle(srv, HostileName, func(ctx context.Context, r *evilReq) (*evilReply, error) {
		return &evilReply{Echo: Hostile + r.Text}, nil
	})
	rpc.Handle(srv, "Evil.Meta", func(ctx context.Context, r *evilReq) (*evilReply, error) {
		return &evilReply{Echo: rpc.IncomingMetadata(ctx).Get("x-demo")}, nil
	})
	rpc.Handle(srv, "Evil.Fail", func(ctx context.Context, r *evilReq) (*evilReply, error) {
		return nil, status.Errorf(status.FailedPrecondition, "refused: %s", Hostile)
	})
	rpc.HandleServerStream(srv, "Evil.Ticks", func(ctx context.Context, r *evilReq, st *rpc.Stream[evilReq, evilReply]) error {
		for i := 0; ; i++ {
			if err := st.Send(&evilReply{Echo: fmt.Sprintf("%d %s", i, Hostile)}); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "console-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ul, err := transport.Listen("unix://"+filepath.Join(dir, "s.sock"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on tcp://%s\nunix %s\nopen http://%s/console/?token=console-test-token-0123456789abcdef\n", l.Addr(), ul.Endpoint(), l.Addr())
	go srv.Serve(l)
	go srv.Serve(ul)
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
}

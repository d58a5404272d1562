// Command warren runs and talks to warren services.
//
//	warren demo [-addr ADDR] [-calls N]
//
// demo starts a small service on ADDR (default: a socket in a new temporary
// directory), connects to it as a client, and shows what warren does: the
// peer identity the server read from the kernel, typed calls, errors,
// concurrent calls on one connection, and the round trip time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "warren:", err)
		os.Exit(1)
	}
}

const usage = `usage: warren <command> [flags]

commands:
  demo    start a demo service on a socket, call it, and report

run 'warren <command> -h' for the flags of a command`

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "demo":
		return demo(args[1:], out)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(out, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// The demo service: a greeting and a counter.

type HelloRequest struct {
	Name string `json:"name"`
}

type HelloReply struct {
	Greeting string `json:"greeting"`
	UID      int    `json:"uid"`
	PID      int    `json:"pid"`
}

type IncRequest struct {
	By int64 `json:"by"`
}

type IncReply struct {
	Value int64 `json:"value"`
}

func newDemoServer() *rpc.Server {
	srv := rpc.NewServer(nil)
	rpc.Handle(srv, "Demo.Hello", func(ctx context.Context, req *HelloRequest) (*HelloReply, error) {
		if req.Name == "" {
			return nil, status.New(status.InvalidArgument, "name is required")
		}
		p, _ := peer.FromContext(ctx)
		return &HelloReply{Greeting: "hello, " + req.Name, UID: p.UID, PID: p.PID}, nil
	})
	var counter atomic.Int64
	rpc.Handle(srv, "Demo.Inc", func(ctx context.Context, req *IncRequest) (*IncReply, error) {
		by := req.By
		if by == 0 {
			by = 1
		}
		return &IncReply{Value: counter.Add(by)}, nil
	})
	return srv
}

func demo(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	addr := fs.String("addr", "", "address to serve on (default: a socket in a new temporary directory)")
	calls := fs.Int("calls", 10000, "calls to make from 16 concurrent callers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		dir, err := os.MkdirTemp("", "warren-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		*addr = "unix://" + filepath.Join(dir, "demo.sock")
	}
	l, err := transport.Listen(*addr, nil)
	if err != nil {
		return err
	}
	srv := newDemoServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(out, "serving on %s (socket mode 0600, same-user policy)\n", *addr)

	c, err := rpc.Dial(*addr, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	hello, err := rpc.Call[HelloRequest, HelloReply](ctx, c, "Demo.Hello", &HelloRequest{Name: "warren"})
	if err != nil {
		return fmt.Errorf("Demo.Hello: %w", err)
	}
	fmt.Fprintf(out, "Demo.Hello: %q (the server saw uid %d, pid %d; this process is pid %d)\n",
		hello.Greeting, hello.UID, hello.PID, os.Getpid())

	_, err = rpc.Call[HelloRequest, HelloReply](ctx, c, "Demo.Hello", &HelloRequest{})
	fmt.Fprintf(out, "Demo.Hello with no name: %v (code %s)\n", err, status.CodeOf(err))

	list, err := rpc.Call[rpc.Empty, rpc.MethodList](ctx, c, rpc.IntrospectionMethod, &rpc.Empty{})
	if err != nil {
		return fmt.Errorf("%s: %w", rpc.IntrospectionMethod, err)
	}
	fmt.Fprint(out, "methods:")
	for _, m := range list.Methods {
		fmt.Fprintf(out, " %s", m.Name)
	}
	fmt.Fprintln(out)

	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var last atomic.Int64
	const callers = 16
	for i := range callers {
		n := *calls / callers
		if i < *calls%callers {
			n++
		}
		wg.Go(func() {
			for range n {
				r, err := rpc.Call[IncRequest, IncReply](ctx, c, "Demo.Inc", &IncRequest{By: 1})
				if err != nil {
					failed.Add(1)
					continue
				}
				for v := last.Load(); r.Value > v && !last.CompareAndSwap(v, r.Value); v = last.Load() {
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Fprintf(out, "Demo.Inc: %d calls from %d callers on one connection in %v (%.0f calls/s), counter = %d, failed = %d\n",
		*calls, callers, el.Round(time.Millisecond), float64(*calls)/el.Seconds(), last.Load(), failed.Load())

	rtt, err := c.Ping(ctx)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	fmt.Fprintf(out, "ping: %v\n", rtt)

	c.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, rpc.ErrServerClosed) {
		return err
	}
	if failed.Load() > 0 || last.Load() != int64(*calls) {
		return fmt.Errorf("counter ended at %d after %d calls (%d failed)", last.Load(), *calls, failed.Load())
	}
	if a, err := transport.ParseAddr(*addr); err == nil && a.Scheme == transport.SchemeUnix && !strings.HasPrefix(a.Address, "@") {
		if _, err := os.Lstat(a.Address); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("socket file %s still exists after shutdown (%v)", a.Address, err)
		}
		fmt.Fprintln(out, "server shut down; socket removed")
	} else {
		fmt.Fprintln(out, "server shut down")
	}
	return nil
}

// Command ringprobe runs warren's echo in two processes, over the unix
// socket or the shared-memory rings, so that each side can be measured on
// its own (perf stat: system calls, context switches, CPU time per call):
//
//	ringprobe server unix:///tmp/rp.sock ring|socket   (until SIGINT)
//	ringprobe client unix:///tmp/rp.sock ring|socket CALLS CALLERS BYTES
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

func settings(mode string) wire.Settings {
	if mode == "ring" {
		return wire.Settings{ShmRing: 256 << 10}
	}
	return wire.Settings{}
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ringprobe:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 3 && args[0] == "server" {
		return serve(args[1], args[2])
	}
	if len(args) != 6 || args[0] != "client" {
		return fmt.Errorf("usage: ringprobe server ADDR ring|socket, or client ADDR ring|socket CALLS CALLERS BYTES")
	}
	var n [3]int
	for i := range n {
		v, err := strconv.Atoi(args[3+i])
		if err != nil || v < 1 {
			return fmt.Errorf("bad number %q", args[3+i])
		}
		n[i] = v
	}
	return call(args[1], args[2], n[0], n[1], n[2])
}

func serve(addr, mode string) error {
	l, err := transport.Listen(addr, nil)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(&rpc.ServerOptions{CallRate: -1, Settings: settings(mode)})
	rpc.HandleRaw(srv, "E.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; srv.Close() }()
	fmt.Println("ready")
	srv.Serve(l)
	return nil
}

func call(addr, mode string, calls, callers, size int) error {
	c, err := rpc.Dial(addr, &rpc.ClientOptions{Settings: settings(mode)})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Ping(ctx); err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, out := make([]byte, size), []byte(nil)
			for range calls / callers {
				if err := c.Invoke(ctx, "E.Echo", &req, &out); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("%s: %d calls, %d callers, %d B: %.0f calls/s, %.2f us/call\n", mode, calls, callers, size,
		float64(calls)/el.Seconds(), float64(el.Microseconds())/float64(calls))
	return nil
}

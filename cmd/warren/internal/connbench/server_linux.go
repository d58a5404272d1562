package connbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// Server modes.
const (
	modeEventLoop = "eventloop"
	modeGoroutine = "goroutine"
)

// newTickServer returns a server with Conns.Tick, which counts its calls in
// *calls and echoes the request, and with the connection and rate limits
// off: the benchmark's connections all come from one uid.
func newTickServer(mode string, calls *atomic.Int64, logger *slog.Logger) *rpc.Server {
	srv := rpc.NewServer(&rpc.ServerOptions{
		EventLoop:      mode == modeEventLoop,
		MaxConns:       -1,
		MaxConnsPerUID: -1,
		CallRate:       -1,
		Logger:         logger,
	})
	rpc.HandleRaw(srv, tickMethod, func(_ context.Context, req []byte) ([]byte, error) {
		calls.Add(1)
		return req, nil
	})
	return srv
}

// serverMain is the server child: it serves Conns.Tick on a socket and
// runs the orchestrator's commands, one per line on stdin, answering each
// with one line on stdout:
//
//	count   calls since the last count     -> ok CALLS
//	mem     memory after GC and FreeOSMemory -> ok RSS ANON CONNS GOROUTINES
//
// Its first line is "ready RSS ANON NOFILE ADDRESS", the memory before it
// listened and the address it listens on (with the port the system chose).
// When stdin closes it closes the server, which removes a socket file, and
// returns.
func serverMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmdServer, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "warren `address` to serve on (unix://PATH, tcp://IP:PORT, ws://IP:PORT/PATH)")
	mode := fs.String("mode", modeEventLoop, "eventloop or goroutine")
	heap := fs.String("heap-profile", "", "write a heap profile to `PREFIX`-CONNS.pb.gz at each mem command")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("conns-server: --addr is required")
	}
	nofile, err := raiseNoFile()
	if err != nil {
		return err
	}
	var calls atomic.Int64
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := newTickServer(*mode, &calls, logger)
	l, err := transport.Listen(*addr, &transport.ListenConfig{Logger: logger})
	if err != nil {
		return err
	}
	base, err := selfMem()
	if err != nil {
		l.Close()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(stdout, "ready %d %d %d %s\n", base.RSS, base.Anon, nofile, l.Endpoint())
	err = serveCommands(stdin, stdout, func(cmd string, _ uint64) (string, error) {
		switch cmd {
		case "count":
			return fmt.Sprint(calls.Swap(0)), nil
		case "mem":
			m, err := selfMem()
			if err != nil {
				return "", err
			}
			conns := srv.Stats().Conns
			if *heap != "" {
				if err := writeHeapProfile(fmt.Sprintf("%s-%d.pb.gz", *heap, conns)); err != nil {
					return "", err
				}
			}
			return fmt.Sprintf("%d %d %d %d", m.RSS, m.Anon, conns, runtime.NumGoroutine()), nil
		}
		return "", fmt.Errorf("unknown command %q", cmd)
	})
	l.Close() // first: the socket file goes at once
	srv.Close()
	// Serve ends with ErrServerClosed, or (goroutine mode) with the
	// listener's net.ErrClosed if it saw that first.
	if serr := <-served; !errors.Is(serr, rpc.ErrServerClosed) && !errors.Is(serr, net.ErrClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

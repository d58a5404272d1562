package connbench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
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
// Its first line is "ready RSS ANON NOFILE", the memory before it listened.
// When stdin closes it closes the server, which removes the socket file,
// and returns.
func serverMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmdServer, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("socket", "", "socket `path` to serve on")
	mode := fs.String("mode", modeEventLoop, "eventloop or goroutine")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("conns-server: --socket is required")
	}
	nofile, err := raiseNoFile()
	if err != nil {
		return err
	}
	var calls atomic.Int64
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv := newTickServer(*mode, &calls, logger)
	l, err := transport.Listen("unix://"+*path, &transport.ListenConfig{Logger: logger})
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
	fmt.Fprintf(stdout, "ready %d %d %d\n", base.RSS, base.Anon, nofile)
	err = serveCommands(stdin, stdout, func(cmd string, _ uint64) (string, error) {
		switch cmd {
		case "count":
			return fmt.Sprint(calls.Swap(0)), nil
		case "mem":
			m, err := selfMem()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d %d %d %d", m.RSS, m.Anon, srv.Stats().Conns, runtime.NumGoroutine()), nil
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

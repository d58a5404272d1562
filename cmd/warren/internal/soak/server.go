package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// Server limits, low enough for the clients to hit them.
const (
	maxCallsPerConn = 64
	maxConnsPerPID  = 4
	callRate        = 200_000
)

// SleepReq asks Soak.Sleep to wait MS milliseconds (or until canceled)
// and echo Tag.
type SleepReq struct {
	MS  int    `json:"ms"`
	Tag uint64 `json:"tag"`
}

// Msg is a stream message: the index I of stream Tag, with a payload.
type Msg struct {
	Tag  uint64 `json:"tag"`
	I    int    `json:"i"`
	N    int    `json:"n,omitempty"`
	Data []byte `json:"data,omitempty"`
}

// Sum is Soak.Sum's reply.
type Sum struct {
	Tag   uint64 `json:"tag"`
	Count int    `json:"count"`
	Total int    `json:"total"`
}

// ServerStats is Soak.Stats's reply: the server process's resources.
type ServerStats struct {
	Goroutines int   `json:"goroutines"`
	FDs        int   `json:"fds"`
	RSS        int64 `json:"rss"`
	Conns      int   `json:"conns"`
	Calls      int   `json:"calls"`
}

func register(srv *rpc.Server) {
	rpc.HandleRaw(srv, "Soak.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	rpc.Handle(srv, "Soak.Sleep", func(ctx context.Context, req *SleepReq) (*SleepReq, error) {
		t := time.NewTimer(time.Duration(req.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return req, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	rpc.HandleServerStream(srv, "Soak.Count", func(ctx context.Context, req *Msg, st *rpc.Stream[Msg, Msg]) error {
		for i := range req.N {
			if err := st.Send(&Msg{Tag: req.Tag, I: i, Data: req.Data}); err != nil {
				return err
			}
		}
		return nil
	})
	rpc.HandleClientStream(srv, "Soak.Sum", func(ctx context.Context, st *rpc.Stream[Msg, Sum]) (*Sum, error) {
		out := &Sum{}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			out.Tag = m.Tag
			out.Count++
			out.Total += m.I
		}
	})
	rpc.HandleBidiStream(srv, "Soak.Chat", func(ctx context.Context, st *rpc.Stream[Msg, Msg]) error {
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(m); err != nil {
				return err
			}
		}
	})
	rpc.Handle(srv, "Soak.Stats", func(ctx context.Context, _ *rpc.Empty) (*ServerStats, error) {
		st := srv.Stats()
		return &ServerStats{Goroutines: runtime.NumGoroutine(), FDs: countFDs(), RSS: rss(), Conns: st.Conns, Calls: st.Calls}, nil
	})
	rpc.Handle(srv, "Soak.Fail", func(ctx context.Context, req *SleepReq) (*SleepReq, error) {
		return nil, status.Errorf(status.FailedPrecondition, "tag %d fails on purpose", req.Tag)
	})
}

// runServer serves the soak service on addr until SIGTERM, printing
// "ready" once it accepts.
func runServer(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: soak-server ADDR")
	}
	l, err := transport.Listen(args[0], nil)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(&rpc.ServerOptions{MaxCallsPerConn: maxCallsPerConn, MaxConnsPerPID: maxConnsPerPID, CallRate: callRate})
	register(srv)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	fmt.Fprintln(stdout, "ready")
	select {
	case <-sigs:
	case err := <-done:
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // the directory being read
}

func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

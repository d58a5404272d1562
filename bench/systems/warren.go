package systems

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// Warren is warren's rpc package with the raw-bytes codec, as documented
// for byte payloads: rpc.HandleRaw on the server, Invoke with a []byte
// request and a *[]byte reply (whose capacity is reused) on the client. The
// listener is transport.Listen's (socket file created 0600, peer
// credentials read at accept), as users deploy it.
//
// Its message limit is raised to LargeLimit (for the large scenario). With
// Memfd ("warren-memfd") both sides announce descriptors (MaxFiles) and
// send messages of SharedThreshold or more in sealed memfds: the caller's
// request is copied into a new memfd on each call. With Shared too
// ("warren-shared") each caller fills a buffer of Client.NewSharedBuffer
// with its request once and sends that buffer on every call, as the other
// systems reuse their request, without a copy: warren's zero-copy path.
// With Metrics ("warren-metrics") the server counts every call for
// Prometheus (rpc.ServerOptions.Metrics): what the metrics cost.
//
// With Ring ("warren-shm") both sides ask for shared-memory rings
// (wire.Settings.ShmRing, RingSize bytes each way): frames move through
// a shared memfd instead of the socket.
type Warren struct{ Memfd, Shared, Metrics, Ring bool }

// RingSize is warren-shm's ring size, as warren serve --shm-ring's.
const RingSize = 256 << 10

// SharedThreshold is warren-memfd's rpc SharedThreshold: the default
// (32 MiB).
const SharedThreshold = 0

func (w Warren) Name() string {
	if w.Shared {
		return "warren-shared"
	}
	if w.Memfd {
		return "warren-memfd"
	}
	if w.Metrics {
		return "warren-metrics"
	}
	if w.Ring {
		return "warren-shm"
	}
	return "warren"
}

func (w Warren) settings() (wire.Settings, int) {
	s := wire.Settings{MaxMessageSize: LargeLimit}
	if w.Ring {
		s.ShmRing = RingSize
	}
	if !w.Memfd && !w.Shared {
		return s, 0
	}
	s.MaxFiles = 16
	return s, SharedThreshold
}

func (Warren) OneCallPerConn() bool { return false }

func warrenAddr(network, address string) string { return network + "://" + address }

func (w Warren) Serve(network, address string) (net.Addr, func(), error) {
	l, err := transport.Listen(warrenAddr(network, address), nil)
	if err != nil {
		return nil, nil, err
	}
	// The call-rate limit (1,000,000 calls/s per peer by default) is turned
	// off: the benchmark is one peer making as many calls as it can, and an
	// unlimited server reads no clock per call.
	set, shared := w.settings()
	srv := rpc.NewServer(&rpc.ServerOptions{CallRate: -1, Settings: set, SharedThreshold: shared, Metrics: w.Metrics})
	rpc.HandleRaw(srv, "Bench.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	rpc.HandleBidiStream(srv, "Bench.Stream", func(ctx context.Context, st *rpc.Stream[[]byte, []byte]) error {
		// RecvMsg into one reused buffer: warren's documented way to
		// stream without allocating per message.
		var m []byte
		for {
			err := st.RecvMsg(&m)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(&m); err != nil {
				return err
			}
		}
	})
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	return l.Addr(), func() { srv.Close(); <-done }, nil
}

func (w Warren) Dial(ctx context.Context, network, address string) (Conn, error) {
	set, shared := w.settings()
	c, err := rpc.Dial(warrenAddr(network, address), &rpc.ClientOptions{Settings: set, SharedThreshold: shared})
	if err != nil {
		return nil, err
	}
	// The client connects on first use; a ping connects now, so that a
	// server that is not there fails here rather than in the first call.
	if _, err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return warrenConn{c, w.Shared}, nil
}

type warrenConn struct {
	c      *rpc.Client
	shared bool
}

func (w warrenConn) Caller() Caller {
	if w.shared {
		return &sharedCaller{warrenCaller: warrenCaller{c: w.c}}
	}
	return &warrenCaller{c: w.c}
}

// sharedCaller sends its request from a shared buffer, filled when the
// request changes (once: a caller's request is always the same).
type sharedCaller struct {
	warrenCaller
	from    []byte // the request buf holds
	buf     []byte
	release func()
}

func (s *sharedCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	if len(req) == 0 || s.buf == nil || len(s.from) != len(req) || &s.from[0] != &req[0] {
		if s.release != nil {
			s.release()
		}
		var err error
		if s.buf, s.release, err = s.c.NewSharedBuffer(max(len(req), 1)); err != nil {
			return nil, err
		}
		s.buf = s.buf[:copy(s.buf, req)]
		s.from = req
	}
	err := s.c.Invoke(ctx, "Bench.Echo", &s.buf, &s.out)
	return s.out, err
}

// warrenCaller passes pointers to its fields, as warren's own benchmarks
// do: a []byte request would be boxed into the interface argument. The
// reply is decoded into out's capacity.
type warrenCaller struct {
	c        *rpc.Client
	req, out []byte
}

func (w *warrenCaller) Echo(ctx context.Context, req []byte) ([]byte, error) {
	w.req = req
	err := w.c.Invoke(ctx, "Bench.Echo", &w.req, &w.out)
	return w.out, err
}

func (w warrenConn) Close() error { return w.c.Close() }

func (w warrenConn) EchoStream(ctx context.Context) (Stream, error) {
	cs, err := rpc.NewStream[[]byte, []byte](ctx, w.c, "Bench.Stream", rpc.WithCodec(codec.Raw))
	if err != nil {
		return nil, err
	}
	return &warrenStream{cs: cs}, nil
}

type warrenStream struct {
	cs  *rpc.ClientStream[[]byte, []byte]
	out []byte // the message being sent; a field, so Send does not allocate
	in  []byte // reused by RecvMsg
}

func (s *warrenStream) Send(msg []byte) error {
	s.out = msg
	return s.cs.Send(&s.out)
}

func (s *warrenStream) Recv() ([]byte, error) {
	if err := s.cs.RecvMsg(&s.in); err != nil {
		return nil, err
	}
	return s.in, nil
}

func (s *warrenStream) Close() error {
	defer s.cs.Close()
	if err := s.cs.CloseSend(); err != nil {
		return err
	}
	return drain(s.Recv)
}

// drain reads a stream to its end after CloseSend; io.EOF is the clean end.
func drain(recv func() ([]byte, error)) error {
	for {
		if _, err := recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

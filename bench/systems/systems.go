// Package systems serves and calls the same echo service in every RPC
// system the benchmark compares: warren, gRPC-Go, ttrpc, drpc and net/rpc.
// Every system echoes a bytes payload (a request and a reply of the same
// size) and is set up in its fast, documented configuration, with the peers
// registered by hand (no code generation) using protobuf BytesValue messages
// where the system is protobuf-based.
//
// The "large" scenario sends messages of up to 64 MiB: warren, gRPC and
// drpc have their message limits raised to LargeLimit, as their docs say
// (rpc.ServerOptions.Settings, grpc.MaxRecvMsgSize and MaxCallRecvMsgSize,
// drpcwire.ReaderOptions.MaximumBufferSize); net/rpc has none; ttrpc's
// 4 MiB limit is a constant, so it does not take part.
package systems

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// System is one RPC system: it can serve the echo service and call it.
type System interface {
	// Name is the system's name in the report: warren, grpc, ttrpc, drpc,
	// netrpc, raw.
	Name() string
	// Serve listens on network ("unix" or "tcp") and address (a socket
	// path, or host:port) and serves the echo service until stop is
	// called. stop closes the listener (removing a socket file) and every
	// connection, and waits for the server's goroutines.
	Serve(network, address string) (addr net.Addr, stop func(), err error)
	// Dial opens one connection to a server started by Serve.
	Dial(ctx context.Context, network, address string) (Conn, error)
	// OneCallPerConn reports that a connection carries one call at a time
	// (drpc), so concurrent callers each need their own connection.
	OneCallPerConn() bool
}

// Conn is a client connection to the echo service.
type Conn interface {
	// Caller returns a handle for one goroutine's calls. Unless the
	// system's OneCallPerConn is true, many callers may call at once.
	Caller() Caller
	Close() error
}

// Caller makes one goroutine's echo calls. It keeps what a careful user
// keeps across calls in a loop (request and reply variables or messages),
// so that the benchmark's wrapper adds no allocation of its own.
type Caller interface {
	// Echo sends req and returns the reply, which is valid until the next
	// Echo.
	Echo(ctx context.Context, req []byte) ([]byte, error)
}

// Streamer is implemented by the connections of systems with bidirectional
// streams.
type Streamer interface {
	// EchoStream opens a stream on which the server sends back every
	// message it receives.
	EchoStream(ctx context.Context) (Stream, error)
}

// Stream is one bidirectional echo stream. Send and Recv may be called
// from two goroutines at once (one each).
type Stream interface {
	Send(msg []byte) error
	// Recv returns the next message, valid until the next Recv (a system
	// may reuse its memory, as a caller streaming at speed would).
	Recv() ([]byte, error)
	// Close ends the stream (CloseSend, then drain) and releases it.
	Close() error
}

// All lists every system, warren first and the raw-socket floor last.
func All() []System {
	return []System{Warren{}, GRPC{}, TTRPC{}, DRPC{}, NetRPC{}, Raw{}}
}

// Names are the names of All.
func Names() []string {
	names := []string{}
	for _, s := range All() {
		names = append(names, s.Name())
	}
	return names
}

// LargeLimit is the message limit of the systems that have one.
const LargeLimit = 128 << 20

// ByName returns the RPC system called name: one of All, warren-memfd
// or warren-shared (warren with shared messages, which run only in the
// large scenario), warren-metrics (warren counting calls for
// Prometheus; -only warren,warren-metrics), or warren-shm (warren over
// shared-memory rings, in the unary and seqrtt scenarios).
func ByName(name string) (System, error) {
	for _, s := range append(All(), Warren{Memfd: true}, Warren{Shared: true}, Warren{Metrics: true}, Warren{Ring: true}) {
		if s.Name() == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("unknown system %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Package bridgecore is the seam between package rpc and package
// grpcbridge: what rpc gives the bridge of its server (method lookup, calls
// admitted under the server's policies, limits and interceptors, a streaming
// call's messages) and the HTTP helpers both sides use (content types, call
// metadata as headers, the Connect protocol's JSON errors). It imports
// neither connect-go nor gRPC.
package bridgecore

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/warrenipc/warren/internal/drain"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// Kind is the shape of a method: how many messages go each way.
type Kind int

// The kinds of method.
const (
	Unary        Kind = iota // one request, one reply
	ServerStream             // one request, a stream of replies
	ClientStream             // a stream of requests, one reply
	BidiStream               // streams both ways
)

func (k Kind) String() string {
	switch k {
	case Unary:
		return "unary"
	case ServerStream:
		return "server_stream"
	case ClientStream:
		return "client_stream"
	case BidiStream:
		return "bidi_stream"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Bridge is the type of rpc.ServerOptions.Bridge: it serves, on a
// server's HTTP connections, the protocols that need more than the Connect
// unary calls package rpc serves itself. grpcbridge.New returns one.
type Bridge interface {
	Bind(srv Server) Handler
}

// Server is the server a bridge is bound to (rpc.Server).
type Server interface {
	// Lookup returns the method at a request path, /Service/Method or
	// /Service.Method (nil if there is none), and its name for messages.
	Lookup(path string) (Method, string)
	// ServiceMethod returns the method standing for a procedure the bridge
	// serves itself (reflection, health), such as
	// "grpc.health.v1.Health.Check": it is admitted and intercepted as a
	// registered method is.
	ServiceMethod(name string, kind Kind) Method
	// SchemaServices returns the full names of the services whose methods
	// were registered with a schema, sorted.
	SchemaServices() []string
	// MaxMessage is the largest request message the server accepts.
	MaxMessage() int
	// Closed reports whether the server is shutting down.
	Closed() bool
	// Draining returns a channel closed once the server starts shutting
	// down.
	Draining() <-chan struct{}
	// HTTPDrain returns the drain of the server's HTTP connections, with
	// which the bridge's health Watch streams tell their peers first, and
	// after whose GOAWAYs its own long-lived streams end.
	HTTPDrain() *drain.HTTP
}

// Method is a registered method.
type Method interface {
	Name() string
	Kind() Kind
	// NoSideEffects reports whether the method may be called with GET.
	NoSideEffects() bool
}

// Handler serves the HTTP requests rpc hands to the bridge: those of the
// gRPC, gRPC-Web and Connect streaming protocols, Connect GET, and those
// for a path that names no registered method. c is the connection the
// request came on, already authorized.
type Handler interface {
	Serve(w http.ResponseWriter, r *http.Request, c Conn)
}

// Conn is the server connection a request came on.
type Conn interface {
	// Admit admits a call of m (nil: an unknown method, refused with
	// Unimplemented and an empty message) with the codec codecID, as a
	// warren call is admitted: the method's policy, the concurrency
	// limits, the rate limit. header becomes the call's metadata, parent
	// is the request's context (without the deadline). The call holds its
	// slot until it is run.
	Admit(m Method, codecID uint8, deadline time.Time, header http.Header, parent context.Context) (Call, *status.Error)
}

// Call is an admitted call. Exactly one of its Run methods runs it.
type Call interface {
	// RunUnary runs a unary call's handler on req, appending the reply to
	// dst, and stops the call counting against the limits. Reply once,
	// then call Replied.
	RunUnary(req, dst []byte) (out []byte, header, trailer []string, err *status.Error)
	// RunStream runs a streaming call's handler over st; st.End is its
	// last use.
	RunStream(st Stream)
	// Intercept runs a unary call of a ServiceMethod: next, under the
	// server's unary interceptors, with the call's context (values from
	// outer). A panic becomes an Internal error. Reply once, then call
	// Replied.
	Intercept(outer context.Context, req any, next func(ctx context.Context, req any) (any, error)) (any, error)
	// InterceptStream runs a streaming call of a ServiceMethod: next,
	// under the server's stream interceptors. Call Replied once it
	// returns.
	InterceptStream(outer context.Context, next func(ctx context.Context) error) error
	// Replied ends a call run by RunUnary, Intercept or InterceptStream,
	// once its reply is written.
	Replied()
}

// Stream moves a streaming call's messages over HTTP, in place of the mux
// stream of a warren call.
type Stream interface {
	Recv() (*pool.Buf, error)
	Send(data []byte) error
	SendHeader(md []string) error
	End(header []string, code status.Code, msg string, details [][]byte, trailer []string)
}

// CompressMinBytes is the smallest reply that is compressed when the
// client accepts gzip, in every protocol.
const CompressMinBytes = 1024

// EmptyJSON is the empty JSON message: an empty JSON request body stands for
// it, as an empty body is an empty protobuf message.
var EmptyJSON = []byte("{}")

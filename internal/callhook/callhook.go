// Package callhook is what rpc tells instrumentation about a call beyond its
// public API: the protocol a server call came in, and the end of a client
// stream. The nested module otelwarren reads it.
package callhook

import "strings"

// ProtocolKey is the context key under which the context of a server call
// (as handlers and interceptors get it) answers the call's Protocol.
type ProtocolKey struct{}

// Protocol is the protocol a call came in.
type Protocol uint8

// The protocols.
const (
	Warren  Protocol = iota // the native protocol, on any transport
	Connect                 // Connect over HTTP (unary, streaming and GET)
	GRPC
	GRPCWeb
)

// ProtocolOf is the protocol of an HTTP request with this Content-Type.
func ProtocolOf(contentType string) Protocol {
	switch {
	case strings.HasPrefix(contentType, "application/grpc-web"):
		return GRPCWeb
	case strings.HasPrefix(contentType, "application/grpc"):
		return GRPC
	}
	return Connect
}

// System is the protocol's name as the OpenTelemetry attribute rpc.system
// spells it.
func (p Protocol) System() string {
	switch p {
	case Connect:
		return "connect_rpc"
	case GRPC:
		return "grpc"
	case GRPCWeb:
		return "grpc_web"
	}
	return "warren"
}

// StreamEnd is set by rpc: it returns an rpc.CallOption which, given to the
// opening of a client stream, has the stream call fn once when it ends,
// with its outcome (io.EOF for success).
var StreamEnd func(fn func(err error)) any

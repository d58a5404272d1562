package rpc

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// WithSchema declares the protobuf method a handler implements, from the
// code protoc-gen-go generated for a .proto file. The method is then also
// reachable by the method's full name (package.Service.Method over warren's
// protocol, /package.Service/Method over HTTP, as Connect and gRPC clients
// call it), and server reflection describes it with the schema's file.
// The handler's request and reply types should be the method's input and
// output messages; registering a method whose kind (unary or which stream)
// differs from the schema's panics.
//
// Handlers without a schema stay fully supported: plain Go structs are
// called with JSON, over warren's protocol and over HTTP, but protobuf
// clients and tools need a schema.
func WithSchema(md protoreflect.MethodDescriptor) MethodOption {
	return func(h *handler) { h.schema = md }
}

// schemaName returns the "package.Service.Method" name of h's schema, ""
// for none; it panics if the schema does not fit h.
func schemaName(h *handler) string {
	md := h.schema
	if md == nil {
		return ""
	}
	kind := kindUnary
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		kind = kindBidiStream
	case md.IsStreamingClient():
		kind = kindClientStream
	case md.IsStreamingServer():
		kind = kindServerStream
	}
	if kind != h.kind {
		panic(fmt.Sprintf("warren: %s is a %s method, but its schema %s is %s", h.name, h.kind, md.FullName(), kind))
	}
	return string(md.FullName())
}

// WithNoSideEffects declares that a unary method only reads: Connect
// clients may then call it with GET (the message in the query string), as
// they do for methods with idempotency_level NO_SIDE_EFFECTS. Other
// methods refuse GET: a browser sends cross-site GETs without asking.
// Warren clients read it from IntrospectionMethod and retry such a call
// whose connection failed after it was sent.
func WithNoSideEffects() MethodOption { return func(h *handler) { h.noSideEffects = true } }

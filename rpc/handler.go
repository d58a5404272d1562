package rpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
)

// UnaryHandler is the shape of a unary call as interceptors see it: req is
// the decoded request (a pointer), the result the reply (a pointer).
type UnaryHandler func(ctx context.Context, req any) (any, error)

// UnaryServerInterceptor wraps a unary call on the server. It calls next to
// continue the chain.
type UnaryServerInterceptor func(ctx context.Context, req any, info *CallInfo, next UnaryHandler) (any, error)

// CallInfo describes the call an interceptor sees.
type CallInfo struct {
	Method string // "Service.Method"
}

// MethodOption configures one registered method.
type MethodOption func(*handler)

// WithPolicy authorizes callers of this method, in addition to the server's
// connection policy. A denied caller gets PermissionDenied.
func WithPolicy(p peer.Policy) MethodOption { return func(h *handler) { h.policy = p } }

type handler struct {
	name   string
	schema protoreflect.MethodDescriptor // nil: none declared (WithSchema)
	// noSideEffects: the method may be called with GET (WithNoSideEffects)
	noSideEffects bool
	kind          methodKind
	policy        peer.Policy
	info          CallInfo
	met           *metrics.Method // nil without ServerOptions.Metrics
	// unary decodes req with cd, runs the handler (through the
	// interceptors) and appends the encoded reply to dst.
	unary func(ctx context.Context, cd codec.Codec, req, dst []byte) ([]byte, error)
	// stream runs a streaming handler (kind != kindUnary).
	stream   func(c *serverCall) error
	reqType  reflect.Type
	respType reflect.Type
}

// Handle registers a typed unary handler for method ("Service.Method").
// Requests are decoded with the caller's codec: JSON for any type, Protocol
// Buffers when Req is a proto.Message, raw bytes when Req is []byte.
// Registering a method twice panics, as does a malformed name.
func Handle[Req, Resp any](s *Server, method string, fn func(ctx context.Context, req *Req) (*Resp, error), opts ...MethodOption) {
	s.register(newHandler(s, method, fn, opts))
}

func newHandler[Req, Resp any](s *Server, method string, fn func(ctx context.Context, req *Req) (*Resp, error), opts []MethodOption) *handler {
	h := &handler{name: method, reqType: reflect.TypeFor[Req](), respType: reflect.TypeFor[Resp]()}
	h.info.Method = method
	takes := "JSON, not %s: its request type has no protobuf schema" // for a codec it cannot take
	if reflect.PointerTo(h.reqType).Implements(protoMessage) {
		takes = "JSON or proto, not %s"
	}
	takes = method + " takes " + takes
	h.unary = func(ctx context.Context, cd codec.Codec, data, dst []byte) ([]byte, error) {
		req := new(Req)
		if err := cd.Unmarshal(data, req); err != nil {
			if errors.Is(err, codec.ErrUnsupportedType) {
				return dst, status.Errorf(status.InvalidArgument, takes, cd.Name())
			}
			return dst, status.Errorf(status.InvalidArgument, "decoding %s request as %s: %v", method, cd.Name(), err)
		}
		var resp *Resp
		if ics := s.opts.Interceptors; len(ics) > 0 {
			out, err := chainServer(ics, &h.info, func(ctx context.Context, req any) (any, error) {
				return fn(ctx, req.(*Req))
			})(ctx, req)
			if err != nil {
				return dst, err
			}
			r, ok := out.(*Resp)
			if !ok {
				return dst, status.Errorf(status.Internal, "interceptor returned %T, want %T", out, resp)
			}
			resp = r
		} else {
			var err error
			if resp, err = fn(ctx, req); err != nil {
				return dst, err
			}
		}
		if resp == nil {
			return dst, status.Errorf(status.Internal, "handler for %s returned a nil reply", method)
		}
		out, err := cd.Append(dst, resp)
		if err != nil {
			return dst, status.Errorf(status.Internal, "encoding %s reply as %s: %v", method, cd.Name(), err)
		}
		return out, nil
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// HandleRaw registers a raw-bytes unary handler for method: no codec runs.
// req is valid only until fn returns; the reply may alias it. This is the
// allocation-free path.
func HandleRaw(s *Server, method string, fn func(ctx context.Context, req []byte) ([]byte, error), opts ...MethodOption) {
	h := &handler{name: method, reqType: reflect.TypeFor[[]byte](), respType: reflect.TypeFor[[]byte]()}
	h.info.Method = method
	h.unary = func(ctx context.Context, cd codec.Codec, data, dst []byte) ([]byte, error) {
		if cd.ID() != codec.IDRaw {
			return dst, status.Errorf(status.InvalidArgument, "%s takes raw bytes, not %s", method, cd.Name())
		}
		var resp []byte
		var err error
		if ics := s.opts.Interceptors; len(ics) > 0 {
			var out any
			out, err = chainServer(ics, &h.info, func(ctx context.Context, req any) (any, error) {
				return fn(ctx, req.([]byte))
			})(ctx, data)
			resp, _ = out.([]byte)
		} else {
			resp, err = fn(ctx, data)
		}
		if err != nil {
			return dst, err
		}
		return resp, nil // may alias data: the caller sends it before freeing data
	}
	for _, o := range opts {
		o(h)
	}
	s.register(h)
}

// chainServer builds the interceptor chain around final.
func chainServer(ics []UnaryServerInterceptor, info *CallInfo, final UnaryHandler) UnaryHandler {
	next := final
	for i := len(ics) - 1; i >= 0; i-- {
		ic, n := ics[i], next
		next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, n) }
	}
	return next
}

func validMethod(name string) error {
	svc, m, ok := strings.Cut(name, ".")
	if !ok || svc == "" || m == "" || strings.ContainsAny(name, " /\t\n") {
		return fmt.Errorf("warren: method name %q is not of the form Service.Method", name)
	}
	return nil
}

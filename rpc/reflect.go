package rpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
)

// The HTTP side also serves, over gRPC, gRPC-Web and Connect, the gRPC
// server reflection service (grpc.reflection.v1 and v1alpha), describing
// the services whose methods were registered WithSchema, and the standard
// health service (grpc.health.v1.Health): SERVING for the server ("") and
// those services until the server shuts down, NOT_SERVING from then on.
// Tools such as buf curl, grpcurl and grpcui list and call methods through
// them with no local schema. They describe what Warren.Methods already
// lists, and run on connections the server has authorized. Their calls are
// calls like any other (serviceGuard): admitted by serverConn.admit, so they
// count against MaxCalls, MaxCallsPerConn and CallRate and are refused with
// ResourceExhausted past them, and run through the server's interceptors
// (Interceptors for the unary Health.Check, StreamInterceptors for the
// streams), which see them as "grpc.health.v1.Health.Check",
// "grpc.reflection.v1.ServerReflection.ServerReflectionInfo" and so on.

// services holds the HTTP handlers of the reflection and health services,
// by path prefix ("/grpc.health.v1.Health/").
type services map[string]http.Handler

func (s *Server) newServices() services {
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(s.schemaServices))
	guard := connect.WithInterceptors(&serviceGuard{s: s})
	out := services{}
	for _, mk := range []func() (string, http.Handler){
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1(reflector, guard) },
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1Alpha(reflector, guard) },
		func() (string, http.Handler) { return grpchealth.NewHandler(healthChecker{s}, guard) },
	} {
		path, h := mk()
		out[path] = h
	}
	return out
}

// lookup returns the handler for a request path, nil if none.
func (sv services) lookup(path string) http.Handler {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return nil
	}
	return sv[path[:i+1]]
}

// schemaServices returns the full names of the services whose methods were
// registered WithSchema, and the health service's, sorted.
func (s *Server) schemaServices() []string {
	names := []string{grpchealth.HealthV1ServiceName}
	for _, h := range *s.handlers.Load() {
		if h.schema != nil {
			names = append(names, string(h.schema.Parent().FullName()))
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// healthChecker answers the health service for a server.
type healthChecker struct{ s *Server }

func (hc healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(hc.s.schemaServices(), req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
	}
	if isClosed(hc.s.closed) {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// serviceGuard is the connect-go interceptor of the reflection and health
// handlers: it admits each call as serverConn.admit admits a warren call,
// and runs it through the server's interceptors. The request's connectReq
// (serveConnectGo) carries the connection.
type serviceGuard struct {
	s        *Server
	handlers sync.Map // procedure -> *handler, the calls' method
}

// handler returns the method of a procedure ("/grpc.health.v1.Health/Check").
func (g *serviceGuard) handler(spec connect.Spec) *handler {
	if hd, ok := g.handlers.Load(spec.Procedure); ok {
		return hd.(*handler)
	}
	name := strings.TrimPrefix(spec.Procedure, "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[:i] + "." + name[i+1:]
	}
	kind := kindUnary
	switch spec.StreamType {
	case connect.StreamTypeClient:
		kind = kindClientStream
	case connect.StreamTypeServer:
		kind = kindServerStream
	case connect.StreamTypeBidi:
		kind = kindBidiStream
	}
	hd := &handler{name: name, kind: kind}
	hd.info.Method = name
	v, _ := g.handlers.LoadOrStore(spec.Procedure, hd)
	return v.(*handler)
}

// admit admits a call of spec's procedure on the request's connection.
func (g *serviceGuard) admit(ctx context.Context, spec connect.Spec) (*serverCall, error) {
	cr, ok := ctx.Value(connectReqKey{}).(*connectReq)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("a call outside the bridge"))
	}
	cr.hd = g.handler(spec)
	return cr.admit(ctx, cr.hd.kind)
}

func (g *serviceGuard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (resp connect.AnyResponse, err error) {
		c, err := g.admit(ctx, req.Spec())
		if err != nil {
			return nil, err
		}
		c.state.Store(callStarted)
		defer c.replyHTTP() // repliedHTTP follows in serveConnectGo, once written
		defer g.recover(c, &err)
		ics := g.s.opts.Interceptors
		if len(ics) == 0 {
			return next(guardCtx{c, ctx}, req)
		}
		out, err := chainServer(ics, &c.h.info, func(ictx context.Context, _ any) (any, error) {
			return next(ictx, req)
		})(guardCtx{c, ctx}, req.Any())
		if err != nil {
			return nil, err
		}
		resp, ok := out.(connect.AnyResponse)
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("interceptor returned %T, want the reply of %s", out, c.h.name))
		}
		return resp, nil
	}
}

func (g *serviceGuard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *serviceGuard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) (err error) {
		c, err := g.admit(ctx, conn.Spec())
		if err != nil {
			return err
		}
		c.state.Store(callAdmitted)
		if !c.begin() {
			return connect.NewError(connect.CodeCanceled, errors.New("the call ended before it started"))
		}
		defer func() {
			c.replyHTTP() // repliedHTTP follows in serveConnectGo, once written
			c.end()
		}()
		defer g.recover(c, &err)
		run := func(ictx context.Context) error { return next(ictx, conn) }
		ics := g.s.opts.StreamInterceptors
		for i := len(ics) - 1; i >= 0; i-- {
			ic, inner := ics[i], run
			run = func(ictx context.Context) error { return ic(ictx, &c.h.info, inner) }
		}
		return run(guardCtx{c, ctx})
	}
}

// recover turns a panic of the call (in an interceptor) into an Internal
// error, as for any call.
func (g *serviceGuard) recover(c *serverCall, err *error) {
	if r := recover(); r != nil {
		g.s.logPanic(c.h.name, r, debug.Stack())
		*err = connect.NewError(connect.CodeInternal, fmt.Errorf("handler for %s panicked", c.h.name))
	}
}

// guardCtx is the context of a reflection or health call: the call's
// (deadline, cancellation, metadata and peer for the interceptors), with
// the values connect-go put in the request's.
type guardCtx struct {
	*serverCall
	outer context.Context
}

func (g guardCtx) Value(key any) any {
	if _, ok := key.(callKey); ok {
		return g.serverCall
	}
	return g.outer.Value(key)
}

package grpcbridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/statusmsg"
	"github.com/warrenipc/warren/status"
)

// The bridge also serves, over gRPC, gRPC-Web and Connect, the gRPC server
// reflection service (grpc.reflection.v1 and v1alpha), describing the
// services whose methods were registered WithSchema, and the standard
// health service (grpc.health.v1.Health): SERVING for the server ("") and
// those services until the server starts shutting down, NOT_SERVING from
// then on. A Watch sends the status, then NOT_SERVING the moment a drain
// starts, and ends when the server closes the connection.
// Tools such as buf curl, grpcurl and grpcui list and call methods through
// them with no local schema. They describe what Warren.Methods already
// lists, and run on connections the server has authorized. Their calls are
// calls like any other (serviceGuard): admitted as warren calls are, so they
// count against MaxCalls, MaxCallsPerConn and CallRate and are refused with
// ResourceExhausted past them, and run through the server's interceptors
// (Interceptors for the unary Health.Check, StreamInterceptors for the
// streams), which see them as "grpc.health.v1.Health.Check",
// "grpc.reflection.v1.ServerReflection.ServerReflectionInfo" and so on.

// services holds the HTTP handlers of the reflection and health services,
// by path prefix ("/grpc.health.v1.Health/").
type services map[string]http.Handler

func newServices(srv bridgecore.Server) services {
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(srv.SchemaServices))
	guard := connect.WithInterceptors(&serviceGuard{srv: srv})
	out := services{}
	for _, mk := range []func() (string, http.Handler){
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1(reflector, guard) },
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1Alpha(reflector, guard) },
		func() (string, http.Handler) { return grpchealth.NewHandler(healthChecker{srv}, guard) },
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

// healthChecker answers the health service for a server.
type healthChecker struct{ srv bridgecore.Server }

func (hc healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(hc.srv.SchemaServices(), req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New(statusmsg.Bound(fmt.Sprintf("unknown service %q", req.Service))))
	}
	if hc.srv.Closed() {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// Watch calls onChange once the server starts shutting down (grpchealth
// then sends NOT_SERVING).
func (hc healthChecker) Watch(ctx context.Context, req *grpchealth.CheckRequest, onChange func()) (func(), error) {
	if _, err := hc.Check(ctx, req); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-hc.srv.Draining():
			onChange()
		case <-stop:
		}
	}()
	return sync.OnceFunc(func() { close(stop) }), nil
}

// serviceGuard is the connect-go interceptor of the reflection and health
// handlers: it admits each call as a warren call is admitted, and runs it
// through the server's interceptors. The request's connectReq (Serve)
// carries the connection.
type serviceGuard struct{ srv bridgecore.Server }

// admit admits a call of spec's procedure on the request's connection.
func (g *serviceGuard) admit(ctx context.Context, spec connect.Spec) (bridgecore.Call, error) {
	cr, ok := ctx.Value(connectReqKey{}).(*connectReq)
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("a call outside the bridge"))
	}
	name := strings.TrimPrefix(spec.Procedure, "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[:i] + "." + name[i+1:]
	}
	kind := bridgecore.Unary
	switch spec.StreamType {
	case connect.StreamTypeClient:
		kind = bridgecore.ClientStream
	case connect.StreamTypeServer:
		kind = bridgecore.ServerStream
	case connect.StreamTypeBidi:
		kind = bridgecore.BidiStream
	}
	cr.m = g.srv.ServiceMethod(name, kind)
	return cr.admit(ctx, kind)
}

func (g *serviceGuard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c, err := g.admit(ctx, req.Spec())
		if err != nil {
			return nil, err
		}
		// Replied follows in Serve, once written.
		out, err := c.Intercept(ctx, req.Any(), func(ictx context.Context, _ any) (any, error) {
			return next(ictx, req)
		})
		if err != nil {
			return nil, asConnectError(err)
		}
		resp, ok := out.(connect.AnyResponse)
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("interceptor returned %T, want the reply of %s", out, req.Spec().Procedure))
		}
		return resp, nil
	}
}

func (g *serviceGuard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler admits a stream of the reflection or health service
// and ends it with Unavailable once the server has sent its HTTP/2
// GOAWAYs (a health Watch tells its peer NOT_SERVING before them).
func (g *serviceGuard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c, err := g.admit(ctx, conn.Spec())
		if err != nil {
			return err
		}
		hd := g.srv.HTTPDrain()
		if strings.HasSuffix(conn.Spec().Procedure, "/Watch") {
			sent := hd.Notice()
			defer sent()
			conn = &noticeConn{conn, g.srv.Draining(), sent}
		}
		// Replied follows in Serve, once written.
		err = c.InterceptStream(ctx, func(ictx context.Context) error {
			ictx, cancel := context.WithCancel(ictx)
			defer cancel()
			go func() {
				select {
				case <-hd.GoneAway():
					cancel()
				case <-ictx.Done():
				}
			}()
			return next(ictx, conn)
		})
		select {
		case <-hd.GoneAway():
			return connect.NewError(connect.CodeUnavailable, errors.New(admit.ShuttingDown))
		default:
		}
		return asConnectError(err)
	}
}

// noticeConn is a health Watch's stream: a message sent once the drain has
// begun is its NOT_SERVING.
type noticeConn struct {
	connect.StreamingHandlerConn
	draining <-chan struct{}
	sent     func()
}

func (n *noticeConn) Send(msg any) error {
	err := n.StreamingHandlerConn.Send(msg)
	select {
	case <-n.draining:
		n.sent()
	default:
	}
	return err
}

// asConnectError returns err, a status (from rpc: a panic, a call ended
// before it started) as connect-go's error.
func asConnectError(err error) error {
	var ce *connect.Error
	if err == nil || errors.As(err, &ce) {
		return err
	}
	var se *status.Error
	if errors.As(err, &se) {
		return connectErrorOf(se, nil, nil)
	}
	return err
}

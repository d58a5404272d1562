package rpc

import (
	"context"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/callhook"
	"github.com/warrenipc/warren/internal/drain"
	"github.com/warrenipc/warren/status"
)

// healthService is the gRPC health service's name: it is served by the
// bridge and listed among the services with a schema.
const healthService = "grpc.health.v1.Health"

// httpBridge returns the handler of the server's bridge, nil if none.
func (s *Server) httpBridge() bridgecore.Handler {
	if s.opts.Bridge == nil {
		return nil
	}
	s.bridgeOnce.Do(func() { s.bridge = s.opts.Bridge.Bind((*bridgeServer)(s)) })
	return s.bridge
}

// bridgeServer, bridgeConn and bridgeCall are a Server, a serverConn and a
// serverCall as the bridge sees them (bridgecore).
type (
	bridgeServer Server
	bridgeConn   serverConn
	bridgeCall   serverCall
)

func (b *bridgeServer) Lookup(path string) (bridgecore.Method, string) {
	hd, name := (*Server)(b).lookupPath(path)
	if hd == nil {
		return nil, name
	}
	return hd, name
}

func (b *bridgeServer) ServiceMethod(name string, kind bridgecore.Kind) bridgecore.Method {
	if hd, ok := b.services.Load(name); ok {
		return hd.(*handler)
	}
	hd := &handler{name: name, kind: kind}
	hd.info.Method = name
	v, _ := b.services.LoadOrStore(name, hd)
	return v.(*handler)
}

func (b *bridgeServer) SchemaServices() []string {
	names := []string{healthService}
	for _, h := range *b.handlers.Load() {
		if h.schema != nil {
			names = append(names, string(h.schema.Parent().FullName()))
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func (b *bridgeServer) MaxMessage() int { return int((*Server)(b).maxMessage()) }
func (b *bridgeServer) Closed() bool    { return isClosed(b.closed) }

func (b *bridgeServer) Draining() <-chan struct{} { return b.closed }
func (b *bridgeServer) HTTPDrain() *drain.HTTP    { return &b.http2 }

// The bridge's view of a handler.

func (h *handler) Name() string          { return h.name }
func (h *handler) Kind() bridgecore.Kind { return h.kind }
func (h *handler) NoSideEffects() bool   { return h.noSideEffects }

func (bc *bridgeConn) Admit(m bridgecore.Method, codecID uint8, deadline time.Time, header http.Header, parent context.Context) (bridgecore.Call, *status.Error) {
	sc := (*serverConn)(bc)
	hd, _ := m.(*handler)
	// A request that reaches a handler during the drain is served: on
	// HTTP/2 it is at or below the GOAWAY's last stream id (those above it
	// are never read), and HTTP/1.1 connections close after it.
	cd, code, msg := sc.admit(hd, codecID)
	if code != status.OK {
		return nil, status.New(code, msg)
	}
	c := &serverCall{conn: sc, h: hd, codec: cd, parent: parent, deadline: deadline, proto: callhook.ProtocolOf(header.Get("Content-Type"))}
	c.md = appendRequestMetadata(header)
	return (*bridgeCall)(c), nil
}

func (bc *bridgeCall) RunUnary(req, dst []byte) ([]byte, []string, []string, *status.Error) {
	c := (*serverCall)(bc)
	c.state.Store(callStarted)
	out, herr := c.invoke(req, dst)
	c.mdMu.Lock()
	header, trailer := c.header.pairs(), c.trailer.pairs()
	c.mdMu.Unlock()
	c.replyHTTP()
	return out, header, trailer, status.FromError(herr)
}

func (bc *bridgeCall) RunStream(st bridgecore.Stream) {
	c := (*serverCall)(bc)
	c.hs = st
	c.state.Store(callAdmitted)
	c.runStream()
}

func (bc *bridgeCall) Replied() {
	c := (*serverCall)(bc)
	c.repliedHTTP()
	c.cancel(context.Canceled)
}

func (bc *bridgeCall) Intercept(outer context.Context, req any, next func(context.Context, any) (any, error)) (out any, err error) {
	c := (*serverCall)(bc)
	c.state.Store(callStarted)
	defer c.replyHTTP()
	defer bc.recover(&err)
	ctx := guardCtx{c, outer}
	ics := c.conn.srv.opts.Interceptors
	if len(ics) == 0 {
		return next(ctx, req)
	}
	return chainServer(ics, &c.h.info, UnaryHandler(next))(ctx, req)
}

func (bc *bridgeCall) InterceptStream(outer context.Context, next func(context.Context) error) (err error) {
	c := (*serverCall)(bc)
	c.state.Store(callAdmitted)
	if !c.begin() {
		return status.New(status.Canceled, "the call ended before it started")
	}
	defer func() {
		c.replyHTTP()
		c.end()
	}()
	defer bc.recover(&err)
	run := next
	ics := c.conn.srv.opts.StreamInterceptors
	for i := len(ics) - 1; i >= 0; i-- {
		ic, inner := ics[i], run
		run = func(ictx context.Context) error { return ic(ictx, &c.h.info, inner) }
	}
	return run(guardCtx{c, outer})
}

// recover turns a panic of the call (in an interceptor) into an Internal
// error, as for any call.
func (bc *bridgeCall) recover(err *error) {
	if r := recover(); r != nil {
		c := (*serverCall)(bc)
		c.conn.srv.logPanic(c.h.name, r, debug.Stack())
		*err = status.Errorf(status.Internal, "handler for %s panicked", c.h.name)
	}
}

// guardCtx is the context of a call the bridge serves itself (reflection,
// health): the call's (deadline, cancellation, metadata and peer for the
// interceptors), with the values of the bridge's own context.
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

// Package grpcbridge serves, on the HTTP connections of a warren server,
// the protocols that need connect-go: gRPC and gRPC-Web (binary and text)
// over HTTP/1.1 and HTTP/2, Connect streaming and Connect GET, and the gRPC
// server reflection and health services. A server turns it on with one
// option (package rpc does not import connect-go or gRPC):
//
//	srv := rpc.NewServer(&rpc.ServerOptions{Bridge: grpcbridge.New()})
//
// Calls it serves are admitted and run as warren calls are: the same
// method policies, limits and interceptors. Connect unary calls (POST) are
// served by package rpc itself, with or without the bridge.
package grpcbridge

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// New returns the bridge, for rpc.ServerOptions.Bridge.
func New() bridgecore.Bridge { return bridge{} }

type bridge struct{}

// Bind returns the bridge's handler for a server.
func (bridge) Bind(srv bridgecore.Server) bridgecore.Handler {
	limit := srv.MaxMessage()
	opts := []connect.HandlerOption{
		connect.WithCodec(passCodec{"proto"}),
		connect.WithCodec(passCodec{"json"}),
		connect.WithReadMaxBytes(limit),
		connect.WithCompression("gzip", func() connect.Decompressor { return &limitedGunzip{limit: int64(limit)} },
			func() connect.Compressor { w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression); return w }),
		connect.WithCompressMinBytes(bridgecore.CompressMinBytes),
	}
	unaryOpts := append(opts[:len(opts):len(opts)], connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	h := &handler{
		srv:    srv,
		unary:  connect.NewUnaryHandler("/warren.Bridge/Unary", bridgeUnary, unaryOpts...),
		client: connect.NewClientStreamHandler("/warren.Bridge/ClientStream", bridgeClientStream, opts...),
		server: connect.NewServerStreamHandler("/warren.Bridge/ServerStream", bridgeServerStream, opts...),
		bidi:   connect.NewBidiStreamHandler("/warren.Bridge/BidiStream", bridgeBidiStream, opts...),
	}
	h.services = newServices(srv)
	return h
}

// limitedGunzip is the gzip decompressor of request messages: it fails
// with ResourceExhausted as soon as a message inflates past limit, where
// connect-go's own inflates the rest to report its size.
type limitedGunzip struct {
	gzip.Reader
	limit, n int64
}

func (d *limitedGunzip) Read(p []byte) (int, error) {
	k, err := d.Reader.Read(p)
	if d.n += int64(k); d.n > d.limit {
		return k, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the request message inflates past the limit of %d bytes", d.limit))
	}
	return k, err
}

func (d *limitedGunzip) Reset(r io.Reader) error {
	d.n = 0
	return d.Reader.Reset(r)
}

// handler holds the connect-go handlers, one per kind of call; the method
// comes with the request (see connectReq).
type handler struct {
	srv                         bridgecore.Server
	unary, client, server, bidi http.Handler
	services                    services // reflection and health (reflect.go)
}

// connectReq is what the handler funcs need of one request.
type connectReq struct {
	srv     bridgecore.Server
	conn    bridgecore.Conn
	m       bridgecore.Method // nil: unknown method
	name    string
	codecID uint8
	header  http.Header     // the request's headers
	parent  context.Context // the request's context, without the deadline
	call    bridgecore.Call // once admitted
	scratch *pool.Buf       // the unary reply's buffer, freed once written
	in      *pool.Buf
}

type connectReqKey struct{}

// Serve serves r with connect-go's handler for its method's kind.
func (h *handler) Serve(w http.ResponseWriter, r *http.Request, conn bridgecore.Conn) {
	if binaryType, ok := webText(r.Header.Get("Content-Type")); ok {
		serveWebText(w, r, binaryType, func(w http.ResponseWriter, r *http.Request) { h.Serve(w, r, conn) })
		return
	}
	m, name := h.srv.Lookup(r.URL.Path)
	if m == nil {
		if sh := h.services.lookup(r.URL.Path); sh != nil {
			// Admitted and counted by serviceGuard.
			cr := &connectReq{srv: h.srv, conn: conn, name: name, codecID: requestCodec(r), header: r.Header, parent: r.Context()}
			sh.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), connectReqKey{}, cr)))
			if cr.call != nil {
				cr.call.Replied()
			}
			return
		}
	}
	if r.Method == http.MethodGet && (m == nil || m.Kind() != bridgecore.Unary || !m.NoSideEffects()) {
		w.Header()["Allow"] = bridgecore.HdrAllowPost
		bridgecore.WriteUnaryError(w, http.StatusMethodNotAllowed, status.Errorf(status.Unimplemented,
			"GET %s: only methods without side effects are called with GET", r.URL.Path), nil, nil)
		return
	}
	ct := r.Header.Get("Content-Type")
	if m == nil && r.Method == http.MethodPost {
		if enc, ok := bridgecore.ParseContentType(ct); ok && !enc.Stream {
			// An unknown method in Connect's unary protocol: 404, as an
			// HTTP server without the route answers.
			bridgecore.WriteUnaryError(w, http.StatusNotFound, status.Errorf(status.Unimplemented, "unknown method %q", name), nil, nil)
			return
		}
	}
	cr := &connectReq{srv: h.srv, conn: conn, m: m, name: name, codecID: requestCodec(r), header: r.Header, parent: r.Context()}
	kind := bridgecore.Unary
	if m != nil {
		kind = m.Kind()
	} else if strings.HasPrefix(ct, "application/connect+") || bridgecore.IsGRPC(ct) {
		// An unknown method in a streaming protocol: answered by a
		// handler that takes that protocol on this HTTP version.
		kind = bridgecore.BidiStream
		if r.ProtoMajor == 1 {
			kind = bridgecore.ServerStream
		}
	}
	var next http.Handler
	switch kind {
	case bridgecore.Unary:
		next = h.unary
	case bridgecore.ClientStream:
		next = h.client
	case bridgecore.ServerStream:
		next = h.server
	default:
		next = h.bidi
	}
	if kind == bridgecore.BidiStream && r.ProtoMajor == 1 {
		// The protocols allow bidi streams over HTTP/2 only and connect-go
		// refuses them over HTTP/1.1; warren serves them half-duplex there
		// (the client sends its requests, then reads the replies), so the
		// request is presented as HTTP/2 and net/http reads and writes in
		// full duplex.
		if err := http.NewResponseController(w).EnableFullDuplex(); err == nil {
			r.ProtoMajor, r.ProtoMinor = 2, 0
		}
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), connectReqKey{}, cr)))
	if cr.call != nil && kind == bridgecore.Unary {
		cr.call.Replied()
	}
	pool.Put(cr.in)
	pool.Put(cr.scratch)
}

// requestCodec returns the codec a request's content type (or, for GET,
// its encoding parameter) names: JSON or protobuf.
func requestCodec(r *http.Request) uint8 {
	if r.Method == http.MethodGet {
		if r.URL.Query().Get("encoding") == "json" {
			return codec.IDJSON
		}
		return codec.IDProto
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	if strings.HasSuffix(ct, "json") {
		return codec.IDJSON
	}
	if ct == "application/grpc" || ct == "application/grpc-web" || strings.HasSuffix(ct, "proto") {
		return codec.IDProto
	}
	return codec.IDJSON
}

// admit admits the call of cr, or returns the error to refuse it with.
func (cr *connectReq) admit(ctx context.Context, kind bridgecore.Kind) (bridgecore.Call, error) {
	if cr.m != nil && cr.m.Kind() != kind {
		return nil, connectErrorOf(status.New(status.Unimplemented, cr.m.Name()+" is a "+cr.m.Kind().String()+" method"), nil, nil)
	}
	d, _ := ctx.Deadline()
	c, se := cr.conn.Admit(cr.m, cr.codecID, d, cr.header, cr.parent)
	if se != nil {
		if cr.m == nil && se.Code == status.Unimplemented {
			se = status.Errorf(status.Unimplemented, "unknown method %q", cr.name)
		}
		return nil, connectErrorOf(se, nil, nil)
	}
	cr.call = c
	return c, nil
}

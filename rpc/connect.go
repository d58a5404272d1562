package rpc

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
)

// The protocols of the HTTP side other than the hand-written fast path of
// http.go: Connect streaming, gRPC and gRPC-Web, over HTTP/1.1 and HTTP/2,
// with identity or gzip compression, and Connect unary calls over HTTP/2,
// compressed, or with GET. They are served by connectrpc.com/connect's
// handlers, which speak the three wire protocols, with a codec that passes
// message bytes through: the messages are decoded and encoded by the
// warren handler, with the codec the request's content type names (JSON or
// protobuf), exactly as for a warren call. The call is admitted by
// serverConn.admit and runs through serverCall.invoke or runStream, so the
// same policies, limits and interceptors apply.

// useConnectGo reports whether r goes to connect-go's handlers rather than
// the hand-written path: everything but an HTTP/1.1 POST of a unary call
// in Connect's unary protocol with an identity body.
func useConnectGo(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet:
		// Connect's GET for side-effect-free unary calls carries the
		// message in the query.
		return r.URL.RawQuery != "" && r.URL.Path != "/"
	default:
		return false
	}
	if r.ProtoMajor != 1 {
		return true
	}
	enc, ok := parseContentType(r.Header.Get("Content-Type"))
	if !ok {
		ct := r.Header.Get("Content-Type")
		return strings.HasPrefix(ct, "application/grpc")
	}
	if enc.stream {
		return true
	}
	return !identity(r.Header.Get("Content-Encoding"))
}

// writePlainError answers a request that is not a call in any of the
// protocols (a method other than POST or GET, a content type none of them
// uses) with a plain-text body: clients then map the HTTP status to a code
// (415 and 405 to unknown), as they do for any HTTP server.
func writePlainError(w http.ResponseWriter, httpStatus int, msg string) {
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(httpStatus)
	io.WriteString(w, msg+"\n")
}

// passCodec is a connect.Codec that passes message bytes through: the
// warren handler decodes and encodes them.
type passCodec struct{ name string }

func (p passCodec) Name() string { return p.name }

func (p passCodec) Marshal(v any) ([]byte, error) {
	return p.MarshalAppend(nil, v)
}

func (p passCodec) MarshalAppend(b []byte, v any) ([]byte, error) {
	if m, ok := v.(*passMsg); ok {
		return append(b, m.b...), nil
	}
	// connect-go's own messages (gRPC's google.rpc.Status).
	return p.codec().Append(b, v)
}

func (p passCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*passMsg)
	if !ok {
		return p.codec().Unmarshal(data, v)
	}
	// connect-go reuses data once Unmarshal returns: copy it out.
	m.buf = pool.Get(len(data))
	copy(m.buf.B, data)
	m.b = m.buf.B
	return nil
}

func (p passCodec) codec() codec.Codec {
	if p.name == "json" {
		return codec.JSON
	}
	return codec.Proto
}

// passMsg is a message as bytes; buf, if set, is where they live.
type passMsg struct {
	b   []byte
	buf *pool.Buf
}

// connectBridge holds the connect-go handlers, one per kind of call; the
// method comes with the request (see connectReq).
type connectBridge struct {
	unary, client, server, bidi http.Handler
	services                    services // reflection and health (reflect.go)
}

// connectReq is what the bridge's handler funcs need of one request.
type connectReq struct {
	h       *httpConn
	hd      *handler // nil: unknown method
	name    string
	codecID uint8
	header  http.Header     // the request's headers
	parent  context.Context // the request's context, without the deadline
	call    *serverCall     // once admitted
	scratch *pool.Buf       // the unary reply's buffer, freed once written
	in      *pool.Buf
}

type connectReqKey struct{}

func (s *Server) bridge() *connectBridge {
	s.bridgeOnce.Do(func() {
		limit := int(s.maxMessage())
		opts := []connect.HandlerOption{
			connect.WithCodec(passCodec{"proto"}),
			connect.WithCodec(passCodec{"json"}),
			connect.WithReadMaxBytes(limit),
			connect.WithCompressMinBytes(1024),
		}
		unaryOpts := append(opts[:len(opts):len(opts)], connect.WithIdempotency(connect.IdempotencyNoSideEffects))
		b := &connectBridge{
			unary:  connect.NewUnaryHandler("/warren.Bridge/Unary", bridgeUnary, unaryOpts...),
			client: connect.NewClientStreamHandler("/warren.Bridge/ClientStream", bridgeClientStream, opts...),
			server: connect.NewServerStreamHandler("/warren.Bridge/ServerStream", bridgeServerStream, opts...),
			bidi:   connect.NewBidiStreamHandler("/warren.Bridge/BidiStream", bridgeBidiStream, opts...),
		}
		b.services = s.newServices()
		s.connect = b
	})
	return s.connect
}

// serveConnectGo serves r with connect-go's handler for its method's kind.
func (h *httpConn) serveConnectGo(w http.ResponseWriter, r *http.Request) {
	if binaryType, ok := webText(r.Header.Get("Content-Type")); ok {
		serveWebText(w, r, binaryType, h.serveConnectGo)
		return
	}
	hd, name := h.srv.lookupPath(r.URL.Path)
	if hd == nil {
		if sh := h.srv.bridge().services.lookup(r.URL.Path); sh != nil {
			// Admitted and counted by serviceGuard.
			cr := &connectReq{h: h, name: name, codecID: requestCodec(r), header: r.Header, parent: r.Context()}
			sh.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), connectReqKey{}, cr)))
			if c := cr.call; c != nil {
				c.repliedHTTP()
				c.cancel(context.Canceled)
			}
			return
		}
	}
	if r.Method == http.MethodGet && (hd == nil || hd.kind != kindUnary || !hd.noSideEffects) {
		w.Header()["Allow"] = hdrAllowPost
		writeUnaryError(w, http.StatusMethodNotAllowed, status.Errorf(status.Unimplemented,
			"GET %s: only methods without side effects are called with GET", r.URL.Path), nil, nil)
		return
	}
	if hd == nil && r.Method == http.MethodPost {
		if enc, ok := parseContentType(r.Header.Get("Content-Type")); ok && !enc.stream {
			// An unknown method in Connect's unary protocol: 404, as an
			// HTTP server without the route answers.
			writeUnaryError(w, http.StatusNotFound, status.Errorf(status.Unimplemented, "unknown method %q", name), nil, nil)
			return
		}
	}
	cr := &connectReq{h: h, hd: hd, name: name, codecID: requestCodec(r), header: r.Header, parent: r.Context()}
	b := h.srv.bridge()
	var next http.Handler
	kind := kindUnary
	if hd != nil {
		kind = hd.kind
	} else if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/connect+") ||
		strings.HasPrefix(ct, "application/grpc") {
		// An unknown method in a streaming protocol: answered by a
		// handler that takes that protocol on this HTTP version.
		kind = kindBidiStream
		if r.ProtoMajor == 1 {
			kind = kindServerStream
		}
	}
	switch kind {
	case kindUnary:
		next = b.unary
	case kindClientStream:
		next = b.client
	case kindServerStream:
		next = b.server
	default:
		next = b.bidi
	}
	if kind == kindBidiStream && r.ProtoMajor == 1 {
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
	if c := cr.call; c != nil && c.h.kind == kindUnary {
		c.repliedHTTP()
		c.cancel(context.Canceled)
	}
	pool.Put(cr.in)
	pool.Put(cr.scratch)
}

func identity(enc string) bool { return enc == "" || strings.EqualFold(enc, "identity") }

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
func (cr *connectReq) admit(ctx context.Context, kind methodKind) (*serverCall, error) {
	h := cr.h
	s := h.srv
	if isClosed(s.closed) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("server is shutting down"))
	}
	if cr.hd != nil && cr.hd.kind != kind {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New(cr.hd.name+" is a "+cr.hd.kind.String()+" method"))
	}
	cd, code, msg := h.sc.admit(cr.hd, cr.codecID)
	if code != status.OK {
		if cr.hd == nil {
			msg = "unknown method \"" + cr.name + "\""
		}
		return nil, connectErrorOf(status.New(code, msg), nil, nil)
	}
	c := &serverCall{conn: h.sc, h: cr.hd, codec: cd, parent: cr.parent}
	if d, ok := ctx.Deadline(); ok {
		c.deadline = d
	}
	c.md = appendRequestMetadata(cr.header)
	cr.call = c
	return c, nil
}

func bridgeUnary(ctx context.Context, req *connect.Request[passMsg]) (*connect.Response[passMsg], error) {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	cr.in = req.Msg.buf
	c, err := cr.admit(ctx, kindUnary)
	if err != nil {
		return nil, err
	}
	c.state.Store(callStarted)
	data := req.Msg.b
	if len(data) == 0 && c.codec.ID() == codec.IDJSON {
		data = emptyJSON
	}
	cr.scratch = pool.Get(512)
	out, herr := c.invoke(data, cr.scratch.B[:0])
	c.mdMu.Lock()
	header, trailer := c.header.pairs(), c.trailer.pairs()
	c.mdMu.Unlock()
	c.replyHTTP() // repliedHTTP follows in serveConnectGo, once written
	if herr != nil {
		return nil, connectErrorOf(status.FromError(herr), header, trailer)
	}
	resp := connect.NewResponse(&passMsg{b: out})
	setMetadataHeaders(resp.Header(), header, "")
	setMetadataHeaders(resp.Trailer(), trailer, "")
	return resp, nil
}

func bridgeClientStream(ctx context.Context, st *connect.ClientStream[passMsg]) (*connect.Response[passMsg], error) {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, kindClientStream)
	if err != nil {
		return nil, err
	}
	cs := &connectStream{conn: st.Conn(), kind: kindClientStream}
	c.hs = cs
	c.state.Store(callAdmitted)
	c.runStream()
	if cs.err != nil {
		return nil, cs.err
	}
	if cs.reply == nil {
		return nil, connectErrorOf(status.Errorf(status.Internal, "%s ended without a reply", c.h.name), cs.header, cs.trailer)
	}
	resp := connect.NewResponse(&passMsg{b: cs.reply.B})
	setMetadataHeaders(resp.Header(), cs.header, "")
	setMetadataHeaders(resp.Trailer(), cs.trailer, "")
	cr.scratch = cs.reply
	return resp, nil
}

func bridgeServerStream(ctx context.Context, req *connect.Request[passMsg], st *connect.ServerStream[passMsg]) error {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, kindServerStream)
	if err != nil {
		pool.Put(req.Msg.buf)
		return err
	}
	cs := &connectStream{conn: st.Conn(), kind: kindServerStream, first: req.Msg.buf}
	if cs.first == nil {
		cs.first = pool.Get(0)
	}
	c.hs = cs
	c.state.Store(callAdmitted)
	c.runStream()
	pool.Put(cs.first)
	return cs.err
}

func bridgeBidiStream(ctx context.Context, st *connect.BidiStream[passMsg, passMsg]) error {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, kindBidiStream)
	if err != nil {
		return err
	}
	cs := &connectStream{conn: st.Conn(), kind: kindBidiStream}
	c.hs = cs
	c.state.Store(callAdmitted)
	c.runStream()
	return cs.err
}

// callStream moves a streaming call's messages over HTTP, in place of the
// mux stream of a warren call (connectStream, over connect-go's stream).
type callStream interface {
	recv() (*pool.Buf, error)
	send(data []byte) error
	sendHeader(md []string) error
	end(header []string, code status.Code, msg string, details [][]byte, trailer []string)
}

// connectStream carries a streaming call over connect-go's stream, in
// place of the mux stream of a warren call.
type connectStream struct {
	conn  connect.StreamingHandlerConn
	kind  methodKind
	first *pool.Buf // a server stream's request, not yet received

	mu      sync.Mutex // protects following
	started bool
	ended   bool
	err     error     // the call's error, returned by the handler func
	reply   *pool.Buf // a client stream's reply
	header  []string  // a client stream's reply metadata
	trailer []string
}

func (cs *connectStream) recv() (*pool.Buf, error) {
	if cs.kind == kindServerStream {
		b := cs.first
		if b == nil {
			return nil, io.EOF
		}
		cs.first = nil
		return b, nil
	}
	var m passMsg
	if err := cs.conn.Receive(&m); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, statusOfConnect(err)
	}
	if m.buf == nil {
		m.buf = pool.Get(0)
	}
	return m.buf, nil
}

func (cs *connectStream) send(data []byte) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return status.New(status.FailedPrecondition, "send after the call ended")
	}
	if cs.kind == kindClientStream {
		if cs.reply != nil {
			return status.New(status.FailedPrecondition, "a client-streaming call has one reply")
		}
		cs.reply = pool.Get(len(data))
		copy(cs.reply.B, data)
		return nil
	}
	cs.started = true
	if err := cs.conn.Send(&passMsg{b: data}); err != nil {
		return statusOfConnect(err)
	}
	return nil
}

func (cs *connectStream) sendHeader(md []string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.kind == kindClientStream {
		cs.header = append(cs.header, md...)
		return nil
	}
	if cs.started {
		return nil
	}
	cs.started = true
	setMetadataHeaders(cs.conn.ResponseHeader(), md, "")
	if err := cs.conn.Send(nil); err != nil {
		return statusOfConnect(err)
	}
	return nil
}

func (cs *connectStream) end(header []string, code status.Code, msg string, details [][]byte, trailer []string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return
	}
	cs.ended = true
	if cs.kind == kindClientStream {
		cs.header = append(cs.header, header...)
		cs.trailer = trailer
	} else {
		if !cs.started {
			setMetadataHeaders(cs.conn.ResponseHeader(), header, "")
		}
		setMetadataHeaders(cs.conn.ResponseTrailer(), trailer, "")
	}
	if code != status.OK {
		cs.err = connectErrorOf(&status.Error{Code: code, Message: msg, Details: details}, cs.header, nil)
		if cs.kind == kindClientStream {
			setMetadataHeaders(cs.err.(*connect.Error).Meta(), trailer, "")
		}
		pool.Put(cs.reply)
		cs.reply = nil
	}
}

// statusOfConnect turns an error from connect-go into a status.
func statusOfConnect(err error) *status.Error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &status.Error{Code: status.Code(ce.Code()), Message: ce.Message(), Cause: err}
	}
	if errors.Is(err, context.Canceled) {
		return &status.Error{Code: status.Canceled, Message: "the client went away", Cause: err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &status.Error{Code: status.DeadlineExceeded, Message: "deadline exceeded", Cause: err}
	}
	return &status.Error{Code: status.Unavailable, Message: err.Error(), Cause: err}
}

// connectErrorOf turns a warren status into connect-go's error, with the
// call's reply metadata. Details go as connectDetailOf says.
func connectErrorOf(se *status.Error, header, trailer []string) *connect.Error {
	code := connect.Code(se.Code)
	if se.Code == status.OK || se.Code > status.Unauthenticated {
		code = connect.CodeUnknown
	}
	var ce *connect.Error
	if se.Message != "" {
		ce = connect.NewError(code, errors.New(se.Message))
	} else {
		ce = connect.NewError(code, nil)
	}
	for _, d := range se.Details {
		if ed, err := connect.NewErrorDetail(connectDetailOf(d)); err == nil {
			ce.AddDetail(ed)
		}
	}
	setMetadataHeaders(ce.Meta(), header, "")
	setMetadataHeaders(ce.Meta(), trailer, "")
	return ce
}

// connectDetailOf returns a warren error detail as a protobuf Any: a detail
// that is an encoded google.protobuf.Any as itself, one that is JSON as a
// google.protobuf.Value, any other as a google.protobuf.BytesValue.
func connectDetailOf(d []byte) proto.Message {
	if len(d) > 0 && d[0] == 0x0a { // field 1 (type_url), length-delimited
		var a anypb.Any
		if proto.Unmarshal(d, &a) == nil && strings.Contains(a.TypeUrl, "/") {
			return &a
		}
	}
	var v structpb.Value
	if protojson.Unmarshal(d, &v) == nil {
		return &v
	}
	return wrapperspb.Bytes(d)
}

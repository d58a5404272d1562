package grpcbridge

import (
	"context"
	"errors"
	"io"
	"sync"

	"connectrpc.com/connect"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/statusmsg"
	"github.com/warrenipc/warren/status"
)

// The handler funcs of the four connect-go handlers. Messages pass through
// connect-go as bytes (passCodec): the warren handler decodes and encodes
// them with the codec the request's content type names, as for a warren
// call.

func bridgeUnary(ctx context.Context, req *connect.Request[passMsg]) (*connect.Response[passMsg], error) {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	cr.in = req.Msg.buf
	c, err := cr.admit(ctx, bridgecore.Unary)
	if err != nil {
		return nil, err
	}
	data := req.Msg.b
	if len(data) == 0 && cr.codecID == codec.IDJSON {
		data = bridgecore.EmptyJSON
	}
	cr.scratch = pool.Get(512)
	out, header, trailer, se := c.RunUnary(data, cr.scratch.B[:0]) // Replied follows in Serve, once written
	if se != nil {
		return nil, connectErrorOf(se, header, trailer)
	}
	resp := connect.NewResponse(&passMsg{b: out})
	bridgecore.SetMetadataHeaders(resp.Header(), header, "")
	bridgecore.SetMetadataHeaders(resp.Trailer(), trailer, "")
	return resp, nil
}

func bridgeClientStream(ctx context.Context, st *connect.ClientStream[passMsg]) (*connect.Response[passMsg], error) {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, bridgecore.ClientStream)
	if err != nil {
		return nil, err
	}
	cs := &connectStream{conn: st.Conn(), kind: bridgecore.ClientStream}
	c.RunStream(cs)
	if cs.err != nil {
		return nil, cs.err
	}
	if cs.reply == nil {
		return nil, connectErrorOf(status.Errorf(status.Internal, "%s ended without a reply", cr.m.Name()), cs.header, cs.trailer)
	}
	resp := connect.NewResponse(&passMsg{b: cs.reply.B})
	bridgecore.SetMetadataHeaders(resp.Header(), cs.header, "")
	bridgecore.SetMetadataHeaders(resp.Trailer(), cs.trailer, "")
	cr.scratch = cs.reply
	return resp, nil
}

func bridgeServerStream(ctx context.Context, req *connect.Request[passMsg], st *connect.ServerStream[passMsg]) error {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, bridgecore.ServerStream)
	if err != nil {
		pool.Put(req.Msg.buf)
		return err
	}
	cs := &connectStream{conn: st.Conn(), kind: bridgecore.ServerStream, first: req.Msg.buf}
	if cs.first == nil {
		cs.first = pool.Get(0)
	}
	c.RunStream(cs)
	pool.Put(cs.first)
	return cs.err
}

func bridgeBidiStream(ctx context.Context, st *connect.BidiStream[passMsg, passMsg]) error {
	cr := ctx.Value(connectReqKey{}).(*connectReq)
	c, err := cr.admit(ctx, bridgecore.BidiStream)
	if err != nil {
		return err
	}
	cs := &connectStream{conn: st.Conn(), kind: bridgecore.BidiStream}
	c.RunStream(cs)
	return cs.err
}

// connectStream carries a streaming call over connect-go's stream, in
// place of the mux stream of a warren call (a bridgecore.Stream).
type connectStream struct {
	conn  connect.StreamingHandlerConn
	kind  bridgecore.Kind
	first *pool.Buf // a server stream's request, not yet received

	mu      sync.Mutex // protects following
	started bool
	ended   bool
	err     error     // the call's error, returned by the handler func
	reply   *pool.Buf // a client stream's reply
	header  []string  // a client stream's reply metadata
	trailer []string
}

func (cs *connectStream) Recv() (*pool.Buf, error) {
	if cs.kind == bridgecore.ServerStream {
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

func (cs *connectStream) Send(data []byte) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return status.New(status.FailedPrecondition, "send after the call ended")
	}
	if cs.kind == bridgecore.ClientStream {
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

func (cs *connectStream) SendHeader(md []string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.kind == bridgecore.ClientStream {
		cs.header = append(cs.header, md...)
		return nil
	}
	if cs.started {
		return nil
	}
	cs.started = true
	bridgecore.SetMetadataHeaders(cs.conn.ResponseHeader(), md, "")
	if err := cs.conn.Send(nil); err != nil {
		return statusOfConnect(err)
	}
	return nil
}

func (cs *connectStream) End(header []string, code status.Code, msg string, details [][]byte, trailer []string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.ended {
		return
	}
	cs.ended = true
	if cs.kind == bridgecore.ClientStream {
		cs.header = append(cs.header, header...)
		cs.trailer = trailer
	} else {
		if !cs.started {
			bridgecore.SetMetadataHeaders(cs.conn.ResponseHeader(), header, "")
		}
		bridgecore.SetMetadataHeaders(cs.conn.ResponseTrailer(), trailer, "")
	}
	if code != status.OK {
		ce := connectErrorOf(&status.Error{Code: code, Message: msg, Details: details}, cs.header, nil)
		if cs.kind == bridgecore.ClientStream {
			bridgecore.SetMetadataHeaders(ce.Meta(), trailer, "")
		}
		cs.err = ce
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
// call's reply metadata. Details go as bridgecore.DetailAny says.
func connectErrorOf(se *status.Error, header, trailer []string) *connect.Error {
	code := connect.Code(se.Code)
	if se.Code == status.OK || se.Code > status.Unauthenticated {
		code = connect.CodeUnknown
	}
	var ce *connect.Error
	if se.Message != "" {
		ce = connect.NewError(code, errors.New(statusmsg.Bound(se.Message)))
	} else {
		ce = connect.NewError(code, nil)
	}
	for _, d := range se.Details {
		if ed, err := connect.NewErrorDetail(bridgecore.DetailAny(d)); err == nil {
			ce.AddDetail(ed)
		}
	}
	bridgecore.SetMetadataHeaders(ce.Meta(), header, "")
	bridgecore.SetMetadataHeaders(ce.Meta(), trailer, "")
	return ce
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

package rpc

import (
	"context"
	"errors"
	"io"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/balance"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// methodKind is the shape of a method: how many messages go each way.
type methodKind = bridgecore.Kind

// The kinds of method.
const (
	kindUnary        = bridgecore.Unary        // one request, one reply
	kindServerStream = bridgecore.ServerStream // one request, a stream of replies
	kindClientStream = bridgecore.ClientStream // a stream of requests, one reply
	kindBidiStream   = bridgecore.BidiStream   // streams both ways
)

// StreamServerInterceptor wraps a streaming call on the server. It calls
// next to run the handler, possibly with a derived context.
type StreamServerInterceptor func(ctx context.Context, info *CallInfo, next func(ctx context.Context) error) error

// Stream is the server's side of a streaming call: typed messages in from
// the caller (Recv) and out to it (Send). It is safe to call Send from one
// goroutine while another calls Recv.
type Stream[Req, Resp any] struct {
	c          *serverCall
	ctx        context.Context // the call's context, as the interceptors left it
	headerOnce sync.Once
	headerErr  error
}

// Recv returns the caller's next message, or io.EOF once the caller closed
// its side.
func (s *Stream[Req, Resp]) Recv() (*Req, error) {
	req := new(Req)
	if err := s.RecvMsg(req); err != nil {
		return nil, err
	}
	return req, nil
}

// RecvMsg is Recv into m, which the caller may reuse from one message to
// the next, so that a steady stream of messages allocates nothing. With
// the raw codec and Req []byte, the message is not copied: m is set to
// the buffer it arrived in, and the memory m held before goes to warren's
// buffer pool, so nothing may use that memory after the call.
func (s *Stream[Req, Resp]) RecvMsg(m *Req) error {
	buf, err := s.c.recv(s.ctx)
	if err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return callError(err)
	}
	s.c.keepFiles(buf)
	err = unmarshalInto(s.c.codec, buf, m)
	if err != nil {
		return status.Errorf(status.InvalidArgument, "decoding %s request as %s: %v", s.c.h.name, s.c.codec.Name(), err)
	}
	return nil
}

// Send sends one message to the caller, waiting for flow-control credit if
// the caller reads slowly. Reply headers set with SetHeader go out first.
func (s *Stream[Req, Resp]) Send(m *Resp) error {
	if err := s.sendHeader(); err != nil {
		return err
	}
	data, scratch, err := encode(s.c.codec, m)
	if err != nil {
		return status.Errorf(status.Internal, "encoding %s reply as %s: %v", s.c.h.name, s.c.codec.Name(), err)
	}
	err = s.c.send(s.ctx, data)
	pool.Put(scratch)
	if err != nil {
		return callError(err)
	}
	return nil
}

func (s *Stream[Req, Resp]) sendHeader() error {
	s.headerOnce.Do(func() {
		c := s.c
		c.mdMu.Lock()
		md := c.header.pairs()
		c.headerSent = true
		c.mdMu.Unlock()
		if md != nil {
			s.headerErr = c.sendHeader(md)
		}
	})
	return s.headerErr
}

// HandleServerStream registers a handler that takes one request and sends
// any number of replies with stream.Send. Returning ends the call with the
// returned error's status.
func HandleServerStream[Req, Resp any](s *Server, method string, fn func(ctx context.Context, req *Req, stream *Stream[Req, Resp]) error, opts ...MethodOption) {
	registerStream(s, method, kindServerStream, opts, func(ctx context.Context, st *Stream[Req, Resp]) error {
		req, err := st.Recv()
		if err == io.EOF {
			return status.Errorf(status.InvalidArgument, "%s: call without a request message", method)
		}
		if err != nil {
			return err
		}
		return fn(ctx, req, st)
	})
}

// HandleClientStream registers a handler that receives any number of
// requests with stream.Recv (io.EOF after the last) and returns one reply.
func HandleClientStream[Req, Resp any](s *Server, method string, fn func(ctx context.Context, stream *Stream[Req, Resp]) (*Resp, error), opts ...MethodOption) {
	registerStream(s, method, kindClientStream, opts, func(ctx context.Context, st *Stream[Req, Resp]) error {
		resp, err := fn(ctx, st)
		if err != nil {
			return err
		}
		if resp == nil {
			return status.Errorf(status.Internal, "handler for %s returned a nil reply", method)
		}
		return st.Send(resp)
	})
}

// HandleBidiStream registers a handler that receives and sends streams of
// messages, in any order, from one goroutine or two.
func HandleBidiStream[Req, Resp any](s *Server, method string, fn func(ctx context.Context, stream *Stream[Req, Resp]) error, opts ...MethodOption) {
	registerStream(s, method, kindBidiStream, opts, fn)
}

func registerStream[Req, Resp any](s *Server, method string, kind methodKind, opts []MethodOption, fn func(ctx context.Context, st *Stream[Req, Resp]) error) {
	h := &handler{name: method, kind: kind, reqType: reflect.TypeFor[Req](), respType: reflect.TypeFor[Resp]()}
	h.info.Method = method
	h.stream = func(c *serverCall) error {
		st := &Stream[Req, Resp]{c: c, ctx: c}
		run := func(ctx context.Context) error {
			st.ctx = ctx
			return fn(ctx, st)
		}
		if ics := s.opts.StreamInterceptors; len(ics) > 0 {
			for i := len(ics) - 1; i >= 0; i-- {
				ic, next := ics[i], run
				run = func(ctx context.Context) error { return ic(ctx, &h.info, next) }
			}
		}
		if err := run(c); err != nil {
			return err
		}
		return st.sendHeader()
	}
	for _, o := range opts {
		o(h)
	}
	s.register(h)
}

// runStream executes a streaming call on its own goroutine and ends it with
// the handler's status.
func (c *serverCall) runStream() {
	if !c.begin() {
		return
	}
	defer c.end()
	defer c.closeStreamFiles()
	err := c.invokeStream()
	c.mdMu.Lock()
	var header []string
	if !c.headerSent {
		header = c.header.pairs()
	}
	trailer := c.trailer.pairs()
	c.mdMu.Unlock()
	code, msg, details := status.OK, "", [][]byte(nil)
	if se := status.FromError(err); se != nil {
		code, msg, details = se.Code, se.Message, se.Details
	}
	c.endStream(header, code, msg, details, trailer)
}

// recv, send, sendHeader and endStream move a streaming call's messages:
// over its mux stream, or over HTTP for a call that came as an HTTP request
// (a bridgecore.Stream, from the bridge).

func (c *serverCall) recv(ctx context.Context) (*pool.Buf, error) {
	if c.hs != nil {
		return c.hs.Recv()
	}
	return c.st.Recv(ctx)
}

func (c *serverCall) send(ctx context.Context, data []byte) error {
	if c.hs != nil {
		return c.hs.Send(data)
	}
	return c.sendStream(ctx, data)
}

func (c *serverCall) sendHeader(md []string) error {
	if c.hs != nil {
		return c.hs.SendHeader(md)
	}
	return c.st.SendHeader(md)
}

func (c *serverCall) endStream(header []string, code status.Code, msg string, details [][]byte, trailer []string) {
	if c.hs != nil {
		c.replyHTTP()
		defer c.repliedHTTP()
		c.hs.End(header, code, msg, details, trailer)
		return
	}
	c.st.Finish(c, mux.Reply{Header: header, Code: code, Message: msg, Details: details, Trailer: trailer})
}

func (c *serverCall) invokeStream() (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.conn.srv.logPanic(c.h.name, r, debug.Stack())
			err = status.Errorf(status.Internal, "handler for %s panicked", c.h.name)
		}
	}()
	return c.h.stream(c)
}

// unmarshalInto decodes the received message buf into m and gives buf
// back to the pool. A raw message for a *[]byte is not copied: the two
// swap buffers, so m's old buffer is the one the pool gets back and a
// caller that reuses m receives every message without a copy or an
// allocation. A buffer that is not the pool's (a shared message's
// mapping) is copied, and released.
func unmarshalInto(cd codec.Codec, buf *pool.Buf, m any) error {
	if p, ok := m.(*[]byte); ok && cd.ID() == codec.IDRaw && buf.Free == nil {
		*p, buf.B = buf.B, (*p)[:0]
		pool.Put(buf)
		return nil
	}
	err := cd.Unmarshal(buf.B, m)
	pool.Put(buf)
	return err
}

// encode encodes m with cd. Raw bytes are used as they are; anything else is
// encoded into a pooled scratch buffer, returned for pool.Put (nil for raw).
func encode(cd codec.Codec, m any) ([]byte, *pool.Buf, error) {
	if raw, ok := rawBytes(m); ok && cd.ID() == codec.IDRaw {
		return raw, nil, nil
	}
	scratch := pool.Get(512)
	data, err := cd.Append(scratch.B[:0], m)
	if err != nil {
		pool.Put(scratch)
		return nil, nil, err
	}
	return data, scratch, nil
}

// StreamClientInterceptor wraps the opening of a streaming call on the
// client; it may add call options (metadata, say) and calls open to go on.
type StreamClientInterceptor func(ctx context.Context, method string, opts []CallOption, open func(ctx context.Context, opts ...CallOption) error) error

// ClientStream is the client's side of a streaming call. Send and CloseSend
// may be called from one goroutine while another calls Recv. The stream ends
// when Recv returns an error (io.EOF for success), or when its context ends,
// which cancels the call on the server whether or not anyone is reading.
type ClientStream[Req, Resp any] struct {
	ctx    context.Context
	method string
	cd     codec.Codec
	st     *mux.Stream
	stop   func() bool // stops the context watcher
	sess   *mux.Session
	ep     *balance.Endpoint // its server, counting the call until end
	ended  bool              // end ran; protected by mu
	o      callOptions
	// sendClosed is set by CloseSend: a later Send is the caller's
	// mistake, reported as such even if the call has ended meanwhile.
	sendClosed atomic.Bool
	mu         sync.Mutex // protects following
	header     Metadata
	trailer    Metadata
	err        error // terminal Recv error
}

// NewStream opens a streaming call to method. The codec is chosen from Req
// as for unary calls unless WithCodec says otherwise; the context's deadline
// travels to the server and its cancellation cancels the call.
func NewStream[Req, Resp any](ctx context.Context, c *Client, method string, opts ...CallOption) (*ClientStream[Req, Resp], error) {
	cs := &ClientStream[Req, Resp]{ctx: ctx, method: method}
	open := func(ctx context.Context, opts ...CallOption) error {
		if len(opts) > 0 {
			cs.o = *gatherOptions(opts)
		}
		cs.cd = cs.o.codec
		if cs.cd == nil {
			cs.cd = codec.For(new(Req))
		}
		var timeout time.Duration
		if d, ok := ctx.Deadline(); ok {
			if timeout = time.Until(d); timeout <= 0 {
				return status.New(status.DeadlineExceeded, context.DeadlineExceeded.Error())
			}
		}
		var err error
		r := balance.Retry{Pool: c.pool, Method: method}
		for {
			e, s, v, serr := r.Session(ctx, nil)
			if err = serr; err == nil {
				cs.st, err = s.Open(ctx, mux.Call{Method: method, Codec: cs.cd.ID(), Timeout: timeout, Metadata: cs.o.md.pairs()})
				if err == nil {
					cs.ep = e
					e.Begin()
					break
				}
				v, err = retryable(drained(err) || isConnErr(err)), callError(err)
			}
			if !r.Next(ctx, v, &err) {
				return err
			}
		}
		cs.ctx = ctx
		st := cs.st
		cs.stop = context.AfterFunc(ctx, st.Cancel)
		// Keep the connection read while the stream is open, so that the
		// server's messages and trailers arrive (up to the flow-control
		// window) even when the caller is not in Recv.
		cs.sess = st.Session()
		cs.sess.HoldReader()
		return nil
	}
	var err error
	if ics := c.opts.StreamInterceptors; len(ics) > 0 {
		run := open
		for i := len(ics) - 1; i >= 0; i-- {
			ic, next := ics[i], run
			run = func(ctx context.Context, opts ...CallOption) error { return ic(ctx, method, opts, next) }
		}
		err = run(ctx, opts...)
	} else {
		err = open(ctx, opts...)
	}
	if err != nil {
		return nil, err
	}
	return cs, nil
}

// Send sends one message. It waits for flow-control credit when the server
// reads slowly, until the stream's context ends. Once the server has ended
// the call, Send returns io.EOF and Recv returns the call's outcome.
func (cs *ClientStream[Req, Resp]) Send(m *Req) error {
	if cs.sendClosed.Load() {
		return status.Errorf(status.FailedPrecondition, "%s: send after CloseSend", cs.method)
	}
	data, scratch, err := encode(cs.cd, m)
	if err != nil {
		return status.Errorf(status.Internal, "encoding %s request as %s: %v", cs.method, cs.cd.Name(), err)
	}
	err = sendStreamMsg(cs.ctx, cs.st, &cs.o, data)
	pool.Put(scratch)
	if err != nil {
		return cs.sendError(err)
	}
	return nil
}

// sendError explains a failed send: once the server has ended the call, its
// status is the better error.
func (cs *ClientStream[Req, Resp]) sendError(err error) error {
	cs.mu.Lock()
	ended := cs.ended
	cs.mu.Unlock()
	if ended || errors.Is(err, mux.ErrStreamEnded) {
		return io.EOF // the call is over: Recv returns its outcome
	}
	if errors.Is(err, mux.ErrStreamClosed) {
		return status.Errorf(status.FailedPrecondition, "%s: send after CloseSend", cs.method)
	}
	if cs.ctx.Err() != nil {
		return callError(cs.ctx.Err())
	}
	return callError(err)
}

// CloseSend tells the server that no more messages will be sent.
func (cs *ClientStream[Req, Resp]) CloseSend() error {
	cs.sendClosed.Store(true)
	if err := cs.st.CloseSend(); err != nil {
		return cs.sendError(err)
	}
	return nil
}

// Recv returns the server's next message. At the end of the call it returns
// io.EOF if the call succeeded and the call's *status.Error otherwise; the
// trailers are then available.
func (cs *ClientStream[Req, Resp]) Recv() (*Resp, error) {
	resp := new(Resp)
	if err := cs.RecvMsg(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// RecvMsg is Recv into m, which the caller may reuse from one message to
// the next, so that a steady stream of messages allocates nothing. With
// the raw codec and Resp []byte, the message is not copied: m is set to
// the buffer it arrived in, and the memory m held before goes to warren's
// buffer pool, so nothing may use that memory after the call.
func (cs *ClientStream[Req, Resp]) RecvMsg(m *Resp) error {
	cs.mu.Lock()
	if cs.err != nil {
		err := cs.err
		cs.mu.Unlock()
		return err
	}
	cs.mu.Unlock()
	buf, err := cs.st.Recv(cs.ctx)
	if err == nil {
		cs.captureHeader()
		recvStreamFiles(&cs.o, buf)
		err = unmarshalInto(cs.cd, buf, m)
		if err != nil {
			cs.st.Cancel()
			return cs.end(status.Errorf(status.Internal, "decoding %s reply: %v", cs.method, err))
		}
		return nil
	}
	if err != io.EOF {
		if cs.ctx.Err() != nil {
			err = cs.ctx.Err()
		}
		return cs.end(callError(err))
	}
	cs.captureHeader()
	tb, _ := cs.st.Trailer()
	tr, perr := wire.ParseTrailer(tb)
	if perr != nil {
		return cs.end(status.Errorf(status.Internal, "%s: malformed trailer: %v", cs.method, perr))
	}
	md, _ := parseMetadata(tr.Metadata)
	cs.mu.Lock()
	cs.trailer = md
	cs.mu.Unlock()
	if tr.Code != 0 {
		se := &status.Error{Code: status.Code(tr.Code), Message: string(tr.Message)}
		if len(tr.Details) > 0 {
			se.Details, _ = wire.ParseDetails(tr.Details)
		}
		return cs.end(se)
	}
	return cs.end(io.EOF)
}

// CloseAndRecv closes the send side and returns the single reply of a
// client-streaming call.
func (cs *ClientStream[Req, Resp]) CloseAndRecv() (*Resp, error) {
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	resp, err := cs.Recv()
	if err != nil {
		if err == io.EOF {
			return nil, status.Errorf(status.Internal, "%s: no reply message", cs.method)
		}
		return nil, err
	}
	if _, err := cs.Recv(); err != io.EOF {
		if err == nil {
			cs.Close()
			return nil, status.Errorf(status.Internal, "%s: more than one reply message", cs.method)
		}
		return nil, err
	}
	return resp, nil
}

func (cs *ClientStream[Req, Resp]) captureHeader() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.header == nil {
		if hb, ok := cs.st.Header(); ok {
			cs.header, _ = parseMetadata(hb)
			if cs.header == nil {
				cs.header = Metadata{}
			}
		}
	}
}

// end records the stream's terminal error and frees it.
func (cs *ClientStream[Req, Resp]) end(err error) error {
	cs.mu.Lock()
	if cs.err == nil {
		cs.err = err
	}
	err = cs.err
	first := !cs.ended
	cs.ended = true
	cs.mu.Unlock()
	if first {
		cs.stop()
		cs.st.Close()
		cs.sess.ReleaseReader()
		cs.ep.End()
	}
	return err
}

// Header returns the reply headers, once the first message or the end of
// the call has been received.
func (cs *ClientStream[Req, Resp]) Header() Metadata {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.header
}

// Trailer returns the reply trailers once Recv has returned an error.
func (cs *ClientStream[Req, Resp]) Trailer() Metadata {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.trailer
}

// Close abandons the call: if it has not ended, the server is told to
// cancel it. Close is safe to call at any time and more than once.
func (cs *ClientStream[Req, Resp]) Close() {
	cs.end(status.New(status.Canceled, "stream closed by the client"))
}

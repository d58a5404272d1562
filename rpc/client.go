package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/balance"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// ErrClientClosed is returned by calls on a closed client.
var ErrClientClosed = balance.ErrClosed

// UnaryInvoker performs a unary call; interceptors call it to continue.
type UnaryInvoker func(ctx context.Context, method string, req, resp any, opts ...CallOption) error

// UnaryClientInterceptor wraps a unary call on the client.
type UnaryClientInterceptor func(ctx context.Context, method string, req, resp any, next UnaryInvoker, opts ...CallOption) error

// ClientOptions configures a Client. The zero value is valid.
type ClientOptions struct {
	// Dial configures the transport: TLS, and the checks on the server's
	// socket file and credentials.
	Dial *transport.DialConfig
	// Dialer, if set, replaces transport.Dial (for example to use an
	// in-memory pipe in tests).
	Dialer func(ctx context.Context, addr string) (net.Conn, error)
	// Settings are the wire limits the client accepts. Zero fields take
	// wire.Settings.WithDefaults, except MaxFrameSize and InitialWindow,
	// which default to 512 KiB and 2 MiB (a server that leaves its own
	// unset answers with the same).
	Settings wire.Settings
	// WaitForReady makes a call made while the client cannot connect wait,
	// retrying with backoff until its context ends. By default such a call
	// fails at once with Unavailable.
	WaitForReady bool
	// MinBackoff and MaxBackoff bound the delay between connection
	// attempts; 0 means 50 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Interceptors wrap every unary call, the first outermost.
	Interceptors []UnaryClientInterceptor
	// StreamInterceptors wrap the opening of every streaming call.
	StreamInterceptors []StreamClientInterceptor
	// Token, if set, is sent with every call as the metadata
	// "authorization: Bearer TOKEN", and as the header "Authorization:
	// Bearer TOKEN" of a ws:// or wss:// opening handshake, for servers
	// that require one (ServerOptions.Auth, TokenAuth).
	Token string
	// HandshakeTimeout bounds the preface exchange; 0 means 10 s.
	HandshakeTimeout time.Duration
	// SharedThreshold sends messages of at least this many bytes (16 KiB
	// at least) in sealed memfds instead of through the socket, on unix
	// sockets where both sides set Settings.MaxFiles (see PROTOCOL.md,
	// "Descriptors and shared messages"); 0 means 32 MiB, from where it
	// measured faster than the socket; negative turns it off.
	// Buffers of NewSharedBuffer go shared whatever it is. MaxSharedBytes
	// bounds the bytes of such messages received and held mapped at once
	// on one connection; 0 means 1 GiB.
	SharedThreshold int
	MaxSharedBytes  int64
	// Balancer chooses the server of each call when there are several:
	// "round_robin" (the default: each in turn) or "least_outstanding"
	// (the one with the fewest calls in flight, a stream until it ends).
	Balancer string
}

// Client calls methods on a service: one server address, several, or a
// DNS name (see Dial), over a multiplexed connection per server, which it
// opens on first use and reopens with backoff after a failure.
type Client struct {
	addr  string
	opts  ClientOptions
	chain UnaryInvoker
	pool  *balance.Pool
}

// Dial returns a client for addr: a warren address (see
// transport.ParseAddr), several separated by commas, or dns:///HOST:PORT,
// a name resolved to tcp addresses (tls when opts.Dial has a TLS
// configuration, the certificate checked against HOST), resolved again
// every 30 s and after a connection fails. Calls are spread over the
// servers (ClientOptions.Balancer) and retried as the README's "Many
// servers" says. Dial does not connect: connections are made on first use.
func Dial(addr string, opts *ClientOptions) (*Client, error) {
	c := &Client{addr: addr}
	if opts != nil {
		c.opts = *opts
	}
	var check func(string) error
	if c.opts.Dialer != nil {
		check = func(string) error { return nil }
	}
	t, err := balance.Parse(addr, check)
	if err != nil {
		return nil, err
	}
	if c.opts.Balancer != "" && c.opts.Balancer != balance.RoundRobin && c.opts.Balancer != balance.LeastOutstanding {
		return nil, fmt.Errorf("warren: unknown balancer %q (round_robin or least_outstanding)", c.opts.Balancer)
	}
	if c.opts.MinBackoff <= 0 {
		c.opts.MinBackoff = 50 * time.Millisecond
	}
	if c.opts.MaxBackoff <= 0 {
		c.opts.MaxBackoff = 5 * time.Second
	}
	if c.opts.Token != "" {
		// The token also goes with a WebSocket opening handshake, which a
		// server may check before any call.
		d := transport.DialConfig{}
		if c.opts.Dial != nil {
			d = *c.opts.Dial
		}
		d.WebSocketHeader = d.WebSocketHeader.Clone()
		if d.WebSocketHeader == nil {
			d.WebSocketHeader = http.Header{}
		}
		d.WebSocketHeader.Set("Authorization", "Bearer "+c.opts.Token)
		c.opts.Dial = &d
		u, st := tokenInterceptors(c.opts.Token)
		c.opts.Interceptors = append(append([]UnaryClientInterceptor(nil), c.opts.Interceptors...), u)
		c.opts.StreamInterceptors = append(append([]StreamClientInterceptor(nil), c.opts.StreamInterceptors...), st)
	}
	c.pool = balance.New(t, balance.Config{Dial: c.opts.Dial, Dialer: c.opts.Dialer, WaitForReady: c.opts.WaitForReady,
		MinBackoff: c.opts.MinBackoff, MaxBackoff: c.opts.MaxBackoff, LeastOutstanding: c.opts.Balancer == balance.LeastOutstanding,
		Mux: &mux.Config{Settings: c.opts.Settings, HandshakeTimeout: c.opts.HandshakeTimeout,
			SharedMin: c.opts.SharedThreshold, MaxShared: c.opts.MaxSharedBytes}})
	c.chain = c.invoke
	for i := len(c.opts.Interceptors) - 1; i >= 0; i-- {
		ic, next := c.opts.Interceptors[i], c.chain
		c.chain = func(ctx context.Context, method string, req, resp any, opts ...CallOption) error {
			return ic(ctx, method, req, resp, next, opts...)
		}
	}
	return c, nil
}

// Close closes the client's connections. Calls in progress fail. Close is
// idempotent and waits for every goroutine the client started.
func (c *Client) Close() error {
	c.pool.Close()
	return nil
}

// session returns a live session to one of the servers, connecting if needed.
func (c *Client) session(ctx context.Context) (*mux.Session, error) {
	r := balance.Retry{Pool: c.pool}
	for {
		_, s, v, err := r.Session(ctx, nil)
		if err == nil || !r.Next(ctx, v, &err) {
			return s, err
		}
	}
}

// Ping measures the round trip to the server.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	s, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	d, err := s.Ping(ctx)
	if err != nil {
		// A server that refused the connection said why in a GOAWAY
		// before closing it.
		if code, msg, away := s.GoAwayReason(); away && code != status.OK && code != status.Unavailable {
			return 0, callError(&GoAwayError{Code: code, Message: msg})
		}
	}
	return d, err
}

// CallOption configures one call.
type CallOption func(*callOptions)

type callOptions struct {
	md      Metadata
	header  *Metadata
	trailer *Metadata
	codec   codec.Codec

	files     []*os.File  // WithFiles
	recvFiles *[]*os.File // ReceiveFiles
}

// gatherOptions applies opts to a fresh callOptions. It is kept apart from
// invoke so that a call without options does not allocate.
func gatherOptions(opts []CallOption) *callOptions {
	o := new(callOptions)
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithMetadata sends md as the call's request metadata.
func WithMetadata(md Metadata) CallOption {
	return func(o *callOptions) { o.md = merge(o.md, md) }
}

// Header stores the reply headers in *md.
func Header(md *Metadata) CallOption { return func(o *callOptions) { o.header = md } }

// Trailer stores the reply trailers in *md.
func Trailer(md *Metadata) CallOption { return func(o *callOptions) { o.trailer = md } }

// WithCodec chooses the codec instead of codec.For(req).
func WithCodec(cd codec.Codec) CallOption { return func(o *callOptions) { o.codec = cd } }

// Call performs a typed unary call.
func Call[Req, Resp any](ctx context.Context, c *Client, method string, req *Req, opts ...CallOption) (*Resp, error) {
	resp := new(Resp)
	if err := c.Invoke(ctx, method, req, resp, opts...); err != nil {
		return nil, err
	}
	return resp, nil
}

// Invoke performs a unary call: it sends req and decodes the reply into
// resp, which must be a pointer. For the raw codec, req is a []byte and resp
// a *[]byte whose capacity is reused: a reply that fits goes straight into
// it (on unix and tcp connections a large one is read from the socket into
// it, with no copy; a small one is copied there from the read buffer), and
// Invoke writes that memory only until it returns. Errors are
// *status.Error values.
func (c *Client) Invoke(ctx context.Context, method string, req, resp any, opts ...CallOption) error {
	if len(c.opts.Interceptors) == 0 {
		return c.invoke(ctx, method, req, resp, opts...) // not through the method value
	}
	return c.chain(ctx, method, req, resp, opts...)
}

func (c *Client) invoke(ctx context.Context, method string, req, resp any, opts ...CallOption) error {
	var o callOptions
	if len(opts) > 0 {
		o = *gatherOptions(opts)
	}
	cd := o.codec
	if cd == nil {
		cd = codec.For(req)
	}
	var timeout time.Duration
	if d, ok := ctx.Deadline(); ok {
		if timeout = time.Until(d); timeout <= 0 {
			return status.New(status.DeadlineExceeded, context.DeadlineExceeded.Error())
		}
	}
	data, scratch, err := encode(cd, req) // raw bytes are sent as they are
	if err != nil {
		return &status.Error{Code: status.Internal, Message: fmt.Sprintf("encoding %s request: %v", method, err), Cause: err}
	}
	r := balance.Retry{Pool: c.pool, Method: method}
	for {
		e, s, v, serr := r.Session(ctx, func(ctx context.Context, s *mux.Session) (map[string]bool, error) {
			return c.pureMethods(ctx, s, &o)
		})
		if serr == nil {
			e.Begin()
			v, err = c.attempt(ctx, s, method, cd, timeout, &o, data, resp)
			e.End()
		} else if !balance.NotPure(serr) {
			err = serr
		}
		if !r.Next(ctx, v, &err) {
			break
		}
	}
	pool.Put(scratch)
	return err
}

// attempt makes one try at a unary call on s. v says whether it may be
// retried.
func (c *Client) attempt(ctx context.Context, s *mux.Session, method string, cd codec.Codec, timeout time.Duration, o *callOptions, data []byte, resp any) (v balance.Verdict, err error) {
	var into []byte // a large reply may be read straight into it
	if rb, ok := resp.(*[]byte); ok && cd == codec.Raw {
		into = *rb
	}
	var st *mux.Stream
	if call := (mux.Call{Method: method, Codec: cd.ID(), Timeout: timeout, Metadata: o.md.pairs(), Msg: data, End: true, Recv: into}); o.files == nil {
		st, err = s.Open(ctx, call)
	} else {
		st, err = sendWithFiles(ctx, s, call, o.files)
	}
	if err != nil {
		if errors.Is(err, mux.ErrNoFiles) {
			return balance.Final, err
		}
		return retryable(drained(err) || isConnErr(err)), callError(err)
	}
	defer st.Release()
	var got bool
	for {
		buf, err := st.Recv(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				st.Cancel()
			}
			if !got && drained(err) {
				return balance.NotProcessed, callError(err)
			}
			if isConnErr(err) && ctx.Err() == nil {
				return balance.MayHaveRun, callError(err) // sent: it may have run
			}
			return balance.Final, callError(err)
		}
		if got {
			pool.Put(buf)
			st.Cancel()
			return balance.Final, status.Errorf(status.Internal, "%s: more than one reply message", method)
		}
		got = true
		if buf.Files != nil && o.recvFiles != nil {
			*o.recvFiles = toFiles(buf.Files)
			buf.Files = nil
		}
		err = cd.Unmarshal(buf.B, resp)
		pool.Put(buf)
		if err != nil {
			st.Cancel()
			return balance.Final, &status.Error{Code: status.Internal, Message: fmt.Sprintf("decoding %s reply: %v", method, err), Cause: err}
		}
	}
	if o.header != nil {
		if hb, ok := st.Header(); ok {
			*o.header, _ = parseMetadata(hb)
		}
	}
	tb, _ := st.Trailer()
	if len(tb) == 0 {
		if !got {
			return balance.Final, status.Errorf(status.Internal, "%s: no reply message", method)
		}
		return balance.Final, nil
	}
	tr, err := wire.ParseTrailer(tb)
	if err != nil {
		return balance.Final, status.Errorf(status.Internal, "%s: malformed trailer: %v", method, err)
	}
	if o.trailer != nil {
		*o.trailer, _ = parseMetadata(tr.Metadata)
	}
	if tr.Code != 0 {
		se := &status.Error{Code: status.Code(tr.Code), Message: string(tr.Message)}
		if len(tr.Details) > 0 {
			se.Details, _ = wire.ParseDetails(tr.Details)
		}
		return balance.Final, se
	}
	if !got {
		return balance.Final, status.Errorf(status.Internal, "%s: no reply message", method)
	}
	return balance.Final, nil
}

func rawBytes(v any) ([]byte, bool) {
	switch b := v.(type) {
	case []byte:
		return b, true
	case *[]byte:
		return *b, true
	}
	return nil, false
}

var drained, isConnErr = balance.Drained, balance.ConnLost

// retryable is NotProcessed if b, else Final.
func retryable(b bool) balance.Verdict {
	if b {
		return balance.NotProcessed
	}
	return balance.Final
}

// pureMethods fetches the methods the server of s marks free of side
// effects (IntrospectionMethod, with the call's metadata).
func (c *Client) pureMethods(ctx context.Context, s *mux.Session, o *callOptions) (map[string]bool, error) {
	var ml MethodList
	if _, err := c.attempt(ctx, s, IntrospectionMethod, codec.JSON, 0, &callOptions{md: o.md}, []byte("{}"), &ml); err != nil {
		return nil, err
	}
	pure := map[string]bool{}
	for _, m := range ml.Methods {
		pure[m.Name] = m.NoSideEffects
	}
	return pure, nil
}

// callError maps a transport-level error to a status.
func callError(err error) error {
	var se *status.Error
	var mt *wire.MessageTooLargeError
	var ft *wire.FrameTooLargeError // metadata over the server's MaxFrameSize
	var ga *GoAwayError
	var pe *wire.ProtocolError
	switch {
	case errors.As(err, &se):
		return err
	case errors.As(err, &pe):
		// The server broke the protocol: this side closed the connection.
		return &status.Error{Code: status.Internal, Message: err.Error(), Cause: err}
	case errors.As(err, &ga) && ga.Code != status.OK && ga.Code != status.Unavailable:
		// The server refused the connection (a limit or a policy).
		return &status.Error{Code: ga.Code, Message: ga.Message, Cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &status.Error{Code: status.DeadlineExceeded, Message: err.Error(), Cause: err}
	case errors.Is(err, context.Canceled):
		return &status.Error{Code: status.Canceled, Message: err.Error(), Cause: err}
	case errors.As(err, &mt), errors.As(err, &ft), errors.Is(err, mux.ErrTooManyStreams):
		return &status.Error{Code: status.ResourceExhausted, Message: err.Error(), Cause: err}
	case errors.Is(err, mux.ErrStreamCanceled):
		return &status.Error{Code: status.Canceled, Message: err.Error(), Cause: err}
	case errors.Is(err, ErrClientClosed):
		return &status.Error{Code: status.Canceled, Message: err.Error(), Cause: err}
	}
	return &status.Error{Code: status.Unavailable, Message: err.Error(), Cause: err}
}

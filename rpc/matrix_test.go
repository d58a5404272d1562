package rpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// The transport matrix runs the same behaviours over every kind of address a
// server can listen on: a socket file, an abstract unix socket, TCP and TLS.
// Servers are started with transport.Listen and clients with Dial, exactly
// as users do.

// mxTransport is one row of the matrix: a transport, and the server's mode
// (goroutine per connection, or the event loop where it can serve the
// listener; elsewhere Serve falls back to goroutines).
type mxTransport struct {
	name string
	loop bool // ServerOptions.EventLoop
	// listen returns a listener and the address and dial configuration a
	// client uses to reach it.
	listen func(t testing.TB) (l *transport.Listener, addr string, dial *transport.DialConfig)
}

var mxTransports = []mxTransport{
	{name: "unix-path", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		addr := "unix://" + filepath.Join(t.TempDir(), "m.sock")
		l, err := transport.Listen(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, addr, nil
	}},
	{name: "unix-abstract", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		addr := "unix:@warren-test-" + randomHex(8)
		l, err := transport.Listen(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, addr, nil
	}},
	{name: "tcp", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		l, err := transport.Listen("tcp://127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, "tcp://" + l.Addr().(*net.TCPAddr).String(), nil
	}},
	{name: "tls", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		srvConf, cliConf := testutil.TLSConfigs(t)
		l, err := transport.Listen("tls://127.0.0.1:0", &transport.ListenConfig{TLS: srvConf})
		if err != nil {
			t.Fatal(err)
		}
		return l, "tls://" + l.Addr().(*net.TCPAddr).String(), &transport.DialConfig{TLS: cliConf}
	}},
	{name: "ws", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		l, err := transport.Listen("ws://127.0.0.1:0/warren", nil)
		if err != nil {
			t.Fatal(err)
		}
		return l, l.Endpoint().String(), nil
	}},
	{name: "wss", listen: func(t testing.TB) (*transport.Listener, string, *transport.DialConfig) {
		srvConf, cliConf := testutil.TLSConfigs(t)
		l, err := transport.Listen("wss://127.0.0.1:0/warren", &transport.ListenConfig{TLS: srvConf})
		if err != nil {
			t.Fatal(err)
		}
		return l, l.Endpoint().String(), &transport.DialConfig{TLS: cliConf}
	}},
}

// mxRows is the matrix: every transport in both server modes.
func mxRows() []mxTransport {
	var rows []mxTransport
	for _, tr := range mxTransports {
		for _, loop := range []bool{false, true} {
			tr.loop = loop
			rows = append(rows, tr)
		}
	}
	return rows
}

// mode names a row's server mode.
func (tr mxTransport) mode() string {
	if tr.loop {
		return "eventloop"
	}
	return "goroutine"
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// mxEnv is a server and a client connected over one transport.
type mxEnv struct {
	tr     mxTransport
	addr   string
	dial   *transport.DialConfig
	srv    *Server
	client *Client

	serveDone chan struct{}
	serveErr  error // valid once serveDone is closed
}

// startMatrix serves srv over tr and returns a client for it, made with
// copts (nil for defaults) plus the transport's dial configuration. The
// server and client are closed when the test ends, and Serve must then have
// returned ErrServerClosed.
func startMatrix(t testing.TB, tr mxTransport, srv *Server, copts *ClientOptions) *mxEnv {
	t.Helper()
	l, addr, dial := tr.listen(t)
	srv.opts.EventLoop = srv.opts.EventLoop || tr.loop
	e := &mxEnv{tr: tr, addr: addr, dial: dial, srv: srv, serveDone: make(chan struct{})}
	go func() {
		e.serveErr = srv.Serve(l)
		close(e.serveDone)
	}()
	t.Cleanup(func() {
		srv.Close()
		if err := e.waitServe(5 * time.Second); !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	e.client = e.newClient(t, copts)
	return e
}

// newClient returns another client of the server, closed when the test ends.
func (e *mxEnv) newClient(t testing.TB, copts *ClientOptions) *Client {
	t.Helper()
	var o ClientOptions
	if copts != nil {
		o = *copts
	}
	if o.Dial == nil {
		o.Dial = e.dial
	}
	c, err := Dial(e.addr, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitServe waits for Serve to return and returns its error.
func (e *mxEnv) waitServe(d time.Duration) error {
	select {
	case <-e.serveDone:
		return e.serveErr
	case <-time.After(d):
		return errors.New("Serve did not return")
	}
}

type mxReq struct {
	Text string `json:"text"`
	N    int    `json:"n,omitempty"`
}

type mxReply struct {
	Text  string `json:"text"`
	Codec string `json:"codec"`
}

// callCodec returns the name of the codec the call whose handler received
// ctx was decoded with.
func callCodec(ctx context.Context) string {
	if c, ok := ctx.Value(callKey{}).(*serverCall); ok {
		return c.codec.Name()
	}
	return "?"
}

// waitFor fails the test if ch yields nothing within d.
func waitFor[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

func TestMatrix(t *testing.T) {
	behaviours := []struct {
		name string
		fn   func(t *testing.T, tr mxTransport)
	}{
		{"JSON", mxJSON},
		{"Raw", mxRaw},
		{"Proto", mxProto},
		{"PeerIdentity", mxPeerIdentity},
		{"Deadline", mxDeadline},
		{"Cancel", mxCancel},
		{"CancelFreesConnSlot", mxCancelFreesConnSlot},
		{"Metadata", mxMetadata},
		{"StatusDetails", mxStatusDetails},
		{"UnknownMethod", mxUnknownMethod},
		{"MethodPolicy", mxMethodPolicy},
		{"Introspection", mxIntrospection},
		{"Ping", mxPing},
		{"Shutdown", mxShutdown},
		{"CloseFailsPending", mxCloseFailsPending},
	}
	for _, tr := range mxRows() {
		t.Run(tr.name+"/"+tr.mode(), func(t *testing.T) {
			for _, b := range behaviours {
				t.Run(b.name, func(t *testing.T) { b.fn(t, tr) })
			}
		})
	}
}

func mxJSON(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	Handle(srv, "M.Echo", func(ctx context.Context, req *mxReq) (*mxReply, error) {
		return &mxReply{Text: strings.Repeat(req.Text, req.N), Codec: callCodec(ctx)}, nil
	})
	e := startMatrix(t, tr, srv, nil)
	r, err := Call[mxReq, mxReply](context.Background(), e.client, "M.Echo", &mxReq{Text: "ab", N: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "ababab" || r.Codec != "json" {
		t.Fatalf("reply %+v, want ababab over json", r)
	}
}

func mxRaw(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	HandleRaw(srv, "M.Raw", func(ctx context.Context, req []byte) ([]byte, error) {
		if c := callCodec(ctx); c != "raw" {
			return nil, status.Errorf(status.Internal, "codec %s", c)
		}
		return req, nil
	})
	e := startMatrix(t, tr, srv, nil)
	var out []byte
	for _, n := range []int{0, 1 << 10, 1 << 20, 3 << 20} {
		in := make([]byte, n)
		for i := range in {
			in[i] = byte(i*31 + i>>8)
		}
		out = append(out[:0], "stale"...)
		if err := e.client.Invoke(context.Background(), "M.Raw", in, &out); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("%d bytes: reply of %d bytes differs", n, len(out))
		}
	}
}

func mxProto(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	Handle(srv, "P.Echo", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(callCodec(ctx) + ":" + req.GetValue()), nil
	})
	e := startMatrix(t, tr, srv, nil)
	ctx := context.Background()
	r, err := Call[wrapperspb.StringValue, wrapperspb.StringValue](ctx, e.client, "P.Echo", wrapperspb.String("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetValue() != "proto:hi" {
		t.Fatalf("default codec for a proto.Message: reply %q, want proto:hi", r.GetValue())
	}
	// The same method over JSON: protojson on both sides.
	r, err = Call[wrapperspb.StringValue, wrapperspb.StringValue](ctx, e.client, "P.Echo", wrapperspb.String("hé"), WithCodec(codec.JSON))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetValue() != "json:hé" {
		t.Fatalf("json codec: reply %q, want json:hé", r.GetValue())
	}
	// A well-known wrapper type is a bare JSON string in protojson: check
	// the bytes on the wire by sending them raw with the JSON codec id.
	var out []byte
	if err := e.client.Invoke(ctx, "P.Echo", []byte(`"x"`), &out, WithCodec(jsonCodec())); err != nil {
		t.Fatal(err)
	}
	if string(out) != `"json:x"` {
		t.Fatalf("protojson reply %s, want \"json:x\"", out)
	}
	// The raw codec is refused, naming the codecs the method takes.
	err = e.client.Invoke(ctx, "P.Echo", []byte("x"), &out, WithCodec(codec.Raw))
	if status.CodeOf(err) != status.InvalidArgument || !strings.Contains(err.Error(), "P.Echo takes JSON or proto, not raw") {
		t.Fatalf("raw codec: %v", err)
	}
}

func mxPeerIdentity(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	peers := make(chan *peer.Peer, 1)
	Handle(srv, "M.Who", func(ctx context.Context, _ *Empty) (*Empty, error) {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return nil, status.New(status.Internal, "no peer in the handler's context")
		}
		peers <- p
		return &Empty{}, nil
	})
	e := startMatrix(t, tr, srv, nil)
	if _, err := Call[Empty, Empty](context.Background(), e.client, "M.Who", &Empty{}); err != nil {
		t.Fatal(err)
	}
	p := <-peers
	switch tr.name {
	case "unix-path", "unix-abstract":
		if p.Network != "unix" || !p.HasCred || p.UID != os.Geteuid() || p.PID != os.Getpid() {
			t.Fatalf("peer %+v: want unix with uid %d pid %d", p, os.Geteuid(), os.Getpid())
		}
	case "tcp":
		ta, ok := p.RemoteAddr.(*net.TCPAddr)
		if p.Network != "tcp" || !ok || !ta.IP.IsLoopback() || p.HasCred || p.TLS != nil {
			t.Fatalf("peer %+v: want a tcp peer on the loopback", p)
		}
	case "tls":
		_, ok := p.RemoteAddr.(*net.TCPAddr)
		if p.Network != "tls" || !ok || p.TLS == nil || !p.TLS.HandshakeComplete || p.HasCred {
			t.Fatalf("peer %+v: want a tls peer with its connection state", p)
		}
	case "ws", "wss":
		ta, ok := p.RemoteAddr.(*net.TCPAddr)
		if p.Network != tr.name || !ok || !ta.IP.IsLoopback() || p.HasCred || (p.TLS != nil) != (tr.name == "wss") {
			t.Fatalf("peer %+v: want a %s peer on the loopback", p, tr.name)
		}
	default:
		t.Fatalf("no identity check for %s", tr.name)
	}
}

func mxDeadline(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	type seen struct {
		left time.Duration
		ok   bool
		err  error
	}
	ch := make(chan seen, 1)
	Handle(srv, "M.Deadline", func(ctx context.Context, req *mxReq) (*Empty, error) {
		d, ok := ctx.Deadline()
		s := seen{left: time.Until(d), ok: ok}
		if req.Text == "wait" {
			select {
			case <-ctx.Done():
				s.err = ctx.Err()
			case <-time.After(10 * time.Second):
			}
		}
		ch <- s
		if s.err != nil {
			return nil, s.err
		}
		return &Empty{}, nil
	})
	e := startMatrix(t, tr, srv, nil)

	// A deadline travels with the call.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Call[mxReq, Empty](ctx, e.client, "M.Deadline", &mxReq{}); err != nil {
		t.Fatal(err)
	}
	if s := <-ch; !s.ok || s.left <= 0 || s.left > 5*time.Second {
		t.Fatalf("server deadline: ok=%v in %v, want within 5s", s.ok, s.left)
	}
	// No deadline on the client, none on the server.
	if _, err := Call[mxReq, Empty](context.Background(), e.client, "M.Deadline", &mxReq{}); err != nil {
		t.Fatal(err)
	}
	if s := <-ch; s.ok {
		t.Fatalf("server has a deadline in %v for a call without one", s.left)
	}
	// The deadline ends the handler's context and fails the call.
	ctx, cancel = context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Call[mxReq, Empty](ctx, e.client, "M.Deadline", &mxReq{Text: "wait"})
	if status.CodeOf(err) != status.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("the call took %v to fail", el)
	}
	// The server runs its own timer from when the call arrived, so the
	// client's CANCEL, sent when its deadline passes, may end the handler's
	// context first (PROTOCOL.md, Calls).
	if s := waitFor(t, ch, 5*time.Second, "the handler to end"); !errors.Is(s.err, context.DeadlineExceeded) && !errors.Is(s.err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want DeadlineExceeded or Canceled", s.err)
	}
	// An expired deadline fails at once.
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := Call[mxReq, Empty](ctx, e.client, "M.Deadline", &mxReq{}); status.CodeOf(err) != status.DeadlineExceeded {
		t.Fatalf("expired deadline: err = %v", err)
	}
}

func mxCancel(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	Handle(srv, "M.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
			ended <- nil
			return &Empty{}, nil
		}
	})
	Handle(srv, "M.Nop", func(ctx context.Context, _ *Empty) (*Empty, error) { return &Empty{}, nil })
	e := startMatrix(t, tr, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := Call[Empty, Empty](ctx, e.client, "M.Block", &Empty{})
		errc <- err
	}()
	waitFor(t, started, 5*time.Second, "the handler to start")
	cancel()
	if err := waitFor(t, errc, 5*time.Second, "the call to fail"); status.CodeOf(err) != status.Canceled {
		t.Fatalf("err = %v, want Canceled", err)
	}
	if err := waitFor(t, ended, 5*time.Second, "the handler to see the cancel"); !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", err)
	}
	if _, err := Call[Empty, Empty](context.Background(), e.client, "M.Nop", &Empty{}); err != nil {
		t.Fatalf("call after a cancel: %v", err)
	}
	if n := srv.Stats().Conns; n != 1 {
		t.Fatalf("%d connections after a cancel, want the same one", n)
	}
}

func mxMetadata(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	Handle(srv, "M.MD", func(ctx context.Context, _ *Empty) (*Empty, error) {
		in := IncomingMetadata(ctx)
		SetHeader(ctx, Metadata{"echo": in["k"], "method": {Method(ctx)}})
		SetTrailer(ctx, Metadata{"count": {"1", "2"}})
		return &Empty{}, nil
	})
	Handle(srv, "M.MDFail", func(ctx context.Context, _ *Empty) (*Empty, error) {
		SetHeader(ctx, Metadata{"h": {"on-error"}})
		SetTrailer(ctx, Metadata{"t": {"on-error"}})
		return nil, status.New(status.Aborted, "no")
	})
	e := startMatrix(t, tr, srv, nil)
	var hdr, trl Metadata
	_, err := Call[Empty, Empty](context.Background(), e.client, "M.MD", &Empty{},
		WithMetadata(Metadata{"k": {"a", "b"}}), WithMetadata(Metadata{"other": {"x"}}), Header(&hdr), Trailer(&trl))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(hdr["echo"], []string{"a", "b"}) || hdr.Get("method") != "M.MD" || !slices.Equal(trl["count"], []string{"1", "2"}) {
		t.Fatalf("header %v trailer %v", hdr, trl)
	}
	hdr, trl = nil, nil
	_, err = Call[Empty, Empty](context.Background(), e.client, "M.MDFail", &Empty{}, Header(&hdr), Trailer(&trl))
	if status.CodeOf(err) != status.Aborted {
		t.Fatalf("err = %v, want Aborted", err)
	}
	if hdr.Get("h") != "on-error" || trl.Get("t") != "on-error" {
		t.Fatalf("metadata with an error: header %v trailer %v", hdr, trl)
	}
}

func mxStatusDetails(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	Handle(srv, "M.Fail", func(ctx context.Context, req *mxReq) (*mxReply, error) {
		return nil, &status.Error{Code: status.FailedPrecondition, Message: "not ready: " + req.Text,
			Details: [][]byte{[]byte(`{"retry_ms":50}`), {}, {0, 1, 2}}}
	})
	e := startMatrix(t, tr, srv, nil)
	_, err := Call[mxReq, mxReply](context.Background(), e.client, "M.Fail", &mxReq{Text: "db"})
	var se *status.Error
	if !errors.As(err, &se) {
		t.Fatalf("err %T %v is not a *status.Error", err, err)
	}
	if se.Code != status.FailedPrecondition || se.Message != "not ready: db" || len(se.Details) != 3 ||
		string(se.Details[0]) != `{"retry_ms":50}` || len(se.Details[1]) != 0 || !bytes.Equal(se.Details[2], []byte{0, 1, 2}) {
		t.Fatalf("status %+v", se)
	}
	if !errors.Is(err, status.New(status.FailedPrecondition, "")) {
		t.Fatal("errors.Is does not match the code")
	}
}

func mxUnknownMethod(t *testing.T, tr mxTransport) {
	e := startMatrix(t, tr, NewServer(nil), nil)
	_, err := Call[Empty, Empty](context.Background(), e.client, "Nope.Missing", &Empty{})
	if status.CodeOf(err) != status.Unimplemented || !strings.Contains(err.Error(), "Nope.Missing") {
		t.Fatalf("err = %v, want Unimplemented naming Nope.Missing", err)
	}
	// A name no method can have is a malformed call header: InvalidArgument.
	for _, name := range []string{"/Nope/Missing", "Nope", "Nope.", ".Missing", "Nope.Miss ing"} {
		_, err := Call[Empty, Empty](context.Background(), e.client, name, &Empty{})
		if status.CodeOf(err) != status.InvalidArgument || !strings.Contains(err.Error(), "Service.Method") {
			t.Fatalf("%q: err = %v, want InvalidArgument", name, err)
		}
	}
	// The connection is still up.
	if _, err := Call[Empty, MethodList](context.Background(), e.client, IntrospectionMethod, &Empty{}); err != nil {
		t.Fatal(err)
	}
}

func mxMethodPolicy(t *testing.T, tr mxTransport) {
	if os.Geteuid() == 12345 {
		t.Skip("running as uid 12345")
	}
	srv := NewServer(nil)
	ran := make(chan struct{}, 1)
	Handle(srv, "M.Guarded", func(ctx context.Context, _ *Empty) (*Empty, error) {
		ran <- struct{}{}
		return &Empty{}, nil
	}, WithPolicy(peer.AllowUIDs(12345)))
	Handle(srv, "M.Open", func(ctx context.Context, _ *Empty) (*Empty, error) { return &Empty{}, nil })
	e := startMatrix(t, tr, srv, nil)
	_, err := Call[Empty, Empty](context.Background(), e.client, "M.Guarded", &Empty{})
	if status.CodeOf(err) != status.PermissionDenied {
		t.Fatalf("err = %v, want PermissionDenied", err)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran for a denied peer")
	default:
	}
	if _, err := Call[Empty, Empty](context.Background(), e.client, "M.Open", &Empty{}); err != nil {
		t.Fatalf("unguarded method: %v", err)
	}
	if st := srv.Stats(); st.Refused != 1 {
		t.Fatalf("refused = %d, want 1", st.Refused)
	}
}

func mxIntrospection(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	Handle(srv, "M.Echo", func(ctx context.Context, req *mxReq) (*mxReply, error) { return &mxReply{}, nil })
	Handle(srv, "P.Echo", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return req, nil
	})
	HandleRaw(srv, "M.Raw", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	e := startMatrix(t, tr, srv, nil)
	list, err := Call[Empty, MethodList](context.Background(), e.client, IntrospectionMethod, &Empty{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]MethodInfo{}
	var names []string
	for _, m := range list.Methods {
		byName[m.Name] = m
		names = append(names, m.Name)
	}
	if got := strings.Join(names, ","); got != "M.Echo,M.Raw,P.Echo,Warren.Methods" {
		t.Fatalf("methods %s", got)
	}
	if m := byName["M.Echo"]; m.Kind != "unary" || m.Request.Type != "object" || len(m.Request.Fields) != 2 ||
		m.Request.Fields[1].Name != "n" || m.Request.Fields[1].Shape.Type != "integer" || len(m.Reply.Fields) != 2 {
		t.Fatalf("M.Echo: %+v request %+v reply %+v", m, m.Request, m.Reply)
	}
	if m := byName["P.Echo"]; m.Request.Proto != "google.protobuf.StringValue" || m.Reply.Proto != "google.protobuf.StringValue" {
		t.Fatalf("P.Echo: request %+v reply %+v", m.Request, m.Reply)
	}
	if m := byName["M.Raw"]; m.Request.Type != "bytes" || m.Reply.Type != "bytes" {
		t.Fatalf("M.Raw: request %+v reply %+v", m.Request, m.Reply)
	}
}

func mxPing(t *testing.T, tr mxTransport) {
	e := startMatrix(t, tr, NewServer(nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		rtt, err := e.client.Ping(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rtt <= 0 || rtt > 5*time.Second {
			t.Fatalf("round trip %v", rtt)
		}
	}
}

func mxShutdown(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	started := make(chan struct{}, 1)
	Handle(srv, "M.Slow", func(ctx context.Context, req *mxReq) (*mxReply, error) {
		started <- struct{}{}
		time.Sleep(200 * time.Millisecond)
		return &mxReply{Text: "done " + req.Text}, nil
	})
	// The server is gone for good after its shutdown: retry briefly.
	e := startMatrix(t, tr, srv, &ClientOptions{MaxBackoff: time.Millisecond})
	type result struct {
		r   *mxReply
		err error
	}
	res := make(chan result, 1)
	go func() {
		r, err := Call[mxReq, mxReply](context.Background(), e.client, "M.Slow", &mxReq{Text: "x"})
		res <- result{r, err}
	}()
	waitFor(t, started, 5*time.Second, "the handler to start")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r := waitFor(t, res, 5*time.Second, "the in-flight call")
	if r.err != nil || r.r.Text != "done x" {
		t.Fatalf("in-flight call: %+v %v", r.r, r.err)
	}
	if err := e.waitServe(5 * time.Second); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
	_, err := Call[mxReq, mxReply](context.Background(), e.client, "M.Slow", &mxReq{})
	if status.CodeOf(err) != status.Unavailable {
		t.Fatalf("call after Shutdown: %v, want Unavailable", err)
	}
	if st := srv.Stats(); st.Conns != 0 || st.Calls != 0 {
		t.Fatalf("after Shutdown: %+v", st)
	}
}

func mxCloseFailsPending(t *testing.T, tr mxTransport) {
	srv := NewServer(nil)
	const n = 8
	started := make(chan struct{}, n)
	Handle(srv, "M.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	e := startMatrix(t, tr, srv, nil)
	errc := make(chan error, n)
	for range n {
		go func() {
			_, err := Call[Empty, Empty](context.Background(), e.client, "M.Block", &Empty{})
			errc <- err
		}()
	}
	for range n {
		waitFor(t, started, 5*time.Second, "the handlers to start")
	}
	start := time.Now()
	srv.Close()
	for range n {
		if err := waitFor(t, errc, 5*time.Second, "a pending call to fail"); status.CodeOf(err) != status.Unavailable {
			t.Errorf("err = %v, want Unavailable", err)
		}
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("pending calls took %v to fail", el)
	}
	if err := e.waitServe(5 * time.Second); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
}

// mxCancelFreesConnSlot checks PROTOCOL.md, Streams: a cancelled call stops
// counting against MaxCallsPerConn at once, though its handler still runs,
// so a caller that cancels one of its calls at the limit and calls again
// is not refused.
func mxCancelFreesConnSlot(t *testing.T, tr mxTransport) {
	srv := NewServer(&ServerOptions{MaxCallsPerConn: 2, CallRate: -1})
	release := make(chan struct{})
	started := make(chan struct{}, 8)
	Handle(srv, "T.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		started <- struct{}{}
		<-release // ignores its context: the handler outlives the cancel
		return &Empty{}, nil
	})
	e := startMatrix(t, tr, srv, nil)
	defer close(release)
	ctxs := make([]context.CancelFunc, 2)
	errc := make(chan error, 3)
	for i := range ctxs {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		go func() { _, err := Call[Empty, Empty](ctx, e.client, "T.Block", &Empty{}); errc <- err }()
		<-started
	}
	ctxs[0]()
	if err := <-errc; status.CodeOf(err) != status.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, err := Call[Empty, Empty](ctx, e.client, "T.Block", &Empty{}); errc <- err }()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("call after a cancel at the limit: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("call after a cancel at the limit did not start")
	}
	ctxs[1]()
	cancel()
}

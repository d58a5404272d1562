package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echoReq struct {
	Text  string `json:"text"`
	Delay int    `json:"delay_ms,omitempty"`
}

type echoReply struct {
	Text string `json:"text"`
}

// testServer starts srv on a unix socket in a temp dir (with the event
// loop, or on a ws:// listener, as suiteMode says) and returns a client for it. Both are
// closed when the test ends.
func testServer(t testing.TB, srv *Server, copts *ClientOptions) *Client {
	t.Helper()
	var o ClientOptions
	if copts != nil {
		o = *copts
	}
	loop, ws := suiteMode(t)
	if loop {
		srv.opts.EventLoop = true
	}
	var l net.Listener
	var addr string
	if ws {
		tl, err := transport.Listen("ws://127.0.0.1:0/warren", nil)
		if err != nil {
			t.Fatal(err)
		}
		l, addr, o.Dialer = tl, tl.Endpoint().String(), nil
	} else {
		path := filepath.Join(t.TempDir(), "s.sock")
		ul, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		l, addr = ul, "unix://"+path
		o.Dialer = func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	c, err := Dial(addr, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newEchoServer(opts *ServerOptions) *Server {
	srv := NewServer(opts)
	Handle(srv, "Echo.Say", func(ctx context.Context, req *echoReq) (*echoReply, error) {
		if req.Delay > 0 {
			select {
			case <-time.After(time.Duration(req.Delay) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &echoReply{Text: req.Text}, nil
	})
	HandleRaw(srv, "Echo.Raw", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	Handle(srv, "Echo.Fail", func(ctx context.Context, req *echoReq) (*echoReply, error) {
		return nil, &status.Error{Code: status.NotFound, Message: "no " + req.Text, Details: [][]byte{[]byte(`{"k":1}`)}}
	})
	Handle(srv, "Echo.Panic", func(ctx context.Context, req *echoReq) (*echoReply, error) {
		panic("boom")
	})
	return srv
}

func TestUnaryJSON(t *testing.T) {
	c := testServer(t, newEchoServer(nil), nil)
	r, err := Call[echoReq, echoReply](context.Background(), c, "Echo.Say", &echoReq{Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Text != "hi" {
		t.Fatalf("reply %q", r.Text)
	}
}

func TestUnaryRaw(t *testing.T) {
	c := testServer(t, newEchoServer(nil), nil)
	var out []byte
	for _, n := range []int{0, 1, 1024, 100 << 10, 1 << 20, 3 << 20} {
		in := make([]byte, n)
		for i := range in {
			in[i] = byte(i * 7)
		}
		if err := c.Invoke(context.Background(), "Echo.Raw", in, &out); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if string(out) != string(in) {
			t.Fatalf("%d bytes: reply differs", n)
		}
	}
}

func TestErrors(t *testing.T) {
	var logged strings.Builder
	var mu sync.Mutex
	srv := newEchoServer(&ServerOptions{Logger: newTestLogger(&logged, &mu)})
	c := testServer(t, srv, nil)
	ctx := context.Background()

	_, err := Call[echoReq, echoReply](ctx, c, "Echo.Nope", &echoReq{})
	if status.CodeOf(err) != status.Unimplemented || !strings.Contains(err.Error(), "Echo.Nope") {
		t.Errorf("unknown method: %v", err)
	}
	_, err = Call[echoReq, echoReply](ctx, c, "Echo.Fail", &echoReq{Text: "x"})
	se := status.FromError(err)
	if se.Code != status.NotFound || se.Message != "no x" || len(se.Details) != 1 || string(se.Details[0]) != `{"k":1}` {
		t.Errorf("handler error: %#v", se)
	}
	_, err = Call[echoReq, echoReply](ctx, c, "Echo.Panic", &echoReq{})
	if status.CodeOf(err) != status.Internal {
		t.Errorf("panic: %v", err)
	}
	mu.Lock()
	if !strings.Contains(logged.String(), "boom") {
		t.Errorf("panic not logged: %q", logged.String())
	}
	mu.Unlock()
	if srv.Stats().Panics != 1 {
		t.Errorf("panics = %d", srv.Stats().Panics)
	}
	// The connection survived every error.
	if _, err := Call[echoReq, echoReply](ctx, c, "Echo.Say", &echoReq{Text: "ok"}); err != nil {
		t.Errorf("call after errors: %v", err)
	}
	// Malformed JSON is InvalidArgument.
	var out []byte
	err = c.Invoke(ctx, "Echo.Say", []byte("{not json"), &out, WithCodec(jsonCodec()))
	if status.CodeOf(err) != status.InvalidArgument {
		t.Errorf("bad json: %v", err)
	}
}

func TestDeadlinePropagates(t *testing.T) {
	srv := NewServer(nil)
	seen := make(chan time.Duration, 1)
	Handle(srv, "T.Wait", func(ctx context.Context, _ *Empty) (*Empty, error) {
		d, ok := ctx.Deadline()
		if !ok {
			seen <- -1
		} else {
			seen <- time.Until(d)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Call[Empty, Empty](ctx, c, "T.Wait", &Empty{})
	if status.CodeOf(err) != status.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v", el)
	}
	if d := <-seen; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("server deadline in %v", d)
	}
}

func TestCancelReachesServer(t *testing.T) {
	srv := NewServer(nil)
	started := make(chan struct{})
	canceled := make(chan struct{})
	Handle(srv, "T.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		close(started)
		<-ctx.Done()
		close(canceled)
		return nil, ctx.Err()
	})
	c := testServer(t, srv, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := Call[Empty, Empty](ctx, c, "T.Block", &Empty{})
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; status.CodeOf(err) != status.Canceled {
		t.Fatalf("err = %v", err)
	}
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("server handler never saw the cancel")
	}
	// The connection is still usable.
	if _, err := Call[Empty, Empty](context.Background(), c, IntrospectionMethod, &Empty{}); err != nil {
		t.Fatal(err)
	}
}

func TestMetadata(t *testing.T) {
	srv := NewServer(nil)
	Handle(srv, "T.MD", func(ctx context.Context, _ *Empty) (*Empty, error) {
		in := IncomingMetadata(ctx)
		SetHeader(ctx, Metadata{"h": {"v-" + in.Get("k")}})
		SetTrailer(ctx, Metadata{"t": {"1", "2"}})
		if Method(ctx) != "T.MD" {
			return nil, status.Errorf(status.Internal, "method %q", Method(ctx))
		}
		return &Empty{}, nil
	})
	c := testServer(t, srv, nil)
	var hdr, trl Metadata
	_, err := Call[Empty, Empty](context.Background(), c, "T.MD", &Empty{},
		WithMetadata(Metadata{"k": {"x"}}), Header(&hdr), Trailer(&trl))
	if err != nil {
		t.Fatal(err)
	}
	if hdr.Get("h") != "v-x" || len(trl["t"]) != 2 {
		t.Fatalf("header %v trailer %v", hdr, trl)
	}
}

func TestConnDropFailsPendingCalls(t *testing.T) {
	srv := NewServer(nil)
	started := make(chan struct{}, 8)
	Handle(srv, "T.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	c := testServer(t, srv, nil)
	const n = 8
	errc := make(chan error, n)
	for range n {
		go func() {
			_, err := Call[Empty, Empty](context.Background(), c, "T.Block", &Empty{})
			errc <- err
		}()
	}
	for range n {
		<-started
	}
	start := time.Now()
	srv.Close()
	for range n {
		if err := <-errc; status.CodeOf(err) != status.Unavailable {
			t.Errorf("err = %v, want Unavailable", err)
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("pending calls took %v to fail", el)
	}
}

func TestLimits(t *testing.T) {
	srv := NewServer(&ServerOptions{MaxCallsPerConn: 2, CallRate: -1})
	release := make(chan struct{})
	var running atomic.Int32
	Handle(srv, "T.Block", func(ctx context.Context, _ *Empty) (*Empty, error) {
		running.Add(1)
		<-release
		return &Empty{}, nil
	})
	c := testServer(t, srv, nil)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := Call[Empty, Empty](context.Background(), c, "T.Block", &Empty{}); err != nil {
				t.Error(err)
			}
		})
	}
	for running.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	_, err := Call[Empty, Empty](context.Background(), c, "T.Block", &Empty{})
	if status.CodeOf(err) != status.ResourceExhausted {
		t.Errorf("third call: %v, want ResourceExhausted", err)
	}
	close(release)
	wg.Wait()
	if srv.Stats().Refused != 1 {
		t.Errorf("refused = %d", srv.Stats().Refused)
	}
}

// TestLimitsNeverRefuseWithinLimit checks that callers who never have more
// calls in flight than the limits allow are never refused: a call stops
// counting when the end of its reply is queued for writing, so a caller
// that gets its reply and calls again at once cannot find its previous call
// still counted. On workers (NoInline, large requests, streams) the reply's
// write and the slot's release used to race with the next call's admission.
func TestLimitsNeverRefuseWithinLimit(t *testing.T) {
	const callers = 4
	for _, tc := range []struct {
		name   string
		opts   ServerOptions
		size   int // request and reply bytes
		calls  int // per caller
		stream bool
	}{
		{"per-conn, workers", ServerOptions{MaxCallsPerConn: callers, NoInline: true}, 1, 2000, false},
		{"per-server, workers", ServerOptions{MaxCalls: callers, NoInline: true}, 1, 2000, false},
		{"per-conn, inline", ServerOptions{MaxCallsPerConn: callers}, 1, 2000, false},
		{"per-conn, 64 KiB replies written in place", ServerOptions{MaxCallsPerConn: callers}, 64 << 10, 300, false},
		{"per-conn, streams", ServerOptions{MaxCallsPerConn: callers}, 1, 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.CallRate = -1
			srv := NewServer(&tc.opts)
			HandleRaw(srv, "T.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
			HandleServerStream(srv, "T.Echoes", func(ctx context.Context, req *seqMsg, st *Stream[seqMsg, seqMsg]) error {
				return st.Send(req)
			})
			c := testServer(t, srv, nil)
			call := func(i int, req []byte, out *[]byte) error {
				if !tc.stream {
					return c.Invoke(context.Background(), "T.Echo", &req, out)
				}
				cs, err := NewStream[seqMsg, seqMsg](context.Background(), c, "T.Echoes")
				if err != nil {
					return err
				}
				if err := cs.Send(&seqMsg{Seq: i}); err != nil {
					return err
				}
				if err := cs.CloseSend(); err != nil {
					return err
				}
				for {
					if _, err := cs.Recv(); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
				}
			}
			var wg sync.WaitGroup
			var refused atomic.Int32
			for i := range callers {
				wg.Go(func() {
					req := bytes.Repeat([]byte{byte(i)}, tc.size)
					var out []byte
					for range tc.calls {
						err := call(i, req, &out)
						if status.CodeOf(err) == status.ResourceExhausted {
							refused.Add(1)
							continue
						}
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			if n := refused.Load(); n != 0 {
				t.Errorf("%d of %d calls refused, with never more than %d in flight", n, callers*tc.calls, callers)
			}
			if st := srv.Stats(); st.Refused != 0 || st.Calls != 0 {
				t.Errorf("stats after the last reply: %+v", st)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	srv := NewServer(&ServerOptions{CallRate: 1, CallBurst: 3})
	Handle(srv, "T.Nop", func(ctx context.Context, _ *Empty) (*Empty, error) { return &Empty{}, nil })
	c := testServer(t, srv, nil)
	var ok, limited int
	for range 6 {
		_, err := Call[Empty, Empty](context.Background(), c, "T.Nop", &Empty{})
		switch status.CodeOf(err) {
		case status.OK:
			ok++
		case status.ResourceExhausted:
			limited++
		default:
			t.Fatal(err)
		}
	}
	if ok < 3 || ok > 4 || limited != 6-ok {
		t.Fatalf("ok=%d limited=%d", ok, limited)
	}
}

func TestShutdownDrains(t *testing.T) {
	srv := NewServer(nil)
	started := make(chan struct{})
	Handle(srv, "T.Slow", func(ctx context.Context, _ *Empty) (*echoReply, error) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		return &echoReply{Text: "done"}, nil
	})
	c := testServer(t, srv, nil)
	errc := make(chan error, 1)
	var reply *echoReply
	go func() {
		var err error
		reply, err = Call[Empty, echoReply](context.Background(), c, "T.Slow", &Empty{})
		errc <- err
	}()
	<-started
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil || reply.Text != "done" {
		t.Fatalf("in-flight call: %v %v", reply, err)
	}
	_, err := Call[Empty, echoReply](context.Background(), c, "T.Slow", &Empty{})
	if status.CodeOf(err) != status.Unavailable {
		t.Fatalf("call after shutdown: %v", err)
	}
}

func TestIntrospection(t *testing.T) {
	c := testServer(t, newEchoServer(nil), nil)
	list, err := Call[Empty, MethodList](context.Background(), c, IntrospectionMethod, &Empty{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Methods {
		names = append(names, m.Name)
		if m.Name == "Echo.Say" {
			if m.Request.Type != "object" || len(m.Request.Fields) != 2 || m.Request.Fields[0].Name != "text" || m.Request.Fields[0].Shape.Type != "string" {
				t.Errorf("Echo.Say request shape: %+v", m.Request)
			}
		}
	}
	if got := strings.Join(names, ","); got != "Echo.Fail,Echo.Panic,Echo.Raw,Echo.Say,Warren.Methods" {
		t.Errorf("methods %s", got)
	}
	if v := list.Version; v == nil || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("version %+v", v)
	}
}

func TestInterceptors(t *testing.T) {
	var order []string
	var mu sync.Mutex
	add := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	srv := newEchoServer(&ServerOptions{Interceptors: []UnaryServerInterceptor{
		func(ctx context.Context, req any, info *CallInfo, next UnaryHandler) (any, error) {
			add("s1:" + info.Method)
			return next(ctx, req)
		},
		func(ctx context.Context, req any, info *CallInfo, next UnaryHandler) (any, error) {
			add("s2")
			if r, ok := req.(*echoReq); ok && r.Text == "deny" {
				return nil, status.New(status.PermissionDenied, "denied by interceptor")
			}
			return next(ctx, req)
		},
	}})
	c := testServer(t, srv, &ClientOptions{Interceptors: []UnaryClientInterceptor{
		func(ctx context.Context, method string, req, resp any, next UnaryInvoker, opts ...CallOption) error {
			add("c1:" + method)
			return next(ctx, method, req, resp, opts...)
		},
	}})
	if _, err := Call[echoReq, echoReply](context.Background(), c, "Echo.Say", &echoReq{Text: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := Call[echoReq, echoReply](context.Background(), c, "Echo.Say", &echoReq{Text: "deny"})
	if status.CodeOf(err) != status.PermissionDenied {
		t.Fatal(err)
	}
	want := "c1:Echo.Say,s1:Echo.Say,s2,c1:Echo.Say,s1:Echo.Say,s2"
	if got := strings.Join(order, ","); got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestReconnect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	start := func() (*Server, chan error) {
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := newEchoServer(nil)
		done := make(chan error, 1)
		useMode(t, srv)
		go func() { done <- srv.Serve(l) }()
		return srv, done
	}
	srv, done := start()
	c, err := Dial("unix://"+path, &ClientOptions{MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Dialer: func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := Call[echoReq, echoReply](ctx, c, "Echo.Say", &echoReq{Text: "1"}); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	<-done
	// Fail fast while the server is down.
	if _, err := Call[echoReq, echoReply](ctx, c, "Echo.Say", &echoReq{Text: "2"}); status.CodeOf(err) != status.Unavailable {
		t.Fatalf("while down: %v", err)
	}
	srv, done = start()
	defer func() { srv.Close(); <-done }()
	// WaitForReady-style retry by the caller: the client reconnects.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := Call[echoReq, echoReply](ctx, c, "Echo.Say", &echoReq{Text: "3"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConcurrentCalls(t *testing.T) {
	c := testServer(t, newEchoServer(nil), nil)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				want := fmt.Sprintf("%d-%d", g, i)
				r, err := Call[echoReq, echoReply](context.Background(), c, "Echo.Say", &echoReq{Text: want})
				if err != nil || r.Text != want {
					t.Errorf("%v %v", r, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestInvokeRawReplyInPlace: raw replies that the client may read straight
// into the caller's *[]byte (large ones that fit its capacity) arrive whole
// in that memory, as do small ones and ones larger than the capacity.
func TestInvokeRawReplyInPlace(t *testing.T) {
	srv := NewServer(nil)
	HandleRaw(srv, "Blob.Echo", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	c := testServer(t, srv, nil)
	ctx := testCtx(t, 10*time.Second)
	out := make([]byte, 0, 1<<20)
	for _, n := range []int{100 << 10, 900 << 10, 10, 3 << 20} {
		req := bytes.Repeat([]byte{byte(n)}, n)
		before := out[:1]
		if err := c.Invoke(ctx, "Blob.Echo", req, &out); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(out, req) {
			t.Fatalf("%d bytes: reply of %d bytes differs", n, len(out))
		}
		if n <= cap(before) && &out[0] != &before[0] {
			t.Fatalf("%d bytes: reply not in the caller's memory", n)
		}
	}
}

package rpc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/grpcbridge"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// httpEnv is a server with the counter service on a socket file, and an
// HTTP client for it.
type httpEnv struct {
	srv  *rpc.Server
	path string
	addr string
	hc   *http.Client
}

// startHTTP serves a new server on a socket file until the test ends.
// register adds methods; the counter service is always there.
func startHTTP(t *testing.T, opts *rpc.ServerOptions, register func(*rpc.Server)) *httpEnv {
	t.Helper()
	if opts == nil {
		opts = &rpc.ServerOptions{}
	}
	if opts.Logger == nil {
		var b strings.Builder
		opts.Logger = quietLogger(&b)
	}
	srv := rpc.NewServer(opts)
	counter.New().Register(srv)
	if register != nil {
		register(srv)
	}
	path := filepath.Join(t.TempDir(), "h.sock")
	addr := "unix://" + path
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	e := &httpEnv{srv: srv, path: path, addr: addr, hc: rpc.HTTPClient(addr, nil)}
	t.Cleanup(func() {
		e.hc.CloseIdleConnections()
		srv.Close()
		if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return e
}

// bridged returns opts (nil for defaults) with the bridge on: for the
// tests of Connect streaming.
func bridged(opts *rpc.ServerOptions) *rpc.ServerOptions {
	if opts == nil {
		opts = &rpc.ServerOptions{}
	}
	opts.Bridge = grpcbridge.New()
	return opts
}

// setCounter dials the server over warren, for the rest of the test, and
// sets counter name to value.
func (e *httpEnv) setCounter(t *testing.T, name string, value int64) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(e.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := rpc.Call[counter.SetRequest, counter.Entry](context.Background(), c, "Counter.Set", &counter.SetRequest{Name: name, Value: value}); err != nil {
		t.Fatal(err)
	}
	return c
}

// reply is an HTTP response read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
	close  bool // the server closes the connection after it
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request; header holds extra headers as key, value pairs.
func (e *httpEnv) do(t *testing.T, method, path, ctype string, body []byte, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, "http://warren"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{resp.StatusCode, resp.Header, b, resp.Close}
}

func (e *httpEnv) post(t *testing.T, path, body string, header ...string) reply {
	t.Helper()
	return e.do(t, http.MethodPost, path, "application/json", []byte(body), header...)
}

// connectErr is Connect's JSON error.
type connectErr struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []struct {
		Type  string          `json:"type"`
		Value string          `json:"value"`
		Debug json.RawMessage `json:"debug"`
	} `json:"details"`
}

// wantError checks that r is Connect's error with the HTTP status and code.
func wantError(t *testing.T, r reply, httpStatus int, code string) connectErr {
	t.Helper()
	var ce connectErr
	if err := json.Unmarshal(r.body, &ce); err != nil || r.status != httpStatus || ce.Code != code {
		t.Fatalf("reply %v, want HTTP %d with code %q (json: %v)", r, httpStatus, code, err)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error Content-Type %q", ct)
	}
	return ce
}

func wantJSON(t *testing.T, r reply, want string) {
	t.Helper()
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("reply %v (Content-Type %q), want 200 %s", r, r.header.Get("Content-Type"), want)
	}
	var got, exp any
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatalf("reply %s: %v", r.body, err)
	}
	json.Unmarshal([]byte(want), &exp)
	if a, b := fmt.Sprint(got), fmt.Sprint(exp); a != b {
		t.Fatalf("reply %s, want %s", r.body, want)
	}
}

// TestHTTPUnary calls the counter over HTTP: both path forms, the form
// content type curl sends with -d, and an empty body.
func TestHTTPUnary(t *testing.T) {
	e := startHTTP(t, nil, nil)
	wantJSON(t, e.post(t, "/Counter.Set", `{"name":"a","value":"40"}`), `{"name":"a","value":"40"}`)
	wantJSON(t, e.post(t, "/Counter/Inc", `{"name":"a","by":1}`), `{"name":"a","value":"41"}`)
	wantJSON(t, e.do(t, "POST", "/Counter.Inc", "application/x-www-form-urlencoded", []byte(`{"name":"a"}`)), `{"name":"a","value":"42"}`)
	wantJSON(t, e.do(t, "POST", "/Counter.Get", "", []byte(`{"name":"a"}`)), `{"name":"a","value":"42"}`)
	wantJSON(t, e.do(t, "POST", "/Counter.Get", "application/json; charset=utf-8", []byte(`{"name":"a"}`)), `{"name":"a","value":"42"}`)
	wantJSON(t, e.post(t, "/Counter.List", ``), `{"counters":[{"name":"a","value":"42"}]}`)
	// A call stops counting just after its reply has gone out.
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 0 })
	if st := e.srv.Stats(); st.CallsTotal != 6 {
		t.Fatalf("stats %+v", st)
	}
}

// TestHTTPErrors checks Connect's error body and status for the errors a
// call can end with.
func TestHTTPErrors(t *testing.T) {
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Err.Details", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			return nil, &status.Error{Code: status.FailedPrecondition, Message: "no", Details: [][]byte{[]byte(`{"known":["a"]}`), {0xff, 0x00}}}
		})
		rpc.Handle(srv, "Err.Plain", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			return nil, errors.New("plain error")
		})
		rpc.Handle(srv, "Err.Panic", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			panic("boom")
		})
		rpc.Handle(srv, "Err.Nil", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			return nil, nil
		})
	})
	ce := wantError(t, e.post(t, "/Counter.Get", `{"name":"zz"}`), 404, "not_found")
	if !strings.Contains(ce.Message, `no counter named "zz"`) {
		t.Fatalf("message %q", ce.Message)
	}
	wantError(t, e.post(t, "/Counter.Get", `{}`), 400, "invalid_argument")
	wantError(t, e.post(t, "/Counter.Get", `{"name":`), 400, "invalid_argument")
	wantError(t, e.post(t, "/Counter.Get", `[1,2]`), 400, "invalid_argument")
	ce = wantError(t, e.post(t, "/Counter.Reset", `{}`), 404, "unimplemented")
	if ce.Message != `unknown method "Counter.Reset"` {
		t.Fatalf("message %q", ce.Message)
	}
	wantError(t, e.post(t, "/Counter/Reset", `{}`), 404, "unimplemented")
	wantError(t, e.post(t, "/", `{}`), 404, "unimplemented")
	wantError(t, e.post(t, "/Err.Plain", `{}`), 500, "unknown")
	wantError(t, e.post(t, "/Err.Panic", `{}`), 500, "internal")
	wantError(t, e.post(t, "/Err.Nil", `{}`), 500, "internal")
	if st := e.srv.Stats(); st.Panics != 1 {
		t.Fatalf("stats %+v", st)
	}

	ce = wantError(t, e.post(t, "/Err.Details", `{}`), 400, "failed_precondition")
	if len(ce.Details) != 2 {
		t.Fatalf("details %+v", ce.Details)
	}
	d := ce.Details[0]
	raw, err := base64.RawStdEncoding.DecodeString(d.Value)
	var v structpb.Value
	if err != nil || d.Type != "google.protobuf.Value" || proto.Unmarshal(raw, &v) != nil ||
		v.GetStructValue().GetFields()["known"].GetListValue().GetValues()[0].GetStringValue() != "a" || string(d.Debug) != `{"known":["a"]}` {
		t.Fatalf("JSON detail %+v (%v)", d, err)
	}
	d = ce.Details[1]
	raw, err = base64.RawStdEncoding.DecodeString(d.Value)
	var bv wrapperspb.BytesValue
	if err != nil || d.Type != "google.protobuf.BytesValue" || proto.Unmarshal(raw, &bv) != nil || !bytes.Equal(bv.Value, []byte{0xff, 0}) {
		t.Fatalf("bytes detail %+v (%v)", d, err)
	}

	// Requests that are no call in any protocol get a plain-text answer:
	// clients map the HTTP status to a code.
	r := e.do(t, "POST", "/Counter.Get", "text/plain", []byte(`{"name":"a"}`))
	wantPlain(t, r, http.StatusUnsupportedMediaType, `unsupported Content-Type "text/plain"`)
	r = e.do(t, "PUT", "/Counter.Get", "application/json", []byte(`{}`))
	wantPlain(t, r, http.StatusMethodNotAllowed, "PUT: methods are called with POST")
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	wantError(t, e.do(t, "GET", "/Counter.Get", "", nil), http.StatusMethodNotAllowed, "unimplemented")
	wantError(t, e.post(t, "/Counter.Get", `{"name":"a"}`, "Connect-Protocol-Version", "2"), 400, "invalid_argument")
	// gzip is served; a body that is not gzip is refused.
	r = e.post(t, "/Counter.Get", `{"name":"a"}`, "Content-Encoding", "gzip")
	wantError(t, r, 400, "invalid_argument")
	r = e.post(t, "/Counter.Get", `{"name":"a"}`, "Content-Encoding", "br")
	wantError(t, r, 501, "unimplemented")
	if r.header.Get("Accept-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding %q", r.header.Get("Accept-Encoding"))
	}
	// A browser's cross-site form post (CSRF) is refused.
	wantError(t, e.post(t, "/Counter.Set", `{"name":"a"}`, "Sec-Fetch-Site", "cross-site"), 403, "permission_denied")
	wantError(t, e.post(t, "/Counter.Set", `{"name":"a"}`, "Origin", "http://evil.example"), 403, "permission_denied")
	// A WebSocket upgrade without its key is refused by the handshake.
	if r := e.do(t, "GET", "/", "", nil, "Connection", "Upgrade", "Upgrade", "websocket"); r.status != 400 {
		t.Fatalf("upgrade without a key: %v, want 400", r)
	}
}

// TestHTTPStatusMapping checks the Connect protocol's HTTP status for each
// code.
func TestHTTPStatusMapping(t *testing.T) {
	want := map[status.Code]int{
		status.OK: 200, status.Canceled: 499, status.Unknown: 500, status.InvalidArgument: 400,
		status.DeadlineExceeded: 504, status.NotFound: 404, status.AlreadyExists: 409,
		status.PermissionDenied: 403, status.ResourceExhausted: 429, status.FailedPrecondition: 400,
		status.Aborted: 409, status.OutOfRange: 400, status.Unimplemented: 501, status.Internal: 500,
		status.Unavailable: 503, status.DataLoss: 500, status.Unauthenticated: 401, status.Code(99): 500,
	}
	for code, st := range want {
		if got := rpc.HTTPStatus(code); got != st {
			t.Errorf("HTTPStatus(%v) = %d, want %d", code, got, st)
		}
	}
	// And over the wire, with every code.
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Err.Code", func(ctx context.Context, req *struct{ Code int }) (*rpc.Empty, error) {
			return nil, status.New(status.Code(req.Code), "x")
		})
	})
	for code := status.Canceled; code <= status.Unauthenticated; code++ {
		wantError(t, e.post(t, "/Err.Code", fmt.Sprintf(`{"Code":%d}`, code)), rpc.HTTPStatus(code), code.String())
	}
	wantError(t, e.post(t, "/Err.Code", `{"Code":99}`), 500, "unknown")
}

// TestHTTPBodyLimit refuses a body over MaxMessageSize with
// ResourceExhausted, before reading it when its length is known and at the
// limit when it is chunked.
func TestHTTPBodyLimit(t *testing.T) {
	var calls atomic.Int32
	e := startHTTP(t, &rpc.ServerOptions{Settings: wireSettings(1 << 10)}, func(srv *rpc.Server) {
		rpc.Handle(srv, "Big.Len", func(ctx context.Context, req *string) (*int, error) {
			calls.Add(1)
			n := len(*req)
			return &n, nil
		})
	})
	small := `"` + strings.Repeat("x", 1000) + `"`
	wantJSON(t, e.post(t, "/Big.Len", small), `1000`)

	// Content-Length over the limit: refused unread, and the connection
	// is not kept (the body was not read).
	big := `"` + strings.Repeat("x", 2000) + `"`
	r := e.post(t, "/Big.Len", big)
	ce := wantError(t, r, 429, "resource_exhausted")
	if !strings.Contains(ce.Message, "over the limit of 1024") || !r.close {
		t.Fatalf("message %q", ce.Message)
	}

	// Chunked: a body that never ends is cut off at the limit.
	var sent atomic.Int64
	req, _ := http.NewRequest("POST", "http://warren/Big.Len", io.MultiReader(strings.NewReader(`"`), &endless{n: &sent}))
	req.Header.Set("Content-Type", "application/json")
	// The server answers and closes while the client still writes: the
	// client may see its write fail (broken pipe) before it reads the 429.
	resp, err := e.hc.Do(req)
	switch {
	case err == nil:
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantError(t, reply{resp.StatusCode, resp.Header, b, resp.Close}, 429, "resource_exhausted")
	case !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET):
		t.Fatal(err)
	}
	if sent.Load() > 64<<20 {
		t.Fatalf("the server read %d bytes of a body over its 1 KiB limit", sent.Load())
	}
	if calls.Load() != 1 {
		t.Fatalf("the handler ran %d times, want once", calls.Load())
	}
	wantJSON(t, e.post(t, "/Big.Len", small), `1000`) // and the server is fine
}

// endless is a body that never ends.
type endless struct{ n *atomic.Int64 }

func (e *endless) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 'x'
	}
	e.n.Add(int64(len(b)))
	time.Sleep(time.Millisecond)
	return len(b), nil
}

// TestHTTPTimeout checks that Connect-Timeout-Ms sets the call's deadline.
func TestHTTPTimeout(t *testing.T) {
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Time.Left", func(ctx context.Context, req *rpc.Empty) (*int64, error) {
			d, ok := ctx.Deadline()
			ms := int64(-1)
			if ok {
				ms = time.Until(d).Milliseconds()
			}
			return &ms, nil
		})
		rpc.Handle(srv, "Time.Wait", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	wantJSON(t, e.post(t, "/Time.Left", `{}`), `-1`)
	r := e.post(t, "/Time.Left", `{}`, "Connect-Timeout-Ms", "5000")
	ms, err := strconv.Atoi(string(r.body))
	if err != nil || ms < 4000 || ms > 5000 {
		t.Fatalf("deadline in %s ms, want about 5000", r.body)
	}
	start := time.Now()
	wantError(t, e.post(t, "/Time.Wait", `{}`, "Connect-Timeout-Ms", "50"), 504, "deadline_exceeded")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v", d)
	}
	for _, bad := range []string{"x", "-1", "12345678901", ""} {
		wantError(t, e.post(t, "/Time.Left", `{}`, "Connect-Timeout-Ms", bad), 400, "invalid_argument")
	}
}

// TestHTTPMetadata maps request headers to metadata, and reply headers and
// trailers to headers.
func TestHTTPMetadata(t *testing.T) {
	var got rpc.Metadata
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Md.Echo", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			got = rpc.IncomingMetadata(ctx)
			rpc.SetHeader(ctx, rpc.Metadata{"request-id": {got.Get("request-id")}, "content-type": {"text/evil"}})
			rpc.SetTrailer(ctx, rpc.Metadata{"served-by": {"test"}})
			if rpc.Method(ctx) != "Md.Echo" {
				return nil, status.New(status.Internal, "method "+rpc.Method(ctx))
			}
			if p, ok := peer.FromContext(ctx); !ok || !p.HasCred || p.UID != os.Geteuid() {
				return nil, status.Errorf(status.Internal, "peer %v", p)
			}
			return &rpc.Empty{}, nil
		})
		rpc.Handle(srv, "Md.Fail", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			rpc.SetHeader(ctx, rpc.Metadata{"h": {"1"}})
			rpc.SetTrailer(ctx, rpc.Metadata{"t": {"2"}})
			return nil, status.New(status.Aborted, "no")
		})
	})
	r := e.post(t, "/Md.Echo", `{}`, "Request-Id", "r-42", "X-Tag", "a", "X-Tag", "b",
		"Connect-Timeout-Ms", "10000", "Connection", "keep-alive")
	wantJSON(t, r, `{}`)
	if got.Get("request-id") != "r-42" || len(got["x-tag"]) != 2 || got.Get("user-agent") == "" {
		t.Fatalf("metadata %v", got)
	}
	for k := range got {
		if strings.HasPrefix(k, "content-") || strings.HasPrefix(k, "connect-") || k == "connection" || k == "accept-encoding" || k != strings.ToLower(k) {
			t.Fatalf("metadata %v has %q", got, k)
		}
	}
	if r.header.Get("Request-Id") != "r-42" || r.header.Get("Trailer-Served-By") != "test" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("reply headers %v", r.header)
	}
	r = e.post(t, "/Md.Fail", `{}`)
	wantError(t, r, 409, "aborted")
	if r.header.Get("H") != "1" || r.header.Get("Trailer-T") != "2" {
		t.Fatalf("error reply headers %v", r.header)
	}
}

// TestHTTPPolicies applies the server's policy, connection limits, method
// policies, rate limits and interceptors to HTTP calls as to warren calls.
func TestHTTPPolicies(t *testing.T) {
	deny := peer.PolicyFunc(func(p *peer.Peer) error { return fmt.Errorf("%w: not you", peer.ErrDenied) })
	t.Run("server policy", func(t *testing.T) {
		// A refused peer's HTTP request is answered in its protocol, and
		// the connection closes.
		e := startHTTP(t, &rpc.ServerOptions{Policy: deny}, nil)
		wantRefusedHTTP(t, e.path, "not you", 403, "permission_denied", status.PermissionDenied)
		if st := e.srv.Stats(); st.ConnsRejected == 0 || st.CallsTotal != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
	t.Run("server policy, event loop", func(t *testing.T) {
		e := startHTTP(t, &rpc.ServerOptions{Policy: deny, EventLoop: true}, nil)
		wantRefusedHTTP(t, e.path, "not you", 403, "permission_denied", status.PermissionDenied)
	})
	t.Run("method policy", func(t *testing.T) {
		e := startHTTP(t, nil, func(srv *rpc.Server) {
			rpc.Handle(srv, "Secret.Get", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) { return req, nil },
				rpc.WithPolicy(deny))
		})
		wantError(t, e.post(t, "/Secret.Get", `{}`), 403, "permission_denied")
		wantJSON(t, e.post(t, "/Counter.Set", `{"name":"a"}`), `{"name":"a"}`)
	})
	t.Run("max conns", func(t *testing.T) {
		e := startHTTP(t, &rpc.ServerOptions{MaxConns: 1}, nil)
		c, err := rpc.Dial(e.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := rpc.Call[counter.SetRequest, counter.Entry](context.Background(), c, "Counter.Set", &counter.SetRequest{Name: "a"}); err != nil {
			t.Fatal(err)
		}
		wantRefusedHTTP(t, e.path, "too many connections", 429, "resource_exhausted", status.ResourceExhausted)
		c.Close()
		testutil.WaitFor(t, func() bool { return e.srv.Stats().Conns == 0 })
		wantJSON(t, e.post(t, "/Counter.Get", `{"name":"a"}`), `{"name":"a"}`)
	})
	t.Run("rate", func(t *testing.T) {
		e := startHTTP(t, &rpc.ServerOptions{CallRate: 0.001, CallBurst: 2}, nil)
		wantJSON(t, e.post(t, "/Counter.Set", `{"name":"a"}`), `{"name":"a"}`)
		wantJSON(t, e.post(t, "/Counter.Get", `{"name":"a"}`), `{"name":"a"}`)
		ce := wantError(t, e.post(t, "/Counter.Get", `{"name":"a"}`), 429, "resource_exhausted")
		if !strings.Contains(ce.Message, "rate limit") {
			t.Fatalf("message %q", ce.Message)
		}
	})
	t.Run("interceptors", func(t *testing.T) {
		var seen []string
		var mu sync.Mutex
		e := startHTTP(t, bridged(&rpc.ServerOptions{
			Interceptors: []rpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *rpc.CallInfo, next rpc.UnaryHandler) (any, error) {
				mu.Lock()
				seen = append(seen, info.Method)
				mu.Unlock()
				if info.Method == "Counter.Inc" {
					return nil, status.New(status.Unauthenticated, "who are you")
				}
				return next(ctx, req)
			}},
			StreamInterceptors: []rpc.StreamServerInterceptor{func(ctx context.Context, info *rpc.CallInfo, next func(context.Context) error) error {
				mu.Lock()
				seen = append(seen, "stream "+info.Method)
				mu.Unlock()
				return status.New(status.Unauthenticated, "streams neither")
			}},
		}), nil)
		wantJSON(t, e.post(t, "/Counter.Set", `{"name":"a"}`), `{"name":"a"}`)
		wantError(t, e.post(t, "/Counter.Inc", `{"name":"a"}`), 401, "unauthenticated")
		msgs, end := watchRaw(t, e, `{"name":"a"}`)
		if len(msgs) != 0 || end.Error == nil || end.Error.Code != "unauthenticated" {
			t.Fatalf("watch: %v %+v", msgs, end)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(seen, ",") != "Counter.Set,Counter.Inc,stream Counter.Watch" {
			t.Fatalf("interceptors saw %v", seen)
		}
	})
	t.Run("concurrent calls", func(t *testing.T) {
		release := make(chan struct{})
		e := startHTTP(t, &rpc.ServerOptions{MaxCalls: 1}, func(srv *rpc.Server) {
			rpc.Handle(srv, "Slow.Wait", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
				<-release
				return req, nil
			})
		})
		done := make(chan reply)
		go func() { done <- e.post(t, "/Slow.Wait", `{}`) }()
		testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 1 })
		ce := wantError(t, e.post(t, "/Counter.List", `{}`), 429, "resource_exhausted")
		if !strings.Contains(ce.Message, "too many concurrent calls on this server") {
			t.Fatalf("message %q", ce.Message)
		}
		close(release)
		wantJSON(t, <-done, `{}`)
	})
}

// wantPlain checks a plain-text error reply.
func wantPlain(t *testing.T, r reply, code int, msg string) {
	t.Helper()
	if r.status != code || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") || !strings.Contains(string(r.body), msg) {
		t.Fatalf("reply %v, want HTTP %d in plain text with %q", r, code, msg)
	}
}

// envelope encodes one Connect streaming message.
func envelope(flags byte, msg string) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// endStream is Connect's end-stream message.
type endStream struct {
	Error    *connectErr         `json:"error"`
	Metadata map[string][]string `json:"metadata"`
}

// readEnvelope reads one enveloped message.
func readEnvelope(r io.Reader) (flags byte, msg []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	msg = make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	_, err = io.ReadFull(r, msg)
	return hdr[0], msg, err
}

// openWatch starts Counter.Watch with a request body and returns the
// response.
func openWatch(t *testing.T, ctx context.Context, e *httpEnv, body []byte, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://warren/Counter.Watch", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/connect+json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("watch: %s %v", resp.Status, resp.Header)
	}
	return resp
}

// watchRaw runs a watch that is expected to end by itself, and returns its
// messages and end-stream message.
func watchRaw(t *testing.T, e *httpEnv, req string) ([]string, endStream) {
	t.Helper()
	resp := openWatch(t, context.Background(), e, envelope(0, req))
	defer resp.Body.Close()
	var msgs []string
	for {
		flags, msg, err := readEnvelope(resp.Body)
		if err != nil {
			t.Fatalf("stream ended without an end-stream message: %v", err)
		}
		if flags&2 != 0 {
			var end endStream
			if err := json.Unmarshal(msg, &end); err != nil {
				t.Fatalf("end-stream %q: %v", msg, err)
			}
			if _, err := resp.Body.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("data after the end-stream message (%v)", err)
			}
			return msgs, end
		}
		msgs = append(msgs, string(msg))
	}
}

// TestHTTPServerStream watches a counter over HTTP in Connect's streaming
// protocol: the current value, changes made meanwhile, and the end of the
// call when the client goes away.
func TestHTTPServerStream(t *testing.T) {
	e := startHTTP(t, bridged(nil), nil)
	wantJSON(t, e.post(t, "/Counter.Set", `{"name":"w","value":"1"}`), `{"name":"w","value":"1"}`)
	ctx, cancel := context.WithCancel(context.Background())
	resp := openWatch(t, ctx, e, envelope(0, `{"name":"w"}`))
	for want := 1; want <= 3; want++ {
		flags, msg, err := readEnvelope(resp.Body)
		if err != nil || flags != 0 || string(msg) != fmt.Sprintf(`{"name":"w","value":"%d"}`, want) {
			t.Fatalf("message %d: %q flags %d %v", want, msg, flags, err)
		}
		if want < 3 {
			wantJSON(t, e.post(t, "/Counter.Inc", `{"name":"w"}`), fmt.Sprintf(`{"name":"w","value":"%d"}`, want+1))
		}
	}
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 1 }) // the watch alone
	// The client goes away: the handler's context ends.
	cancel()
	resp.Body.Close()
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 0 })

	// Errors end the stream with an end-stream message, HTTP status 200.
	msgs, end := watchRaw(t, e, `{}`)
	if len(msgs) != 0 || end.Error == nil || end.Error.Code != "invalid_argument" || !strings.Contains(end.Error.Message, "name") {
		t.Fatalf("watch without a name: %v %+v", msgs, end)
	}
	// Connect-Timeout-Ms ends a stream with deadline_exceeded.
	resp = openWatch(t, context.Background(), e, envelope(0, `{"name":"w"}`), "Connect-Timeout-Ms", "100")
	readEnvelope(resp.Body) // the current value
	flags, msg, err := readEnvelope(resp.Body)
	resp.Body.Close()
	if err != nil || flags != 2 || !strings.Contains(string(msg), `"deadline_exceeded"`) {
		t.Fatalf("after the timeout: %q flags %d %v", msg, flags, err)
	}
	for _, tc := range []struct {
		name, body, code string
	}{
		{"no message", "", "unimplemented"}, // as connect-go answers it
		{"two messages", string(envelope(0, `{"name":"w"}`)) + string(envelope(0, `{"name":"w"}`)), "unimplemented"},
		{"truncated", string(envelope(0, `{"name":"w"}`)[:8]), "internal"}, // connect-go: a protocol error
		{"compressed", string(envelope(1, `{"name":"w"}`)), "internal"},
		{"end-stream flag", string(envelope(2, `{}`)), "unimplemented"},
		{"malformed", string(envelope(0, `{"name":`)), "invalid_argument"},
		{"too large", string(envelope(0, `{"name":"`+strings.Repeat("x", 5<<20)+`"}`)), "resource_exhausted"},
	} {
		resp := openWatch(t, context.Background(), e, []byte(tc.body))
		_, msg, err := readEnvelope(resp.Body)
		resp.Body.Close()
		var end endStream
		if err != nil || json.Unmarshal(msg, &end) != nil || end.Error == nil || end.Error.Code != tc.code {
			t.Fatalf("%s: %q %v, want %s", tc.name, msg, err, tc.code)
		}
	}
	// A unary content type for a streaming method, and the reverse.
	wantError(t, e.post(t, "/Counter.Watch", `{"name":"w"}`), http.StatusUnsupportedMediaType, "invalid_argument") // a Connect error: the content type is a protocol's
	r := e.do(t, "POST", "/Counter.Get", "application/connect+json", envelope(0, `{"name":"w"}`))
	if r.status != http.StatusUnsupportedMediaType || !bytes.Contains(r.body, []byte("is a unary method: call it with Content-Type application/json")) {
		t.Fatalf("unary method called as a stream: %v", r)
	}
	r = e.do(t, "POST", "/Nope.Watch", "application/connect+json", envelope(0, `{}`))
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"unimplemented"`)) {
		t.Fatalf("unknown streaming method: %v", r)
	}
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Calls == 0 })
}

// TestHTTPStreams runs client-streaming and bidirectional methods, and
// stream metadata, over HTTP.
func TestHTTPStreams(t *testing.T) {
	e := startHTTP(t, bridged(nil), func(srv *rpc.Server) {
		rpc.HandleClientStream(srv, "Sum.Add", func(ctx context.Context, st *rpc.Stream[int, int]) (*int, error) {
			rpc.SetTrailer(ctx, rpc.Metadata{"count": {"?"}})
			sum := 0
			for {
				n, err := st.Recv()
				if err == io.EOF {
					return &sum, nil
				}
				if err != nil {
					return nil, err
				}
				sum += *n
			}
		})
		rpc.HandleBidiStream(srv, "Sum.Running", func(ctx context.Context, st *rpc.Stream[int, int]) error {
			rpc.SetHeader(ctx, rpc.Metadata{"kind": {"running"}})
			sum := 0
			for {
				n, err := st.Recv()
				if err == io.EOF {
					rpc.SetTrailer(ctx, rpc.Metadata{"total": {strconv.Itoa(sum)}})
					return nil
				}
				if err != nil {
					return err
				}
				sum += *n
				if err := st.Send(&sum); err != nil {
					return err
				}
			}
		})
	})
	var body []byte
	for _, n := range []string{"1", "2", "3"} {
		body = append(body, envelope(0, n)...)
	}
	r := e.do(t, "POST", "/Sum.Add", "application/connect+json", body)
	rd := bytes.NewReader(r.body)
	_, msg, _ := readEnvelope(rd)
	flags, end, _ := readEnvelope(rd)
	if r.status != 200 || string(msg) != "6" || flags != 2 || string(end) != `{"metadata":{"Count":["?"]}}` {
		t.Fatalf("client stream: %v: %q %q", r, msg, end)
	}
	r = e.do(t, "POST", "/Sum/Running", "application/connect+json", body)
	rd = bytes.NewReader(r.body)
	var got []string
	for {
		flags, msg, err := readEnvelope(rd)
		if err != nil {
			t.Fatalf("bidi: %v: %v", r, err)
		}
		got = append(got, string(msg))
		if flags == 2 {
			break
		}
	}
	if strings.Join(got, " ") != `1 3 6 {"metadata":{"Total":["6"]}}` || r.header.Get("Kind") != "running" {
		t.Fatalf("bidi: %q %v", got, r.header)
	}
}

// TestHTTPMethodList serves the method list on GET /.
func TestHTTPMethodList(t *testing.T) {
	e := startHTTP(t, nil, nil)
	for _, method := range []string{"GET", "HEAD"} {
		r := e.do(t, method, "/", "", nil)
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s /: %v", method, r)
		}
		if method == "HEAD" {
			continue
		}
		var list rpc.MethodList
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		kinds := map[string]string{}
		for _, m := range list.Methods {
			kinds[m.Name] = m.Kind
		}
		if kinds["Counter.Watch"] != "server_stream" || kinds["Counter.Inc"] != "unary" || kinds[rpc.IntrospectionMethod] != "unary" {
			t.Fatalf("methods %v", kinds)
		}
	}
	wantJSON(t, e.post(t, "/"+rpc.IntrospectionMethod, ``), string(e.do(t, "GET", "/", "", nil).body))
}

// TestHTTPKeepAlive makes many calls on one connection.
func TestHTTPKeepAlive(t *testing.T) {
	e := startHTTP(t, nil, nil)
	var reused atomic.Int32
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Add(1)
		}
	}}
	for i := range 20 {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			"POST", "http://warren/Counter.Set", strings.NewReader(fmt.Sprintf(`{"name":"k","value":"%d"}`, i)))
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if reused.Load() != 19 || e.srv.Stats().Conns != 1 {
		t.Fatalf("%d of 20 requests reused the connection; %d connections", reused.Load(), e.srv.Stats().Conns)
	}
	// A watch, then a unary call, on one connection.
	resp := openWatch(t, context.Background(), e, envelope(0, `{"name":"k"}`), "Connect-Timeout-Ms", "50")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	wantJSON(t, e.post(t, "/Counter.Get", `{"name":"k"}`), `{"name":"k","value":"19"}`)
	if n := e.srv.Stats().Conns; n != 1 {
		t.Fatalf("%d connections", n)
	}
}

// TestHTTPAndWarren serves warren and HTTP clients on one listener at once.
func TestHTTPAndWarren(t *testing.T) {
	e := startHTTP(t, nil, nil)
	c := e.setCounter(t, "x", 0)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if _, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "x"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
		wg.Go(func() {
			for range 25 {
				req, _ := http.NewRequest("POST", "http://warren/Counter/Inc", strings.NewReader(`{"name":"x"}`))
				resp, err := e.hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := rpc.Call[counter.GetRequest, counter.Entry](ctx, c, "Counter.Get", &counter.GetRequest{Name: "x"})
	if err != nil || got.Value != 400 {
		t.Fatalf("value %v %v, want 400", got, err)
	}
}

// TestHTTPProto calls a protobuf method with application/proto and JSON.
func TestHTTPProto(t *testing.T) {
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Str.Upper", func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return wrapperspb.String(strings.ToUpper(req.Value)), nil
		})
		rpc.Handle(srv, "Plain.Get", func(ctx context.Context, req *struct{ Name string }) (*struct{ Name string }, error) {
			return req, nil
		})
	})
	in, _ := proto.Marshal(wrapperspb.String("abc"))
	r := e.do(t, "POST", "/Str.Upper", "application/proto", in)
	var out wrapperspb.StringValue
	if r.status != 200 || r.header.Get("Content-Type") != "application/proto" || proto.Unmarshal(r.body, &out) != nil || out.Value != "ABC" {
		t.Fatalf("proto: %v", r)
	}
	wantJSON(t, e.post(t, "/Str.Upper", `"xyz"`), `"XYZ"`) // protojson
	// A method of plain Go structs takes JSON only, and says so.
	r = e.do(t, "POST", "/Plain.Get", "application/proto", in)
	wantError(t, r, 400, "invalid_argument")
	if !bytes.Contains(r.body, []byte("Plain.Get takes JSON, not proto")) {
		t.Fatalf("plain method called with protobuf: %v", r)
	}
}

// TestHTTPRaw calls a raw-bytes method with application/octet-stream.
func TestHTTPRaw(t *testing.T) {
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.HandleRaw(srv, "Bytes.Upper", func(ctx context.Context, req []byte) ([]byte, error) { return bytes.ToUpper(req), nil })
	})
	r := e.do(t, "POST", "/Bytes.Upper", "application/octet-stream", []byte("hello"))
	if r.status != 200 || string(r.body) != "HELLO" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("raw: %v", r)
	}
	wantError(t, e.post(t, "/Bytes.Upper", `"x"`), 400, "invalid_argument")
}

// TestHTTPNotWarrenPeers: with the bridge on (the default), an HTTP/1.1
// request is served, HTTP/2 is refused, other junk closed as before.
func TestHTTPNotWarrenPeers(t *testing.T) {
	e := startHTTP(t, nil, nil)
	raw := func(req string) string {
		conn, err := net.Dial("unix", e.path)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte(req))
		b, _ := io.ReadAll(conn)
		return string(b)
	}
	resp := raw("POST /Counter.Set HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nConnection: close\r\n\r\n{\"name\":\"a\"}")
	if !strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(resp, `{"name":"a"}`) {
		t.Fatalf("response %q", resp)
	}
	resp = raw("GET / HTTP/1.0\r\n\r\n") // HTTP/1.0 without Host works too
	if !strings.HasPrefix(resp, "HTTP/1.0 200 OK\r\n") || !strings.Contains(resp, `"Counter.Watch"`) {
		t.Fatalf("response %q", resp)
	}
	// HTTP/2 with prior knowledge: the server's SETTINGS frame answers.
	resp = raw("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if len(resp) < 9 || resp[3] != 0x4 { // frame type SETTINGS
		t.Fatalf("response %q", resp)
	}
	resp = raw("\x16\x03\x01\x02\x00\x01")
	if resp != "" {
		t.Fatalf("response %q", resp)
	}
	// An idle HTTP connection is counted, and closed by Close (see the
	// cleanup of startHTTP and the leak check).
	conn, err := net.Dial("unix", e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	br := bufio.NewReader(conn)
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("%v %v", r, err)
	}
	io.Copy(io.Discard, r.Body)
	testutil.WaitFor(t, func() bool { return e.srv.Stats().Conns == 1 })
}

// TestHTTPShutdown: Shutdown lets an HTTP call in progress finish and
// deliver its reply, refuses new ones, and closes idle connections.
func TestHTTPShutdown(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	e := startHTTP(t, nil, func(srv *rpc.Server) {
		rpc.Handle(srv, "Slow.Wait", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
			close(entered)
			<-release
			return req, nil
		})
	})
	idle := rpc.HTTPClient(e.addr, nil)
	defer idle.CloseIdleConnections()
	resp, err := idle.Post("http://warren/Counter.List", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	done := make(chan reply)
	go func() { done <- e.post(t, "/Slow.Wait", `{}`) }()
	<-entered
	shut := make(chan error)
	go func() { shut <- e.srv.Shutdown(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a call in progress", err)
	default:
	}
	close(release)
	wantJSON(t, <-done, `{}`)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	// The idle connection is closed: a new request fails or is refused.
	resp, err = idle.Post("http://warren/Counter.List", "application/json", strings.NewReader(`{}`))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("request after Shutdown: %s %s", resp.Status, b)
	}
}

// TestHTTPCloseEndsStreams: Close ends a watch in progress over HTTP.
func TestHTTPCloseEndsStreams(t *testing.T) {
	e := startHTTP(t, bridged(nil), nil)
	e.post(t, "/Counter.Set", `{"name":"c"}`)
	resp := openWatch(t, context.Background(), e, envelope(0, `{"name":"c"}`)) // returns with the first message
	defer resp.Body.Close()
	if _, msg, err := readEnvelope(resp.Body); err != nil || string(msg) != `{"name":"c"}` {
		t.Fatalf("%q %v", msg, err)
	}
	closed := make(chan struct{})
	go func() {
		e.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a watch open over HTTP")
	}
	io.Copy(io.Discard, resp.Body)
}

// TestHTTPNoHTTP keeps the old answer when the bridge is off.
func TestHTTPNoHTTP(t *testing.T) {
	e := startHTTP(t, &rpc.ServerOptions{NoHTTP: true}, nil)
	resp, err := e.hc.Post("http://warren/Counter.List", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "warren protocol") {
		t.Fatalf("%s %s", resp.Status, b)
	}
}

// TestHTTPClientTCP reaches a tcp:// listener with HTTPClient, whatever the
// URL's host.
func TestHTTPClientTCP(t *testing.T) {
	srv := rpc.NewServer(nil)
	counter.New().Register(srv)
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://localhost/Counter.Set", "application/json", strings.NewReader(`{"name":"t","value":"7"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"name":"t","value":"7"}` {
		t.Fatalf("%s %s", resp.Status, b)
	}
}

// TestWebSocketOnBridge dials ws:// to a server listening on plain TCP: the
// HTTP bridge upgrades the request and serves a warren session over
// WebSocket, counted as one connection; a page of another origin is refused.
func TestWebSocketOnBridge(t *testing.T) {
	srv := rpc.NewServer(nil)
	counter.New().Register(srv)
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(l); close(done) }()
	defer func() { srv.Close(); <-done }()
	c, err := rpc.Dial("ws://"+l.Addr().String()+"/warren", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, c, "Counter.Set", &counter.SetRequest{Name: "w", Value: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		r, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "w"})
		if err != nil || r.Value != int64(i+2) {
			t.Fatalf("Inc %d: %v %v", i, r, err)
		}
	}
	if n := srv.Stats().Conns; n != 1 {
		t.Fatalf("server counts %d connections for one WebSocket connection", n)
	}
	// A browser page of another site cannot open a session.
	_, err = transport.Dial(ctx, "ws://"+l.Addr().String()+"/warren", &transport.DialConfig{
		WebSocketHeader: http.Header{"Origin": {"http://evil.example"}},
	})
	var he *transport.WebSocketHandshakeError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden {
		t.Fatalf("cross-origin upgrade: %v, want a 403 handshake error", err)
	}
}

// TestHTTPCurl drives the bridge with the real curl binary, as a user
// would.
func TestHTTPCurl(t *testing.T) {
	curl := curlPath(t)
	e := startHTTP(t, bridged(nil), nil)
	run := func(args ...string) (string, int) {
		t.Helper()
		args = append([]string{"-sS", "--unix-socket", e.path, "-w", "\n%{http_code}"}, args...)
		out, err := exec.Command(curl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		body, code, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		n, _ := strconv.Atoi(code)
		return body, n
	}
	body, code := run("http://warren/Counter.Get", "-d", `{"name":"a"}`)
	if code != 404 || !strings.Contains(body, `"code":"not_found"`) {
		t.Fatalf("Get of a missing counter: %d %s", code, body)
	}
	body, code = run("http://warren/Counter.Set", "-d", `{"name":"a","value":"1"}`)
	if code != 200 || body != `{"name":"a","value":"1"}` {
		t.Fatalf("Set: %d %s", code, body)
	}
	body, code = run("http://warren/Counter.Inc", "-d", `{"name":"a"}`)
	if code != 200 || body != `{"name":"a","value":"2"}` {
		t.Fatalf("Inc: %d %s", code, body)
	}
	body, code = run("--json", `{"name":"a","by":5}`, "http://warren/Counter/Inc")
	if code != 200 || body != `{"name":"a","value":"7"}` {
		t.Fatalf("Inc with --json: %d %s", code, body)
	}
	body, code = run("http://warren/")
	if code != 200 || !strings.Contains(body, `"name":"Counter.Watch","kind":"server_stream"`) {
		t.Fatalf("GET /: %d %s", code, body)
	}
	// Two calls on one connection (keep-alive).
	cmd := exec.Command(curl, "-sS", "-v", "--unix-socket", e.path, "http://warren/Counter.Get", "-d", `{"name":"a"}`,
		"--next", "--unix-socket", e.path, "http://warren/Counter.Get", "-d", `{"name":"a"}`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != `{"name":"a","value":"7"}{"name":"a","value":"7"}` || !strings.Contains(stderr.String(), "Re-using existing connection") {
		t.Fatalf("two calls: %v %q\n%s", err, out, stderr.String())
	}
	// A watch, ended by its timeout, with the request built by printf.
	cmd = exec.Command(curl, "-sS", "--unix-socket", e.path, "-H", "Content-Type: application/connect+json",
		"-H", "Connect-Timeout-Ms: 200", "--data-binary", "@-", "http://warren/Counter.Watch")
	cmd.Stdin = bytes.NewReader(envelope(0, `{"name":"a"}`))
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("curl watch: %v", err)
	}
	rd := bytes.NewReader(out)
	_, first, _ := readEnvelope(rd)
	flags, end, _ := readEnvelope(rd)
	if string(first) != `{"name":"a","value":"7"}` || flags != 2 || !strings.Contains(string(end), "deadline_exceeded") {
		t.Fatalf("watch: %q", out)
	}
}

// curlPath returns the curl binary, skipping the test without one (failing
// it when WARREN_REQUIRE_TOOLS is set).
func curlPath(t *testing.T) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatal("curl is required (WARREN_REQUIRE_TOOLS is set) but not installed")
		}
		t.Skip("curl is not installed")
	}
	return curl
}

func wireSettings(maxMessage uint32) wire.Settings { return wire.Settings{MaxMessageSize: maxMessage} }

// quietLogger keeps refusals and panics out of the test output.
func quietLogger(b *strings.Builder) *slog.Logger {
	var mu sync.Mutex
	return slog.New(slog.NewTextHandler(lockedBuilder{&mu, b}, nil))
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// slowWrites delays every write of the connections it accepts, before or
// after the bytes are written.
type slowWrites struct {
	net.Listener
	before, after time.Duration
}

func (l slowWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowConn{c, l.before, l.after}, nil
}

type slowConn struct {
	net.Conn
	before, after time.Duration
}

func (c slowConn) Write(b []byte) (int, error) {
	time.Sleep(c.before)
	n, err := c.Conn.Write(b)
	time.Sleep(c.after)
	return n, err
}

// serveSlowHTTP serves srv on a tcp listener whose connections write
// slowly, until the test ends, and returns its address.
func serveSlowHTTP(t *testing.T, srv *rpc.Server, before, after time.Duration) string {
	t.Helper()
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(slowWrites{l, before, after}) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	return addr
}

// TestHTTPLimitsNeverRefuseWithinLimit makes HTTP calls one at a time,
// alternating between two connections, on a server that takes one call at
// a time, and whose connections go on for a while after writing each
// reply. The call stops counting before its reply leaves, so the next
// call, on the other connection, is never refused; unary and streaming.
func TestHTTPLimitsNeverRefuseWithinLimit(t *testing.T) {
	srv := rpc.NewServer(bridged(&rpc.ServerOptions{MaxCalls: 1, CallRate: -1}))
	rpc.Handle(srv, "T.Nop", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) { return req, nil })
	rpc.HandleServerStream(srv, "T.One", func(ctx context.Context, req *rpc.Empty, st *rpc.Stream[rpc.Empty, rpc.Empty]) error {
		return st.Send(req)
	})
	addr := serveSlowHTTP(t, srv, 0, 30*time.Millisecond)
	clients := []*http.Client{rpc.HTTPClient(addr, nil), rpc.HTTPClient(addr, nil)}
	for _, hc := range clients {
		defer hc.CloseIdleConnections()
	}
	for i := range 8 {
		stream := i%4 >= 2
		ctype, body := "application/json", []byte(`{}`)
		path := "/T.Nop"
		if stream {
			ctype, body, path = "application/connect+json", envelope(0, `{}`), "/T.One"
		}
		resp, err := clients[i%2].Post("http://warren"+path, ctype, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		// A refused stream comes as 200 with the error in its end-stream
		// message.
		if resp.StatusCode != 200 || !stream && string(b) != `{}` || stream && bytes.Contains(b, []byte(`"error"`)) {
			t.Fatalf("call %d (stream %v): %s %q", i, stream, resp.Status, b)
		}
	}
	if st := srv.Stats(); st.Refused != 0 {
		t.Errorf("stats: %+v", st)
	}
}

// TestHTTPShutdownWaitsForReply: Shutdown waits for a reply that is still
// being written after its call stopped counting.
func TestHTTPShutdownWaitsForReply(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	srv := rpc.NewServer(nil)
	rpc.Handle(srv, "Slow.Wait", func(ctx context.Context, req *rpc.Empty) (*rpc.Empty, error) {
		close(entered)
		<-release
		return req, nil
	})
	addr := serveSlowHTTP(t, srv, 50*time.Millisecond, 0)
	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	type result struct {
		status int
		body   string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := hc.Post("http://warren/Slow.Wait", "application/json", strings.NewReader(`{}`))
		if err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), err}
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	time.Sleep(10 * time.Millisecond) // Shutdown is waiting for the call
	close(release)
	if r := <-done; r.err != nil || r.status != 200 || r.body != `{}` {
		t.Fatalf("reply: %d %q %v", r.status, r.body, r.err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// wantRefusedHTTP checks that a refused peer's HTTP requests are answered
// in their protocol: HTTP/1.1 and Connect over HTTP/2 with httpStatus and
// Connect's JSON error code, gRPC over HTTP/2 with grpc-status code, each
// with the reason; the connection then closes.
func wantRefusedHTTP(t *testing.T, path, reason string, httpStatus int, code string, grpcCode status.Code) {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("POST /Counter.Set HTTP/1.1\r\nHost: warren\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open after 5 s; read %q", got)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("refused HTTP/1.1 request answered %q: %v", got, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != httpStatus || !strings.Contains(string(body), `"code":"`+code+`"`) || !strings.Contains(string(body), reason) {
		t.Fatalf("refused HTTP/1.1 request answered %d %s, want %d %s naming %q", resp.StatusCode, body, httpStatus, code, reason)
	}

	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{
		Protocols: protocols,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "http://warren/Counter.Set", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatalf("refused Connect request over HTTP/2: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != httpStatus || !strings.Contains(string(body), `"code":"`+code+`"`) || !strings.Contains(string(body), reason) {
		t.Fatalf("refused Connect request over HTTP/2 answered %s %d %s, want %d %s naming %q", resp.Proto, resp.StatusCode, body, httpStatus, code, reason)
	}
	req, _ = http.NewRequest("POST", "http://warren/Counter/Set", bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatalf("refused gRPC request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != strconv.Itoa(int(grpcCode)) || !strings.Contains(resp.Header.Get("Grpc-Message"), strings.ReplaceAll(reason, " ", "%20")) && !strings.Contains(resp.Header.Get("Grpc-Message"), reason) {
		t.Fatalf("refused gRPC request answered %d %v, want grpc-status %d naming %q", resp.StatusCode, resp.Header, grpcCode, reason)
	}
}

package rpc_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

const testToken = "s3cret-token-for-tests-only-0123456789"

// startAuth serves the counter service with TokenAuth on addr (tcp or
// unix) until the test ends, and returns the bound address.
func startAuth(t *testing.T, addr string, auth *rpc.TokenAuth, page http.Handler) string {
	t.Helper()
	return startAuthOpts(t, addr, &rpc.ServerOptions{Auth: auth, Page: page})
}

// startAuthOpts is startAuth with the server's options.
func startAuthOpts(t *testing.T, addr string, opts *rpc.ServerOptions) string {
	t.Helper()
	var b strings.Builder
	opts.Logger = quietLogger(&b)
	srv := rpc.NewServer(opts)
	counter.New().Register(srv)
	return serveOn(t, srv, addr)
}

func dialToken(t *testing.T, addr, token string) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(addr, &rpc.ClientOptions{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func setCounter(c *rpc.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, c, "Counter.Set", &counter.SetRequest{Name: "a", Value: 1})
	return err
}

func TestTokenAuthCalls(t *testing.T) {
	addr := startAuth(t, "tcp://127.0.0.1:0", &rpc.TokenAuth{Token: testToken}, nil)
	if err := setCounter(dialToken(t, addr, "")); status.CodeOf(err) != status.Unauthenticated {
		t.Fatalf("without a token: %v, want unauthenticated", err)
	}
	if err := setCounter(dialToken(t, addr, "wrong")); status.CodeOf(err) != status.Unauthenticated {
		t.Fatalf("with a wrong token: %v, want unauthenticated", err)
	}
	c := dialToken(t, addr, testToken)
	if err := setCounter(c); err != nil {
		t.Fatalf("with the token: %v", err)
	}
	// Streams are checked too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := rpc.NewStream[counter.WatchRequest, counter.Entry](ctx, dialToken(t, addr, ""), "Counter.Watch")
	if err == nil {
		s.Send(&counter.WatchRequest{Name: "a"})
		s.CloseSend()
		_, err = s.Recv()
	}
	if status.CodeOf(err) != status.Unauthenticated {
		t.Fatalf("a stream without a token: %v, want unauthenticated", err)
	}
}

// TestTokenBeforeMethod checks that a caller without the token gets 16
// whether or not the method exists, on both engines: the method table is
// not visible without the token.
func TestTokenBeforeMethod(t *testing.T) {
	for _, loop := range []bool{false, true} {
		addr := startAuthOpts(t, "tcp://127.0.0.1:0", &rpc.ServerOptions{Auth: &rpc.TokenAuth{Token: testToken}, EventLoop: loop})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, token := range []string{"", "wrong"} {
			for _, method := range []string{"Counter.Set", "Nope.Nope"} {
				_, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, dialToken(t, addr, token), method, &counter.SetRequest{Name: "a"})
				if status.CodeOf(err) != status.Unauthenticated {
					t.Errorf("event loop %v, token %q, %s: %v, want unauthenticated", loop, token, method, err)
				}
			}
		}
		_, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, dialToken(t, addr, testToken), "Nope.Nope", &counter.SetRequest{})
		if status.CodeOf(err) != status.Unimplemented {
			t.Errorf("event loop %v, with the token, an unknown method: %v, want unimplemented", loop, err)
		}
	}
}

func TestTokenAuthUnixPeers(t *testing.T) {
	dir := t.TempDir()
	exempt := startAuth(t, "unix://"+filepath.Join(dir, "a.sock"), &rpc.TokenAuth{Token: testToken}, nil)
	if err := setCounter(dialToken(t, exempt, "")); err != nil {
		t.Fatalf("a unix peer is exempt by default: %v", err)
	}
	strict := startAuth(t, "unix://"+filepath.Join(dir, "b.sock"), &rpc.TokenAuth{Token: testToken, Unix: true}, nil)
	if err := setCounter(dialToken(t, strict, "")); status.CodeOf(err) != status.Unauthenticated {
		t.Fatalf("Unix: true without a token: %v, want unauthenticated", err)
	}
	if err := setCounter(dialToken(t, strict, testToken)); err != nil {
		t.Fatalf("Unix: true with the token: %v", err)
	}
}

type testPage struct{}

func (testPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "<p>page "+r.URL.Path)
}

func TestTokenAuthHTTP(t *testing.T) {
	addr := startAuth(t, "tcp://127.0.0.1:0", &rpc.TokenAuth{Token: testToken}, testPage{})
	host := strings.TrimPrefix(addr, "tcp://")
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	get := func(method, path string, header ...string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+host+path, strings.NewReader(`{"name":"a","value":2}`))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	_, port, _ := net.SplitHostPort(host)
	cookie := "warren-token-" + port + "=" + testToken
	for _, tc := range []struct {
		name, method, path string
		header             []string
		status             int
		body               string
	}{
		{"no token: method list", "GET", "/", nil, 401, "unauthenticated"},
		{"no token: browser", "GET", "/", []string{"Accept", "text/html"}, 401, "Token required"},
		{"no token: call", "POST", "/Counter.Set", nil, 401, "unauthenticated"},
		{"wrong bearer", "POST", "/Counter.Set", []string{"Authorization", "Bearer nope"}, 401, "unauthenticated"},
		{"bearer: call", "POST", "/Counter.Set", []string{"Authorization", "Bearer " + testToken}, 200, `"value":"2"`},
		{"bearer: method list as JSON", "GET", "/", []string{"Authorization", "Bearer " + testToken}, 200, `"methods"`},
		{"cookie: page for browsers", "GET", "/", []string{"Accept", "text/html", "Cookie", cookie}, 200, "<p>page /"},
		{"cookie: other paths go to the page handler", "GET", "/app.js", []string{"Cookie", cookie}, 200, "<p>page /app.js"},
		{"cookie of another port", "GET", "/", []string{"Cookie", "warren-token-1=" + testToken}, 401, "unauthenticated"},
		{"query token: moved to a cookie", "GET", "/?token=" + testToken, []string{"Accept", "text/html"}, 303, ""},
		{"query token: data request served", "GET", "/?token=" + testToken, nil, 200, `"methods"`},
		{"wrong query token", "GET", "/?token=x", []string{"Accept", "text/html"}, 401, "Token required"},
	} {
		st, h, body := get(tc.method, tc.path, tc.header...)
		if st != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.name, st, body, tc.status, tc.body)
		}
		if st == 401 && h.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
		if st == 303 && (h.Get("Location") != "/" || !strings.Contains(h.Get("Set-Cookie"), cookie) ||
			!strings.Contains(h.Get("Set-Cookie"), "HttpOnly") || strings.Contains(h.Get("Set-Cookie"), "Secure")) {
			t.Errorf("%s: Location %q, Set-Cookie %q", tc.name, h.Get("Location"), h.Get("Set-Cookie"))
		}
	}
}

// TestTokenRefusedCurl checks, with curl, that a request without the token
// is answered in its protocol after its body is read: over HTTP/2 curl
// gets the answer, not a reset of the stream it is still sending.
func TestTokenRefusedCurl(t *testing.T) {
	curl := curlPath(t)
	host := strings.TrimPrefix(startAuth(t, "tcp://127.0.0.1:0", &rpc.TokenAuth{Token: testToken}, nil), "tcp://")
	body := string(append([]byte{0, 0, 0, 0, 3}, 0x0a, 1, 'a')) // a gRPC message: SetRequest{name: "a"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"grpc/h2c", []string{"--http2-prior-knowledge", "-H", "Content-Type: application/grpc", "-H", "TE: trailers"},
			[]string{"HTTP/2 200", "grpc-status: 16", "grpc-message: this server requires a token"}},
		{"grpc-web/http1", []string{"-H", "Content-Type: application/grpc-web+proto"},
			[]string{"HTTP/1.1 200", "Grpc-Status: 16", "Grpc-Message: this server requires a token"}},
		{"connect-stream/h2c", []string{"--http2-prior-knowledge", "-H", "Content-Type: application/connect+proto"},
			[]string{"HTTP/2 200", `"code":"unauthenticated","message":"this server requires a token`}},
		{"connect-unary/h2c", []string{"--http2-prior-knowledge", "-H", "Content-Type: application/proto"},
			[]string{"HTTP/2 401", `"code":"unauthenticated"`}},
	} {
		for i := range 10 {
			args := append([]string{"-sS", "-i", "--data-binary", "@-"}, tc.args...)
			cmd := exec.Command(curl, append(args, "http://"+host+"/warren.counter.v1.Counter/Set")...)
			cmd.Stdin = strings.NewReader(body)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s, try %d: %v\n%s", tc.name, i, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("%s: %q, want %q", tc.name, out, w)
				}
			}
		}
	}
}

// TestTokenCookieSecureOverTLS: over TLS the token cookie is Secure too.
func TestTokenCookieSecureOverTLS(t *testing.T) {
	srvConf, cliConf := testutil.TLSConfigs(t)
	l, err := transport.Listen("tls://127.0.0.1:0", &transport.ListenConfig{TLS: srvConf})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	srv := rpc.NewServer(&rpc.ServerOptions{Auth: &rpc.TokenAuth{Token: testToken}, Page: testPage{}, Logger: quietLogger(&b)})
	go srv.Serve(l)
	defer srv.Close()
	tr := &http.Transport{TLSClientConfig: cliConf}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "https://"+l.Addr().String()+"/?token="+testToken, nil)
	req.Header.Set("Accept", "text/html")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Header.Get("Set-Cookie"); resp.StatusCode != 303 || !strings.Contains(c, "HttpOnly") || !strings.Contains(c, "Secure") {
		t.Fatalf("%d, Set-Cookie %q: want 303 with an HttpOnly, Secure cookie", resp.StatusCode, c)
	}
}

// upgrade sends a WebSocket opening handshake and returns the status line
// and the selected subprotocol.
func upgrade(t *testing.T, host string, header ...string) (string, string) {
	t.Helper()
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	io.WriteString(c, req+"\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Status, resp.Header.Get("Sec-WebSocket-Protocol")
}

func TestTokenAuthWebSocket(t *testing.T) {
	addr := startAuth(t, "tcp://127.0.0.1:0", &rpc.TokenAuth{Token: testToken}, nil)
	host := strings.TrimPrefix(addr, "tcp://")
	if st, _ := upgrade(t, host); !strings.HasPrefix(st, "401") {
		t.Errorf("no token: %s, want 401", st)
	}
	if st, _ := upgrade(t, host, "Sec-WebSocket-Protocol", "warren, "+"warren.bearer."+"wrong"); !strings.HasPrefix(st, "401") {
		t.Errorf("wrong token: %s, want 401", st)
	}
	st, proto := upgrade(t, host, "Sec-WebSocket-Protocol", "warren, "+"warren.bearer."+testToken)
	if !strings.HasPrefix(st, "101") || proto != "warren" {
		t.Errorf("token in the subprotocol: %s, protocol %q; want 101 and warren", st, proto)
	}
	if st, _ := upgrade(t, host, "Authorization", "Bearer "+testToken); !strings.HasPrefix(st, "101") {
		t.Errorf("bearer header: %s, want 101", st)
	}
	// Calls on a session whose upgrade carried the token, here as the
	// page's cookie (HttpOnly: the page cannot copy it into metadata),
	// need no token of their own.
	_, port, _ := net.SplitHostPort(host)
	c, err := rpc.Dial("ws://"+host+"/", &rpc.ClientOptions{Dial: &transport.DialConfig{
		WebSocketHeader: http.Header{"Cookie": {"warren-token-" + port + "=" + testToken}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := setCounter(c); err != nil {
		t.Errorf("a call on a session opened with the cookie: %v", err)
	}
	// The origin check stays: the right token from a page of another origin is refused.
	if st, _ := upgrade(t, host, "Sec-WebSocket-Protocol", "warren, "+"warren.bearer."+testToken, "Origin", "http://evil.example"); !strings.HasPrefix(st, "403") {
		t.Errorf("another origin: %s, want 403", st)
	}
}

// TestWrongTransport: a tcp:// client dialing a ws:// or a tls:// listener
// is told at once what the address speaks and how to dial it (goroutine
// mode: the event loop reads a ws:// listener's opening handshake itself).
func TestWrongTransport(t *testing.T) {
	srvConf, _ := testutil.TLSConfigs(t)
	for _, tc := range []struct {
		addr string
		conf *transport.ListenConfig
		want string
		loop bool
	}{
		{"ws://127.0.0.1:0/warren", nil, "this address speaks WebSocket: dial ws://127.0.0.1:", false},
		{"tls://127.0.0.1:0", &transport.ListenConfig{TLS: srvConf}, "this address speaks TLS: dial tls://127.0.0.1:", false},
	} {
		l, err := transport.Listen(tc.addr, tc.conf)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		srv := rpc.NewServer(&rpc.ServerOptions{Logger: quietLogger(&b), EventLoop: tc.loop})
		go srv.Serve(l)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		start := time.Now()
		c, err := rpc.Dial("tcp://127.0.0.1:"+port, nil)
		if err == nil {
			err = setCounter(c)
			c.Close()
		}
		if took := time.Since(start); err == nil || !strings.Contains(err.Error(), tc.want) || took > time.Second {
			t.Errorf("tcp:// to %s (event loop %v): after %v: %v, want %q within 1 s", tc.addr, tc.loop, took, err, tc.want)
		}
		srv.Close()
	}
}

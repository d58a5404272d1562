package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/console"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

type msg struct {
	N   int    `json:"n"`
	Pad string `json:"pad,omitempty"`
}

// serve starts a server with the console on addr and returns an HTTP
// client for it and the address it listens on.
func serve(t *testing.T, addr string, opts rpc.ServerOptions) (*http.Client, string, *rpc.Server) {
	t.Helper()
	opts.Console = true
	opts.Logger = slog.New(slog.DiscardHandler)
	srv := rpc.NewServer(&opts)
	rpc.HandleServerStream(srv, "Test.Count", func(ctx context.Context, r *msg, st *rpc.Stream[msg, msg]) error {
		for i := range r.N {
			if err := st.Send(&msg{N: i}); err != nil {
				return err
			}
		}
		if r.N == -3 { // the call's metadata
			return st.Send(&msg{Pad: rpc.IncomingMetadata(ctx).Get("x-demo")})
		}
		if r.N == -2 { // large messages as fast as the page takes them
			big := msg{Pad: strings.Repeat("x", 64<<10)}
			for {
				if err := st.Send(&big); err != nil {
					return err
				}
			}
		}
		if r.N < 0 { // follow until the page goes away
			<-ctx.Done()
			return ctx.Err()
		}
		return status.Errorf(status.OutOfRange, "counted to %d", r.N)
	})
	rpc.Handle(srv, "Test.Echo", func(ctx context.Context, r *msg) (*msg, error) { return r, nil })
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Close()
	})
	ep := l.Endpoint().String()
	hc := rpc.HTTPClient(ep, nil)
	t.Cleanup(hc.CloseIdleConnections)
	return hc, ep, srv
}

func get(t *testing.T, hc *http.Client, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://warren"+path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func unixAddr(t *testing.T) string { return "unix://" + filepath.Join(t.TempDir(), "s.sock") }

func TestConsoleFiles(t *testing.T) {
	hc, _, _ := serve(t, unixAddr(t), rpc.ServerOptions{})
	resp, body := get(t, hc, "/console/", "Accept", "text/html")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `<script type="module" src="console.js">`) {
		t.Fatalf("GET /console/: %d %q\n%.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "default-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for path, want := range map[string]int{"/console/console.js": 200, "/console/console.css": 200, "/console/index.html": 200, "/console/nope": 404} {
		if resp, _ := get(t, hc, path); resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if resp, _ := get(t, hc, "/console"); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The console counts as ServerOptions.Metrics does, but serves no
	// /metrics without it.
	if resp, body := get(t, hc, "/metrics"); resp.StatusCode == 200 || strings.Contains(body, "# TYPE") {
		t.Errorf("GET /metrics with the console and without Metrics: %d %.100s", resp.StatusCode, body)
	}
	// Other methods are still served.
	resp, body = get(t, hc, "/")
	if resp.StatusCode != 200 || !strings.Contains(body, `"Test.Count"`) {
		t.Errorf("GET /: %d %.200s", resp.StatusCode, body)
	}
}

func TestConsoleOff(t *testing.T) {
	srv := rpc.NewServer(&rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	l, err := transport.Listen(unixAddr(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	hc := rpc.HTTPClient(l.Endpoint().String(), nil)
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/console/", "/console/figures"} {
		if resp, body := get(t, hc, path, "Accept", "text/html"); resp.StatusCode == 200 || strings.Contains(body, "console") && strings.Contains(body, "<html") {
			t.Errorf("GET %s without ServerOptions.Console: %d %.100s", path, resp.StatusCode, body)
		}
	}
}

// TestConsoleToken: on TCP with a token, the console is behind it as every
// request is; the token in the URL moves into an HttpOnly, SameSite=Strict
// cookie, which then serves the page and its requests.
func TestConsoleToken(t *testing.T) {
	const token = "console-token-0123456789abcdefghijklmn"
	hc, _, _ := serve(t, "tcp://127.0.0.1:0", rpc.ServerOptions{Auth: &rpc.TokenAuth{Token: token}})
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, path := range []string{"/console/", "/console/figures", "/console/console.js"} {
		if resp, _ := get(t, hc, path, "Accept", "text/html"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d", path, resp.StatusCode)
		}
	}
	resp, _ := get(t, hc, "/console/?token="+token, "Accept", "text/html")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /console/?token=: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		cookie = c
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict", cookie)
	}
	if resp, _ := get(t, hc, "/console/figures", "Cookie", cookie.Name+"="+cookie.Value); resp.StatusCode != 200 {
		t.Errorf("GET /console/figures with the cookie: %d", resp.StatusCode)
	}
	if resp, _ := get(t, hc, "/console/figures", "Authorization", "Bearer "+token); resp.StatusCode != 200 {
		t.Errorf("GET /console/figures with the bearer token: %d", resp.StatusCode)
	}
	resp = post(t, hc, "/console/stream?method=Test.Count", `{"n":1}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /console/stream without the token: %d", resp.StatusCode)
	}
	resp = post(t, hc, "/console/stream?method=Test.Count", `{"n":1}`, "Cookie", cookie.Name+"="+cookie.Value)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), `{"message":{"n":0}}`+"\n") {
		t.Errorf("POST /console/stream with the cookie: %d %s", resp.StatusCode, b)
	}
}

func post(t *testing.T, hc *http.Client, path, body string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://warren"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestConsoleStream(t *testing.T) {
	hc, _, srv := serve(t, unixAddr(t), rpc.ServerOptions{})
	resp := post(t, hc, "/console/stream?method=Test.Count", `{"n":3}`)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("POST /console/stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if len(got) != 4 || got[0] != `{"message":{"n":0}}` || got[2] != `{"message":{"n":2}}` ||
		!regexp.MustCompile(`^\{"code":"out_of_range","message":"counted to 3","ms":[0-9.]+\}$`).MatchString(got[3]) {
		t.Fatalf("stream lines:\n%s", strings.Join(got, "\n"))
	}

	// Headers are the call's metadata.
	resp = post(t, hc, "/console/stream?method=Test.Count", `{"n":-3}`, "X-Demo", "from the page")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), `{"message":{"n":0,"pad":"from the page"}}`) {
		t.Errorf("metadata: %s", b)
	}

	// Not a server stream, unknown: said so.
	for _, m := range []string{"Test.Echo", "Test.Nope", ""} {
		resp := post(t, hc, "/console/stream?method="+m, `{}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "server-streaming") {
			t.Errorf("stream of %q: %d %s", m, resp.StatusCode, b)
		}
	}
	// A bad request message is the handler's codec's error.
	resp = post(t, hc, "/console/stream?method=Test.Count", `{"n":"x"}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"code":"invalid_argument"`) {
		t.Errorf("bad request: %d %s", resp.StatusCode, b)
	}

	// The page going away ends the call.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://warren/console/stream?method=Test.Count", strings.NewReader(`{"n":-1}`))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if st := srv.Stats(); st.Calls != 1 {
		t.Errorf("calls in progress while followed: %d", st.Calls)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Calls != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := srv.Stats(); st.Calls != 0 {
		t.Errorf("calls in progress after the page left: %d", st.Calls)
	}
}

// TestConsoleStuckPage: a page that stops reading a stream without going
// away ends the call once a write has waited stuckWrite.
func TestConsoleStuckPage(t *testing.T) {
	defer console.SetStuckWrite(200 * time.Millisecond)()
	hc, _, srv := serve(t, unixAddr(t), rpc.ServerOptions{})
	resp := post(t, hc, "/console/stream?method=Test.Count", `{"n":-2}`)
	defer resp.Body.Close() // never read
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Calls != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := srv.Stats().Calls; n != 0 {
		t.Errorf("calls in progress 5 s after the page stopped reading: %d", n)
	}
}

// TestConsoleCrossOrigin: a page of another site cannot start a stream
// (or read the figures with the browser's cookie: SameSite=Strict and the
// same-origin policy); the request is refused before the call.
func TestConsoleCrossOrigin(t *testing.T) {
	hc, _, srv := serve(t, unixAddr(t), rpc.ServerOptions{})
	resp := post(t, hc, "/console/stream?method=Test.Count", `{"n":1}`, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST /console/stream: %d", resp.StatusCode)
	}
	if st := srv.Stats(); st.CallsTotal != 0 {
		t.Errorf("calls accepted: %d", st.CallsTotal)
	}
}

type row struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

type figures struct {
	Conns        int     `json:"conns"`
	Calls        uint64  `json:"calls"`
	CallsPerSec  float64 `json:"calls_per_sec"`
	ByTransport  []row   `json:"by_transport"`
	ByUID        []row   `json:"by_uid"`
	CallsRefused []row   `json:"calls_refused"`
	Methods      []struct {
		Name     string   `json:"name"`
		Calls    uint64   `json:"calls"`
		Errors   uint64   `json:"errors"`
		InFlight int64    `json:"in_flight"`
		PerSec   float64  `json:"per_sec"`
		P50MS    *float64 `json:"p50_ms"`
		P99MS    *float64 `json:"p99_ms"`
	} `json:"methods"`
}

// TestConsoleFigures runs on both engines: on the event loop the warren
// connection is the loop's, the console's HTTP one is handed to a
// goroutine.
func TestConsoleFigures(t *testing.T) {
	t.Run("goroutine", func(t *testing.T) { testConsoleFigures(t, false) })
	if runtime.GOOS == "linux" {
		t.Run("eventloop", func(t *testing.T) { testConsoleFigures(t, true) })
	}
}

func testConsoleFigures(t *testing.T, loop bool) {
	hc, addr, _ := serve(t, unixAddr(t), rpc.ServerOptions{MaxCallsPerConn: 1, EventLoop: loop})
	c, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get(t, hc, "/console/figures") // the first sample: rates are from it on
	for i := range 20 {
		if _, err := rpc.Call[msg, msg](context.Background(), c, "Test.Echo", &msg{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	// A call over MaxCallsPerConn (a stream holds the one slot) is refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := rpc.NewStream[msg, msg](ctx, c, "Test.Count")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&msg{N: -1}); err != nil {
		t.Fatal(err)
	}
	st.CloseSend()
	time.Sleep(50 * time.Millisecond)
	if _, err := rpc.Call[msg, msg](context.Background(), c, "Test.Echo", &msg{}); status.CodeOf(err) != status.ResourceExhausted {
		t.Fatalf("a call over MaxCallsPerConn: %v", err)
	}
	var f figures
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := get(t, hc, "/console/figures")
		if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("GET /console/figures: %d %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			t.Fatal(err, body)
		}
		if f.CallsPerSec > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if f.Calls < 20 || f.CallsPerSec <= 0 || f.Conns < 2 {
		t.Errorf("figures after 20 calls on one connection (and the console's own): %+v", f)
	}
	// The busiest first (the refused call counts under its method, as an
	// error); a method with a call in flight is listed.
	if len(f.Methods) != 2 || f.Methods[0].Name != "Test.Echo" || f.Methods[0].Calls != 21 || f.Methods[0].Errors != 1 || f.Methods[0].PerSec <= 0 ||
		f.Methods[0].P50MS == nil || f.Methods[0].P99MS == nil || *f.Methods[0].P99MS < *f.Methods[0].P50MS ||
		f.Methods[1].Name != "Test.Count" || f.Methods[1].InFlight != 1 {
		t.Errorf("methods: %+v", f.Methods)
	}
	uid := os.Getuid()
	if len(f.ByUID) != 1 || f.ByUID[0].Key != strconv.Itoa(uid) || f.ByUID[0].N != f.Conns {
		t.Errorf("by uid: %+v, want %d connections of uid %d", f.ByUID, f.Conns, uid)
	}
	want := []row{{"unix", 2}}
	if loop {
		want = []row{{"unix", 1}, {"unix (event loop)", 1}}
	}
	if !slices.Equal(f.ByTransport, want) {
		t.Errorf("by transport: %+v, want %+v", f.ByTransport, want)
	}
	if len(f.CallsRefused) != 1 || f.CallsRefused[0].N != 1 {
		t.Errorf("calls refused: %+v", f.CallsRefused)
	}
	cancel()
}

// TestScriptTextOnly: the page's script never parses what it is given as
// HTML, and the page runs no inline script (the CSP forbids it too).
func TestScriptTextOnly(t *testing.T) {
	js, err := os.ReadFile("assets/console.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "srcdoc", "createContextualFragment", "DOMParser", "setHTML"} {
		if strings.Contains(string(js), bad) {
			t.Errorf("console.js uses %s", bad)
		}
	}
	page, err := os.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(page), "<script"); n != 1 || !strings.Contains(string(page), `<script type="module" src="console.js"></script>`) {
		t.Errorf("index.html has %d script elements: want only console.js", n)
	}
	if regexp.MustCompile(`\son[a-z]+=`).Match(page) {
		t.Error("index.html has an inline event handler")
	}
}

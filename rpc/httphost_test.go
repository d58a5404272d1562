package rpc_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// TestHTTPHostAllowList: on a loopback TCP listener, a request whose Host
// names another site (DNS rebinding: evil.example resolving to 127.0.0.1)
// is refused with 403, for calls and WebSocket upgrades alike; localhost,
// IP literals and ServerOptions.AllowedHosts pass.
func TestHTTPHostAllowList(t *testing.T) {
	var logs strings.Builder
	srv := rpc.NewServer(&rpc.ServerOptions{AllowedHosts: []string{"app.test"}, Logger: quietLogger(&logs)})
	counter.New().Register(srv)
	l, err := transport.Listen("tcp://127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	port := l.Endpoint().Address[strings.LastIndexByte(l.Endpoint().Address, ':'):]
	post := func(host string, header ...string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+l.Endpoint().Address+"/Counter.Set", strings.NewReader(`{"name":"a","value":1}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"evil.example" + port:    403,
		"evil.example":           403,
		"localhost" + port:       200,
		"app.localhost" + port:   200,
		"127.0.0.1" + port:       200,
		"[::1]" + port:           200,
		"app.test" + port:        200,
		"APP.TEST.":              200,
		"localhost.evil.example": 403,
	} {
		if got := post(host); got != want {
			t.Errorf("Host %q: HTTP %d, want %d", host, got, want)
		}
	}
	// A WebSocket upgrade from a rebound page: its Origin matches its Host,
	// so only the Host check stops it.
	req, _ := http.NewRequest("GET", "http://"+l.Endpoint().Address+"/", nil)
	req.Host = "evil.example" + port
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example" + port} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("WebSocket upgrade with Host evil.example: HTTP %d, want 403", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

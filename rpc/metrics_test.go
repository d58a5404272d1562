package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// scrape GETs /metrics through addr with token (empty: none) and returns
// the status and body.
func scrape(t *testing.T, addr, token string) (int, string) {
	t.Helper()
	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://localhost/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metricValue returns the value of the sample line that starts with series
// (name and labels exactly as written), or -1.
func metricValue(body, series string) float64 {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestMetrics: with ServerOptions.Metrics, every listener answers GET
// /metrics under the token rules, and the series count the calls of every
// protocol, by method and code, the connections and the refusals.
func TestMetrics(t *testing.T) {
	for _, loop := range []bool{false, true} {
		t.Run(fmt.Sprintf("eventloop=%v", loop), func(t *testing.T) {
			srv := rpc.NewServer(&rpc.ServerOptions{Metrics: true, EventLoop: loop, Auth: &rpc.TokenAuth{Token: testToken}, Logger: quietLogger(new(strings.Builder))})
			rpc.HandleRaw(srv, "Echo.Raw", func(_ context.Context, req []byte) ([]byte, error) {
				if string(req) == "fail" {
					return nil, status.New(status.NotFound, "no")
				}
				return req, nil
			})
			rpc.HandleRaw(srv, "Echo.Closed", func(_ context.Context, req []byte) ([]byte, error) { return req, nil },
				rpc.WithPolicy(peer.PolicyFunc(func(*peer.Peer) error { return errors.New("closed") })))
			unix := "unix://" + filepath.Join(t.TempDir(), "m.sock")
			tcp := serveOn(t, srv, "tcp://127.0.0.1:0")
			serveOn(t, srv, unix)

			const n = 25
			c := dialToken(t, unix, "")
			ctx := context.Background()
			for range n {
				var out []byte
				if err := c.Invoke(ctx, "Echo.Raw", []byte("0123456789"), &out); err != nil {
					t.Fatal(err)
				}
			}
			var out []byte
			if err := c.Invoke(ctx, "Echo.Raw", []byte("fail"), &out); status.CodeOf(err) != status.NotFound {
				t.Fatalf("fail: %v", err)
			}
			if err := c.Invoke(ctx, "Echo.Nope", []byte("x"), &out); status.CodeOf(err) != status.Unimplemented {
				t.Fatalf("unknown method: %v", err)
			}
			if err := c.Invoke(ctx, "Echo.Closed", []byte("x"), &out); status.CodeOf(err) != status.PermissionDenied {
				t.Fatalf("method's policy: %v", err)
			}
			// Over HTTP on tcp: the token is needed for the page as for calls.
			if code, _ := scrape(t, tcp, ""); code != http.StatusUnauthorized {
				t.Fatalf("scrape without the token: %d", code)
			}
			code, body := scrape(t, tcp, testToken)
			if code != http.StatusOK {
				t.Fatalf("scrape: %d %s", code, body)
			}
			engine := "goroutine"
			if loop {
				engine = "eventloop"
			}
			for series, want := range map[string]float64{
				`warren_server_calls_total{method="Echo.Raw",code="ok"}`:                   n,
				`warren_server_calls_total{method="Echo.Raw",code="not_found"}`:            1,
				`warren_server_call_duration_seconds_count{method="Echo.Raw"}`:             n + 1,
				`warren_server_received_message_bytes_total{method="Echo.Raw"}`:            10*n + 4,
				`warren_server_sent_message_bytes_total{method="Echo.Raw"}`:                10 * n,
				`warren_server_calls_in_flight{method="Echo.Raw"}`:                         0,
				`warren_server_calls_refused_total{reason="unknown_method"}`:               1,
				`warren_server_calls_refused_total{reason="token"}`:                        1,
				`warren_server_calls_refused_total{reason="method_policy"}`:                1,
				`warren_server_calls_total{method="Echo.Closed",code="permission_denied"}`: 1,
				`warren_server_call_duration_seconds_count{method="Echo.Closed"}`:          0,
				`warren_server_connections{transport="unix",engine="` + engine + `"}`:      1,
				`warren_server_calls_total{method="Warren.Methods",code="ok"}`:             0,
				`warren_server_connections_refused_total{reason="max_conns_per_uid"}`:      0,
				`warren_server_connections_shed_total{reason="idle"}`:                      0,
				`warren_server_files_in_flight`:                                            0,
			} {
				if got := metricValue(body, series); got != want {
					t.Errorf("%s = %v, want %v", series, got, want)
				}
			}
			if metricValue(body, `warren_server_connections{transport="tcp",engine="goroutine"}`) < 1 { // HTTP: goroutines
				t.Error("the scrape's own connection is not counted")
			}
			if strings.Contains(body, "Echo.Nope") {
				t.Error("an unknown method made a series")
			}
			// On the unix socket no token is needed (TokenAuth exempts it).
			if code, body := scrape(t, unix, ""); code != http.StatusOK || metricValue(body, `warren_server_calls_total{method="Echo.Raw",code="ok"}`) != n {
				t.Fatalf("unix scrape: %d", code)
			}
		})
	}
}

// TestMetricsOff: without the option, /metrics is not served.
func TestMetricsOff(t *testing.T) {
	srv := rpc.NewServer(&rpc.ServerOptions{Logger: quietLogger(new(strings.Builder))})
	addr := serveOn(t, srv, "unix://"+filepath.Join(t.TempDir(), "m.sock"))
	if code, body := scrape(t, addr, ""); code == http.StatusOK || strings.Contains(body, "warren_server") {
		t.Fatalf("metrics served without the option: %d %q", code, body)
	}
}

// TestMetricsAllocs: metrics on add at most one allocation per call
// (client and server together).
func TestMetricsAllocs(t *testing.T) {
	allocs := func(on bool) float64 {
		srv := rpc.NewServer(&rpc.ServerOptions{Metrics: on, CallRate: -1, Logger: quietLogger(new(strings.Builder))})
		rpc.HandleRaw(srv, "Bench.Echo", func(_ context.Context, req []byte) ([]byte, error) { return req, nil })
		addr := serveOn(t, srv, "unix://"+filepath.Join(t.TempDir(), fmt.Sprint(on, ".sock")))
		c := dialToken(t, addr, "")
		req, out := make([]byte, 1024), []byte(nil)
		ctx := context.Background()
		return testing.AllocsPerRun(2000, func() {
			if err := c.Invoke(ctx, "Bench.Echo", &req, &out); err != nil {
				t.Fatal(err)
			}
		})
	}
	off, on := allocs(false), allocs(true)
	t.Logf("allocs per call: %.2f off, %.2f on", off, on)
	if on > off+1 {
		t.Fatalf("metrics cost %.2f allocations per call", on-off)
	}
}

// serveOn serves srv on addr until the test ends and returns the bound
// address.
func serveOn(t *testing.T, srv *rpc.Server, addr string) string {
	t.Helper()
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, rpc.ErrServerClosed) {
			t.Errorf("Serve = %v", err)
		}
	})
	if strings.HasPrefix(addr, "unix:") {
		return addr
	}
	return "tcp://" + l.Addr().String()
}

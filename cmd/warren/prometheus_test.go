package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

// TestPrometheus: Debian's prometheus scrapes `warren serve --metrics` (a
// tcp address, with the token as its authorization credentials) and, once
// the test has made n calls, its query API returns n for that method. The
// test is skipped when prometheus is absent, except in CI (CI=true, or
// WARREN_REQUIRE_TOOLS), where it fails.
func TestPrometheus(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" || os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatalf("prometheus is required in CI: %v", err)
		}
		t.Skip("prometheus not installed (apt-get install prometheus)")
	}
	const token = "prometheus-test-token-0123456789abcdef"
	dir := shortTempDir(t)
	addr := "unix://" + filepath.Join(dir, "w.sock")
	s := startServe(t, nil, "--addr", addr, "--metrics", "tcp://127.0.0.1:0", "--token", token)
	l := s.line()
	target, ok := strings.CutPrefix(l, "metrics on tcp://")
	if !ok {
		t.Fatalf("serve printed %q, want \"metrics on ADDR ...\"; stderr:\n%s", l, s.stderr)
	}
	target, _, _ = strings.Cut(target, " ")

	web := freeTCPAddr(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: warren
    authorization:
      credentials: %s
    static_configs:
      - targets: ['%s']
`, token, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var promOut syncBuffer
	cmd := exec.Command(prom, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &promOut, &promOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})

	c, err := rpc.Dial(addr, &rpc.ClientOptions{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := rpc.Call[counter.SetRequest, counter.Entry](ctx, c, "Counter.Set", &counter.SetRequest{Name: "p", Value: 0}); err != nil {
		t.Fatal(err)
	}
	const n = 37
	for range n {
		if _, err := rpc.Call[counter.IncRequest, counter.Entry](ctx, c, "Counter.Inc", &counter.IncRequest{Name: "p"}); err != nil {
			t.Fatal(err)
		}
	}

	query := `sum(warren_server_calls_total{job="warren",method="Counter.Inc",code="ok"})`
	var last string
	for ctx.Err() == nil {
		v, err := promQuery(ctx, web, query)
		if err == nil && v == fmt.Sprint(n) {
			t.Logf("prometheus: %s = %s", query, v)
			for q, want := range map[string]string{
				`up{job="warren"}`: "1",
				`warren_server_call_duration_seconds_count{method="Counter.Inc"}`:          fmt.Sprint(n),
				`warren_server_call_duration_seconds_bucket{method="Counter.Inc",le="10"}`: fmt.Sprint(n),
			} {
				if v, err := promQuery(ctx, web, q); err != nil || v != want {
					t.Errorf("%s = %q (%v), want %s", q, v, err, want)
				}
			}
			return
		}
		last = fmt.Sprintf("%q, %v", v, err)
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("prometheus never returned %d for %s: last %s\nprometheus:\n%s\nserve:\n%s", n, query, last, promOut.String(), s.stderr)
}

// promQuery runs an instant query against prometheus's HTTP API at web
// and returns the value of its one sample.
func promQuery(ctx context.Context, web, q string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+web+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	if r.Status != "success" {
		return "", fmt.Errorf("query: %s %s", r.Status, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return "", fmt.Errorf("%d samples", len(r.Data.Result))
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v, nil
}

// freeTCPAddr returns a loopback address with a port free now.
func freeTCPAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

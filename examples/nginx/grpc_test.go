package nginx_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/fleet"
	"github.com/warrenipc/warren/internal/grpcunary"
	"github.com/warrenipc/warren/rpc"
)

const grpcToken = "nginx-grpc-example-token-0123456"

// TestNginxGRPC runs grpc.conf in front of three `warren serve` processes:
// gRPC calls are spread per request, and a server stopped with SIGTERM
// leaves the rotation without a failed call. The servers' exit records add
// up to the calls that succeeded.
func TestNginxGRPC(t *testing.T) {
	nginx := fleet.RequireTool(t, "nginx")
	_, userLine := workerUser(t)
	bin := fleet.Build(t, "../../cmd/warren")
	var servers []*fleet.Server
	var addrs []string
	for range 3 {
		s := fleet.Start(t, nil, bin, "--addr", fmt.Sprintf("tcp://127.0.0.1:%d", fleet.FreePort(t)), "--token", grpcToken)
		servers = append(servers, s)
		addrs = append(addrs, s.HostPort())
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort(t))
	include := filepath.Join(dir, "grpc.conf")
	if err := os.WriteFile(include, []byte(fleet.NginxGRPCConfig(t, "grpc.conf", addrs, listen)), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nginx.conf")
	// One access log line per call: the servers nginx tried, in order.
	main := fleet.NginxMain(userLine, dir, tmp, include, `$status $upstream_addr`)
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")}
	if out, err := runOut(append([]string{nginx, "-t"}, args...)...); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	ng := fleet.StartProc(t, syscall.SIGQUIT, append([]string{nginx}, args...)...)
	ng.WaitDial(t, func() error {
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	errorLog := func() string { b, _ := os.ReadFile(filepath.Join(dir, "error.log")); return string(b) }

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range servers { // Inc does not create a counter
		c, err := rpc.Dial(s.Addr, &rpc.ClientOptions{Token: grpcToken})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := counter.NewCounterClient(c).Set(ctx, &counter.SetRequest{Name: "g"}); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	g := grpcunary.New(listen, http.Header{"Authorization": {"Bearer " + grpcToken}})
	defer g.Close()
	var ok int64
	inc := func(n int) {
		t.Helper()
		for range n {
			var e counter.Entry
			if err := g.Call(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "g"}, &e); err != nil {
				t.Fatalf("gRPC Inc through nginx: %v\n%s", err, errorLog())
			}
			ok++
		}
	}
	inc(30)
	first, err := servers[0].Stop()
	if err != nil {
		t.Fatal(err)
	}
	inc(30) // nginx finds w1 refusing connections and tries another
	applied := []fleet.Applied{first}
	for _, s := range servers[1:] {
		a, err := s.Stop()
		if err != nil {
			t.Fatal(err)
		}
		applied = append(applied, a)
	}
	fleet.CheckSum(t, applied, ok)
	// nginx retried on another server the calls it sent to w1 after w1
	// stopped: the access log lists both servers for those calls.
	b, _ := os.ReadFile(filepath.Join(dir, "access.log"))
	retried := strings.Count(string(b), ", ")
	t.Logf("nginx retried %d calls on another server", retried)
	if retried == 0 {
		t.Errorf("no call was retried: w1 was never tried after it stopped?\n%s", b)
	}
}

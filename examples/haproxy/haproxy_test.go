package haproxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/fleet"
	"github.com/warrenipc/warren/internal/grpcunary"
	"github.com/warrenipc/warren/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "haproxy-example-token-0123456789"

// TestHAProxy runs haproxy.cfg in front of three `warren serve` processes:
// gRPC calls are spread per request, warren connections per connection,
// and a server stopped with SIGTERM leaves the rotation without a failed
// call. Every server's exit record adds up to the calls that succeeded.
func TestHAProxy(t *testing.T) {
	haproxy := fleet.RequireTool(t, "haproxy")
	bin := fleet.Build(t, "../../cmd/warren")
	var servers [3]*fleet.Server
	var addrs []string
	for i := range servers {
		servers[i] = fleet.Start(t, nil, bin, "--addr", fmt.Sprintf("tcp://127.0.0.1:%d", fleet.FreePort(t)), "--token", token)
		addrs = append(addrs, servers[i].HostPort())
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort(t))
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort(t))
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(fleet.HAProxyConfig(t, "haproxy.cfg", addrs, grpcAddr, tcpAddr, token)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runOut(haproxy, "-c", "-f", cfg); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	hp := fleet.StartProc(t, syscall.SIGUSR1, haproxy, "-db", "-f", cfg) // SIGUSR1: soft stop
	hp.WaitDial(t, func() error { return dialOnce(grpcAddr) })
	hp.WaitDial(t, func() error { return dialOnce(tcpAddr) })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g := grpcunary.New(grpcAddr, http.Header{"Authorization": {"Bearer " + token}})
	defer g.Close()
	var ok int64
	grpcInc := func(n int) {
		t.Helper()
		for range n {
			var e counter.Entry
			if err := g.Call(ctx, "/warren.counter.v1.Counter/Inc", &counter.IncRequest{Name: "g"}, &e); err != nil {
				t.Fatalf("gRPC Inc through HAProxy: %v\n%s", err, hp.Output())
			}
			ok++
		}
	}
	// Each new warren client is a new connection, placed by leastconn.
	tcpInc := func(clients, calls int) {
		t.Helper()
		for range clients {
			c, err := rpc.Dial("tcp://"+tcpAddr, &rpc.ClientOptions{Token: token})
			if err != nil {
				t.Fatal(err)
			}
			for range calls {
				if _, err := counter.NewCounterClient(c).Inc(ctx, &counter.IncRequest{Name: "t"}); err != nil {
					c.Close()
					t.Fatalf("warren Inc through HAProxy: %v\n%s", err, hp.Output())
				}
				ok++
			}
			defer c.Close()
		}
	}
	// The counters exist on every server (Inc does not create one).
	for _, s := range servers {
		c, err := rpc.Dial(s.Addr, &rpc.ClientOptions{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"g", "t"} {
			if _, err := counter.NewCounterClient(c).Set(ctx, &counter.SetRequest{Name: name}); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
	}
	grpcInc(30)
	tcpInc(6, 5)

	// w1 drains and stops: HAProxy's check sees NOT_SERVING, or the
	// refused connection is redispatched; no call fails.
	first, err := servers[0].Stop()
	if err != nil {
		t.Fatal(err)
	}
	grpcInc(20)
	tcpInc(4, 5)

	var applied [3]fleet.Applied
	applied[0] = first
	for i := 1; i < 3; i++ {
		if applied[i], err = servers[i].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	fleet.CheckSum(t, applied[:], ok)
	if first.Calls < 10+2*5 {
		t.Errorf("w1 applied %d before it stopped: want a third of the gRPC calls and two connections' worth", first.Calls)
	}
}

func dialOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func runOut(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

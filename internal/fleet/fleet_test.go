package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/rpc"
)

func TestParseApplied(t *testing.T) {
	log := `{"level":"INFO","msg":"warren: draining"}
not json
{"level":"INFO","msg":"counter increments applied","calls":3,"sum":8}
`
	if a, ok := ParseApplied(log); !ok || a != (Applied{Calls: 3, Sum: 8}) {
		t.Fatalf("%+v %v", a, ok)
	}
	if _, ok := ParseApplied(`{"msg":"other","calls":1}`); ok {
		t.Fatal("found a record that is not there")
	}
}

// TestStartStop starts a server, makes increments and reads them back from
// its exit record.
func TestStartStop(t *testing.T) {
	bin := Build(t, "../../cmd/warren")
	s := Start(t, nil, bin, "--addr", fmt.Sprintf("tcp://127.0.0.1:%d", FreePort(t)), "--token", "fleet-test-token")
	c, err := rpc.Dial(s.Addr, &rpc.ClientOptions{Token: "fleet-test-token"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc := counter.NewCounterClient(c)
	if _, err := cc.Set(ctx, &counter.SetRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := cc.Inc(ctx, &counter.IncRequest{Name: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	a, err := s.Stop()
	if err != nil || a != (Applied{Calls: 4, Sum: 4}) {
		t.Fatalf("%+v, %v; want 4 calls", a, err)
	}
}

// TestDrainsHTTP2 runs the probe: whatever it finds, it must find it
// without hanging, and the server must still exit.
func TestDrainsHTTP2(t *testing.T) {
	bin := Build(t, "../../cmd/warren")
	s := Start(t, nil, bin, "--addr", fmt.Sprintf("tcp://127.0.0.1:%d", FreePort(t)), "--token", "fleet-test-token")
	t.Logf("warren serve sends an HTTP/2 GOAWAY when it drains: %v", s.DrainsHTTP2(t))
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the server did not exit after SIGTERM")
	}
}

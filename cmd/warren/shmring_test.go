package main

import (
	"strings"
	"testing"

	"github.com/warrenipc/warren/rpc"
)

// TestShmRingFlag: serve, call and ping with --shm-ring work together and
// with sides that do not ask (the socket then carries the frames), and
// the flag asks for rings in the client's settings.
func TestShmRingFlag(t *testing.T) {
	clientShmRing = true
	if got := clientOptions(&rpc.ClientOptions{}).Settings.ShmRing; got != 256<<10 {
		t.Fatalf("--shm-ring asks for %d-byte rings", got)
	}
	clientShmRing = false
	if got := clientOptions(&rpc.ClientOptions{}).Settings.ShmRing; got != 0 {
		t.Fatalf("without --shm-ring: %d-byte rings", got)
	}
	for _, serveArgs := range [][]string{{"--shm-ring"}, nil} {
		s := serveTemp(t, serveArgs...)
		for _, flags := range [][]string{{"--shm-ring"}, nil} {
			r := runCmd(t, nil, "", append(append([]string{"call"}, flags...), s.addr, "Counter.Set", `{"name":"ring","value":1}`)...)
			if r.code != 0 || !strings.Contains(r.stdout, `"ring"`) {
				t.Fatalf("serve %q, call %q: %s", serveArgs, flags, r)
			}
			r = runCmd(t, nil, "", append(append([]string{"ping"}, flags...), "-n", "5", s.addr)...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "5 pings to ") {
				t.Fatalf("serve %q, ping %q: %s", serveArgs, flags, r)
			}
		}
	}
}

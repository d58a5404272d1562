package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestClientTargets: call, list and ping take a list of addresses, skip
// one that is down, and reject bad lists and names clearly.
func TestClientTargets(t *testing.T) {
	a, b := serveTemp(t), serveTemp(t)
	dead := "unix://" + filepath.Join(shortTempDir(t), "none.sock")
	both := a.addr + "," + b.addr
	if r := runCmd(t, nil, "", "ping", "-n", "4", both); r.code != 0 {
		t.Fatalf("ping %s: %s", both, r)
	}
	if r := runCmd(t, nil, "", "list", both); r.code != 0 || !strings.Contains(r.stdout, "Counter.Get") {
		t.Fatalf("list %s: %s", both, r)
	}
	for range 4 {
		if r := runCmd(t, nil, "", "call", dead+","+a.addr, "Counter.List"); r.code != 0 {
			t.Fatalf("call with a server down in the list: %s", r)
		}
	}
	wantFail(t, "bad entry", runCmd(t, nil, "", "call", a.addr+",bogus://x", "Counter.List"), 1, `bad address "bogus://x"`)
	wantFail(t, "empty entry", runCmd(t, nil, "", "call", a.addr+",", "Counter.List"), 1, "entry 2 is empty")
	wantFail(t, "dns without port", runCmd(t, nil, "", "ping", "dns:///localhost"), 1, "dns:///HOST:PORT")
}

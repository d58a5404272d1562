package main

import (
	"strings"
	"testing"
)

// TestCallHeader: -H sends call metadata, here the token a server asks of
// its unix peers.
func TestCallHeader(t *testing.T) {
	s := serveTemp(t, "--token", "tok")
	wantFail(t, "call without the header", runCmd(t, nil, "", "call", s.addr, "Counter.List"), 1, "unauthenticated")
	r := runCmd(t, nil, "", "call", "-H", "Authorization: Bearer tok", s.addr, "Counter.Set", `{"name":"a","value":1}`)
	if r.code != 0 {
		t.Fatalf("call -H: %s", r)
	}
	r = runCmd(t, nil, "", "call", "-H", "x:1", "-H", "authorization:Bearer tok", s.addr, "Counter.Get", `{"name":"a"}`)
	if r.code != 0 || !strings.Contains(r.stdout, "1") {
		t.Fatalf("call with two -H: %s", r)
	}
	wantFail(t, "-H without a colon", runCmd(t, nil, "", "call", "-H", "nocolon", s.addr, "Counter.List"), 2, "KEY:VALUE")
}

package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/warrenipc/warren/internal/fleet"
)

// TestServeReportsIncrements: serve's last record gives the Inc calls it
// applied and their sum, counting warren and HTTP calls and not the ones
// that failed.
func TestServeReportsIncrements(t *testing.T) {
	s := serveTemp(t, "--log-format", "json")
	call(t, s.addr, "Counter.Set", `{"name":"a","value":1}`)
	call(t, s.addr, "Counter.Inc", `{"name":"a","by":5}`)
	call(t, s.addr, "warren.counter.v1.Counter.Inc", `{"name":"a"}`)
	// Refused by the store: an overflow is not applied.
	if r := runCmd(t, nil, "", "call", s.addr, "Counter.Inc", `{"name":"a","by":"9223372036854775807"}`); r.code == 0 {
		t.Fatalf("overflowing Inc succeeded: %s", r)
	}
	r := runArgv(t, nil, nil, "", "curl", "-sS", "--unix-socket", s.path, "http://warren/Counter.Inc",
		"-H", "Content-Type: application/json", "-d", `{"name":"a","by":"2"}`)
	if r.code != 0 || !strings.Contains(r.stdout, `"value":"9"`) {
		t.Fatalf("curl Counter.Inc: %s", r)
	}
	s.signal(syscall.SIGTERM)
	if code := s.wait(); code != 0 {
		t.Fatalf("serve exit %d; stderr:\n%s", code, s.stderr)
	}
	got, ok := fleet.ParseApplied(s.stderr.String())
	if !ok || got.Calls != 3 || got.Sum != 8 {
		t.Fatalf("exit record %+v (found %v), want calls 3, sum 8; stderr:\n%s", got, ok, s.stderr)
	}
}

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
)

// appliedRecord is serve's last log record in JSON.
type appliedRecord struct {
	Msg   string `json:"msg"`
	Calls int64  `json:"calls"`
	Sum   int64  `json:"sum"`
}

// parseApplied finds the "counter increments applied" record in serve's
// JSON log.
func parseApplied(t *testing.T, stderr string) (appliedRecord, bool) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		var r appliedRecord
		if json.Unmarshal([]byte(line), &r) == nil && r.Msg == "counter increments applied" {
			return r, true
		}
	}
	return appliedRecord{}, false
}

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
	got, ok := parseApplied(t, s.stderr.String())
	if !ok || got.Calls != 3 || got.Sum != 8 {
		t.Fatalf("exit record %+v (found %v), want calls 3, sum 8; stderr:\n%s", got, ok, s.stderr)
	}
}

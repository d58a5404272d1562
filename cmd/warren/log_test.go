package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeLogFlagsBad(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--log-format", "xml", `invalid --log-format "xml": give text or json`},
		{"--log-level", "loud", `invalid --log-level "loud": give debug, info, warn or error`},
	} {
		r := runCmd(t, nil, "", "serve", tc.flag, tc.value)
		wantFail(t, tc.flag, r, exitUsage, tc.want)
	}
}

// TestServeLogJSON: with --log-format json, a refused caller is one JSON
// record whose uid, pid and reason are attributes of their own.
func TestServeLogJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const nobody = 65534
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--addr", "unix://"+filepath.Join(dir, "j.sock"), "--mode", "0666", "--log-format", "json", "--log-level", "warn")
	r := runAs(t, &syscall.Credential{Uid: nobody, Gid: nobody}, cmdEnv(t), "", "call", s.addr, "Counter.List")
	wantFail(t, "nobody", r, 1, "permission_denied")
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(s.stderr.String(), "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if rec["msg"] != "warren: connection refused" {
				continue
			}
			if rec["level"] != "WARN" || rec["uid"] != float64(nobody) || rec["pid"] == nil || rec["network"] != "unix" ||
				!strings.Contains(rec["reason"].(string), "uid 65534") {
				t.Fatalf("record %v", rec)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no JSON refusal record:\n%s", s.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

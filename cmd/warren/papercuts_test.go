package main

import (
	"os"
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

// TestCallDidYouMean: a mistyped method or an address without a scheme
// gets a suggestion.
func TestCallDidYouMean(t *testing.T) {
	s := serveTemp(t)
	wantFail(t, "mistyped method", runCmd(t, nil, "", "call", s.addr, "Counter.Gte", `{"name":"a"}`), 1,
		"unimplemented", "did you mean Counter.Get?")
	r := runCmd(t, nil, "", "call", s.addr, "Nothing.Like.This")
	wantFail(t, "unknown method", r, 1, "unimplemented")
	if strings.Contains(r.stderr, "did you mean") {
		t.Errorf("a suggestion for a method like no other: %s", r)
	}
	path := strings.TrimPrefix(s.addr, "unix://")
	wantFail(t, "path", runCmd(t, nil, "", "call", path, "Counter.List"), 1, "did you mean "+s.addr+"?")
	wantFail(t, "host:port", runCmd(t, nil, "", "call", "localhost:7000", "Counter.List"), 1, "did you mean tcp://localhost:7000?")
	for arg, want := range map[string]string{
		"/tmp/x.sock": "unix:///tmp/x.sock", "x.sock": "unix:x.sock", "127.0.0.1:1": "tcp://127.0.0.1:1",
		"[::1]:80": "tcp://[::1]:80", "unix:///a": "", "host:port": "", "tcp://h:1": "",
	} {
		if got := suggestAddr(arg); got != want {
			t.Errorf("suggestAddr(%q) = %q, want %q", arg, got, want)
		}
	}
}

// TestCallWatchMissing: a watch of a counter that does not exist says so
// on stderr, and then follows the counter once it is set.
func TestCallWatchMissing(t *testing.T) {
	s := serveTemp(t)
	w := startCmd(t, nil, nil, "call", s.addr, "Counter.Watch", `{"name":"later"}`)
	w.waitStderr(`no counter named "later" yet: waiting for it to be set`)
	call(t, s.addr, "Counter.Set", `{"name":"later","value":7}`)
	wantOut(t, "watched", w.line(), `{"name":"later","value":"7"}`)
	w.signal(os.Interrupt)
	if code := w.wait(); code != 0 {
		t.Fatalf("watch after SIGINT: exit %d, stderr %q", code, w.stderr)
	}
}

// TestReadmeQuickStart: the README's quick start installs from a clone
// (the module is not published) and takes the socket path from serve's
// output rather than from $XDG_RUNTIME_DIR, which is empty for root.
func TestReadmeQuickStart(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, bad := range []string{"github.com/warrenipc/warren/cmd/warren@", "github.com/warrenipc/warren/cmd/protoc-gen-go-warren@", `--unix-socket "$XDG_RUNTIME_DIR`} {
		if strings.Contains(readme, bad) {
			t.Errorf("README.md still has %q", bad)
		}
	}
	for _, want := range []string{"go install ./cmd/warren", "/tmp/warren-0/warren.sock", "-H KEY:VALUE"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md lacks %q", want)
		}
	}
}

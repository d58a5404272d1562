package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// warrenBin is the command, built once by TestMain. It is built without
// -race even when the tests run with it: a race-enabled binary takes about
// a second to start here, and the tests start dozens. TestDemo runs the
// demo in this process, under the race detector if it is on.
var warrenBin string

func TestMain(m *testing.M) {
	if os.Getenv("WARREN_NETNS_HELPER") != "" {
		os.Exit(m.Run()) // a helper process of netns_linux_test.go
	}
	dir, err := os.MkdirTemp("", "warren-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Readable by all: some tests run the binary as another user.
	os.Chmod(dir, 0o755)
	warrenBin = filepath.Join(dir, "warren")
	// -trimpath: the binary must not find the bench source through the
	// path it was built from (TestBench checks that it says what to do).
	out, err := exec.Command("go", "build", "-trimpath", "-o", warrenBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cmdEnv is the environment of a test's warren processes: the test's own,
// with XDG_RUNTIME_DIR and TMPDIR pointing at a private directory unless
// the test sets them, so that "default" never reaches a real server.
func cmdEnv(t *testing.T, extra ...string) []string {
	t.Helper()
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	has := func(k string) bool {
		for _, kv := range extra {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	}
	if !has("XDG_RUNTIME_DIR") && !has("TMPDIR") {
		env = append(env, "XDG_RUNTIME_DIR="+shortTempDir(t))
	}
	return append(env, extra...)
}

// shortTempDir returns a new directory with a short path (socket paths
// must fit in about 100 bytes; t.TempDir's may not), removed at the end.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// result is a finished warren process.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runCmd runs warren with args and waits for it (30 s at most).
func runCmd(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	return runAs(t, nil, env, stdin, args...)
}

// runAs is runCmd with the process's credentials (nil: ours).
func runAs(t *testing.T, cred *syscall.Credential, env []string, stdin string, args ...string) result {
	t.Helper()
	return runArgv(t, cred, env, stdin, append([]string{warrenBin}, args...)...)
}

// runArgv runs the program argv[0] with the arguments argv[1:], as runAs
// runs warren.
func runArgv(t *testing.T, cred *syscall.Credential, env []string, stdin string, argv ...string) result {
	t.Helper()
	args := argv[1:]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], args...)
	if env == nil {
		env = cmdEnv(t)
	}
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("warren %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("warren %s: timed out\n%s", strings.Join(args, " "), r)
	}
	return r
}

// syncBuffer is a bytes.Buffer safe for a process writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running warren process whose stdout is read line by line.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// startCmd starts warren with args. The process is killed at the end of
// the test if it is still running.
func startCmd(t *testing.T, cred *syscall.Credential, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(warrenBin, args...)
	if env == nil {
		env = cmdEnv(t)
	}
	cmd.Env = env
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return startProc(t, cmd)
}

// startProc starts cmd as startCmd starts warren.
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 1000), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		err := cmd.Wait() // after reading stdout to its end
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// line returns the next line of stdout.
func (p *proc) line() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			p.t.Fatalf("%s ended (exit %d) without the expected output; stderr:\n%s", p.cmd, p.code, p.stderr)
		}
		return l
	case <-time.After(20 * time.Second):
		p.t.Fatalf("%s: no output in 20s; stderr:\n%s", p.cmd, p.stderr)
	}
	return ""
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(20 * time.Second):
		p.t.Fatalf("%s did not exit in 20s; stderr:\n%s", p.cmd, p.stderr)
	}
	return 0
}

// waitStderr waits for stderr to contain s.
func (p *proc) waitStderr(s string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), s) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: stderr lacks %q:\n%s", p.cmd, s, p.stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// server is a running `warren serve`.
type server struct {
	*proc
	addr string // as printed
	path string // the socket file
}

// startServe starts `warren serve` with args and waits for its address.
func startServe(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	p := startCmd(t, nil, env, append([]string{"serve"}, args...)...)
	l := p.line()
	addr, ok := strings.CutPrefix(l, "listening on ")
	if !ok {
		t.Fatalf("serve printed %q, want \"listening on ADDR\"; stderr:\n%s", l, p.stderr)
	}
	return &server{proc: p, addr: addr, path: strings.TrimPrefix(addr, "unix://")}
}

// serveTemp starts `warren serve` on a socket in a new directory.
func serveTemp(t *testing.T, args ...string) *server {
	t.Helper()
	addr := "unix://" + filepath.Join(shortTempDir(t), "w.sock")
	s := startServe(t, nil, append([]string{"--addr", addr}, args...)...)
	if s.addr != addr {
		t.Fatalf("serve listens on %s, want %s", s.addr, addr)
	}
	return s
}

// call runs `warren call` and requires success.
func call(t *testing.T, addr, method, req string) string {
	t.Helper()
	args := []string{"call", addr, method}
	if req != "" {
		args = append(args, req)
	}
	r := runCmd(t, nil, "", args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("call %s %s: %s", method, req, r)
	}
	return strings.TrimSpace(r.stdout)
}

func wantOut(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %s, want %s", what, got, want)
	}
}

// wantFail checks a failed command: a non-zero status and stderr holding
// every one of parts.
func wantFail(t *testing.T, what string, r result, code int, parts ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\n%s", what, r.code, code, r)
	}
	for _, p := range parts {
		if !strings.Contains(r.stderr, p) {
			t.Fatalf("%s: stderr lacks %q\n%s", what, p, r)
		}
	}
}

// TestServeCall runs the same checks on both engines.
func TestServeCall(t *testing.T) {
	for _, engine := range []struct{ name, flag string }{{"goroutines", ""}, {"event-loop", "--event-loop"}} {
		t.Run(engine.name, func(t *testing.T) {
			var args []string
			if engine.flag != "" {
				args = append(args, engine.flag)
			}
			s := serveTemp(t, args...)
			s.waitStderr("stop with Ctrl-C")
			if got := strings.Contains(s.stderr.String(), "event loop"); got != (engine.flag != "") {
				t.Fatalf("serve %v: stderr mentions the event loop: %v\n%s", args, got, s.stderr)
			}
			testServeCall(t, s)
		})
	}
}

func testServeCall(t *testing.T, s *server) {
	wantOut(t, "Set", call(t, s.addr, "Counter.Set", `{"name":"a","value":"5"}`), `{"name":"a","value":"5"}`)
	wantOut(t, "Get", call(t, s.addr, "Counter.Get", `{"name":"a"}`), `{"name":"a","value":"5"}`)
	wantOut(t, "Inc", call(t, s.addr, "Counter.Inc", `{"name":"a"}`), `{"name":"a","value":"6"}`)
	wantOut(t, "Inc by", call(t, s.addr, "Counter.Inc", ` { "name": "a", "by": -16 } `), `{"name":"a","value":"-10"}`)
	call(t, s.addr, "Counter.Set", `{"name":"B","value":1}`)
	wantOut(t, "List", call(t, s.addr, "Counter.List", ""), `{"counters":[{"name":"B","value":"1"},{"name":"a","value":"-10"}]}`)

	// The request from stdin, and flags after the arguments.
	r := runCmd(t, nil, `{"name":"a"}`, "call", s.addr, "Counter.Get", "-", "-timeout", "5s")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"a","value":"-10"}` {
		t.Fatalf("call with stdin: %s", r)
	}

	// Errors: "error: CODE: message", status 1, nothing on stdout.
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Get", `{"name":"nope"}`)
	wantFail(t, "Get of a missing counter", r, 1, `error: not_found: no counter named "nope"`)
	if r.stdout != "" {
		t.Fatalf("stdout on error: %q", r.stdout)
	}
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Inc", `{}`)
	wantFail(t, "Inc without a name", r, 1, `error: invalid_argument: missing "name"`)
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Nope", `{}`)
	wantFail(t, "unknown method", r, 1, "error: unimplemented: ", "Counter.Nope", "warren list "+s.addr)
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Set", `{name:a}`)
	wantFail(t, "bad JSON", r, 1, "error: invalid_argument: ", "not valid JSON")
	r = runCmd(t, nil, "", "call", s.addr, "Counter.Inc", `{"name":"a","by":"x"}`)
	wantFail(t, "wrong type", r, 1, "error: invalid_argument: ")

	// Usage mistakes: status 2.
	wantFail(t, "no method", runCmd(t, nil, "", "call", s.addr), 2, "missing arguments", "usage: warren call")
	wantFail(t, "extra argument", runCmd(t, nil, "", "call", s.addr, "M.X", "{}", "extra"), 2, `unexpected argument "extra"`)
	wantFail(t, "bad flag", runCmd(t, nil, "", "call", "-frob", s.addr, "M.X"), 2, "flag provided but not defined: -frob")
	wantFail(t, "bad address", runCmd(t, nil, "", "call", "carrier-pigeon://x", "M.X"), 1,
		"error: invalid_argument: ", `unknown scheme "carrier-pigeon"`, "accepted forms are")
}

func TestList(t *testing.T) {
	s := serveTemp(t)
	r := runCmd(t, nil, "", "list", s.addr)
	if r.code != 0 {
		t.Fatal(r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	want := []string{
		"METHOD KIND REQUEST REPLY",
		"Counter.Get unary {name: string} {name: string, value: string}",
		"Counter.Inc unary {name: string, by: string} {name: string, value: string}",
		"Counter.List unary {} {counters: [{name: string, value: string}]}",
		"Counter.Set unary {name: string, value: string} {name: string, value: string}",
		"Counter.Watch server_stream {name: string} stream {name: string, value: string}",
	}
	for i, w := range want {
		if i >= len(lines) || strings.Join(strings.Fields(lines[i]), " ") != w {
			t.Fatalf("line %d: want %q\n%s", i, w, r.stdout)
		}
	}
	// The recursive shape of Warren.Methods' reply (methods and version)
	// stays short.
	if len(lines) != 7 || !strings.HasPrefix(lines[6], "Warren.Methods") || len(lines[6]) > 400 {
		t.Fatalf("Warren.Methods line:\n%s", r.stdout)
	}

	r = runCmd(t, nil, "", "list", "--json", s.addr)
	var list struct {
		Methods []struct{ Name, Kind string } `json:"methods"`
		Version struct{ Version, Go string }  `json:"version"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Methods) != 6 || list.Version.Version == "" || list.Version.Go == "" ||
		list.Methods[4].Name != "Counter.Watch" || list.Methods[4].Kind != "server_stream" {
		t.Fatalf("list --json: %s", r)
	}
}

func TestPing(t *testing.T) {
	s := serveTemp(t)
	r := runCmd(t, nil, "", "ping", "-n", "25", s.addr)
	if r.code != 0 {
		t.Fatal(r)
	}
	f := strings.Fields(r.stdout)
	// "25 pings to ADDR: min D  p50 D  p99 D  max D"
	if len(f) != 12 || f[0] != "25" || f[4] != "min" || f[6] != "p50" || f[8] != "p99" || f[10] != "max" {
		t.Fatalf("ping output %q", r.stdout)
	}
	var prev time.Duration
	for _, i := range []int{5, 7, 9, 11} {
		d, err := time.ParseDuration(f[i])
		if err != nil || d <= 0 || d < prev {
			t.Fatalf("ping output %q: %q", r.stdout, f[i])
		}
		prev = d
	}
	wantFail(t, "ping -n 0", runCmd(t, nil, "", "ping", "-n", "0", s.addr), 2, "-n must be at least 1")
}

func TestCallWatch(t *testing.T) {
	s := serveTemp(t)
	call(t, s.addr, "Counter.Set", `{"name":"w","value":1}`)
	w := startCmd(t, nil, nil, "call", s.addr, "Counter.Watch", `{"name":"w"}`)
	wantOut(t, "first watched", w.line(), `{"name":"w","value":"1"}`)
	call(t, s.addr, "Counter.Inc", `{"name":"w"}`)
	wantOut(t, "watched", w.line(), `{"name":"w","value":"2"}`)
	call(t, s.addr, "Counter.Inc", `{"name":"w","by":40}`)
	wantOut(t, "watched", w.line(), `{"name":"w","value":"42"}`)
	// Ctrl-C ends a watch normally.
	w.signal(os.Interrupt)
	if code := w.wait(); code != 0 || w.stderr.String() != "" {
		t.Fatalf("watch after SIGINT: exit %d, stderr %q", code, w.stderr)
	}
}

func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is required (WARREN_REQUIRE_TOOLS is set): %v", name, err)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

func TestCurl(t *testing.T) {
	curl := requireTool(t, "curl")
	s := serveTemp(t)
	call(t, s.addr, "Counter.Set", `{"name":"a","value":1}`)
	out, err := exec.Command(curl, "-sS", "--max-time", "20", "--unix-socket", s.path,
		"http://warren/Counter.Inc", "-d", `{"name":"a"}`).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	var c struct {
		Name  string `json:"name"`
		Value int64  `json:"value,string"` // the protobuf JSON mapping
	}
	if err := json.Unmarshal(out, &c); err != nil || c.Name != "a" || c.Value != 2 {
		t.Fatalf("curl Counter.Inc: %s (%v)", out, err)
	}
	// RPC sees what HTTP did.
	wantOut(t, "Get after HTTP", call(t, s.addr, "Counter.Get", `{"name":"a"}`), `{"name":"a","value":"2"}`)
	// An error in the Connect protocol's JSON.
	out, _ = exec.Command(curl, "-sS", "--max-time", "20", "--unix-socket", s.path,
		"http://warren/Counter.Get", "-H", "Content-Type: application/json", "-d", `{"name":"nope"}`).CombinedOutput()
	if !strings.Contains(string(out), `"not_found"`) {
		t.Fatalf("curl Counter.Get of a missing counter: %s", out)
	}
	// GET / lists the methods.
	out, err = exec.Command(curl, "-sS", "--max-time", "20", "--unix-socket", s.path, "http://warren/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Counter.Watch") {
		t.Fatalf("curl GET /: %v\n%s", err, out)
	}
}

func TestGracefulShutdown(t *testing.T) {
	s := serveTemp(t)
	call(t, s.addr, "Counter.Set", `{"name":"w","value":1}`)
	w := startCmd(t, nil, nil, "call", s.addr, "Counter.Watch", `{"name":"w"}`)
	wantOut(t, "watched", w.line(), `{"name":"w","value":"1"}`)
	s.signal(syscall.SIGTERM)
	// The watch ends with the server's status, not a broken connection.
	if code := w.wait(); code != 1 || strings.TrimSpace(w.stderr.String()) != "error: unavailable: server is shutting down" {
		t.Fatalf("watch: exit %d, stderr %q", code, w.stderr)
	}
	if code := s.wait(); code != 0 {
		t.Fatalf("serve exit %d after SIGTERM; stderr:\n%s", code, s.stderr)
	}
	if _, err := os.Lstat(s.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after shutdown: %v", err)
	}
	s.waitStderr("shutting down gracefully")
	s.waitStderr("stopped; removed " + s.path)
	// Nothing answers any more, and the message says so.
	r := runCmd(t, nil, "", "call", s.addr, "Counter.List")
	wantFail(t, "call after shutdown", r, 1, "error: unavailable: no server at "+s.addr+": is `warren serve` running?")
}

func TestSIGINTShutdown(t *testing.T) {
	s := serveTemp(t)
	call(t, s.addr, "Counter.Set", `{"name":"a","value":1}`)
	s.signal(os.Interrupt)
	if code := s.wait(); code != 0 {
		t.Fatalf("serve exit %d after SIGINT; stderr:\n%s", code, s.stderr)
	}
	if _, err := os.Lstat(s.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after shutdown: %v", err)
	}
}

func TestSecondServeRefused(t *testing.T) {
	s := serveTemp(t)
	r := runCmd(t, nil, "", "serve", "--addr", s.addr)
	wantFail(t, "second serve", r, 1, "error: "+s.addr+" is in use by a running server", "stop that server first")
	// The first still works, and its socket is still there.
	wantOut(t, "first server", call(t, s.addr, "Counter.Set", `{"name":"a","value":"1"}`), `{"name":"a","value":"1"}`)
}

func TestServeRegularFileRefused(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "notes.txt")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, nil, "", "serve", "--addr", "unix://"+path)
	wantFail(t, "serve on a regular file", r, 1, "error: "+path+" exists and is not a socket, so it was left alone")
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
		t.Fatalf("the file after serve: %q, %v", b, err)
	}
}

func TestServeUsage(t *testing.T) {
	dir := shortTempDir(t)
	addr := "unix://" + filepath.Join(dir, "x.sock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow-uid", "abc"}, `invalid value "abc" for flag -allow-uid: "abc" is not a uid`},
		{[]string{"--allow-uid", "-1"}, `"-1" is not a uid`},
		{[]string{"--allow-gid", "1,x"}, `"x" is not a gid`},
		{[]string{"--mode", "0999"}, `invalid --mode "0999"`},
		{[]string{"--mode", "01777"}, `invalid --mode "01777"`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--addr", "unix:/x.sock"}, "three slashes"},
		{[]string{"--addr", "tcp://127.0.0.1:0", "--allow-uid", "1"}, "need a unix socket address"},
		{[]string{"--addr", "tls://127.0.0.1:0"}, "a tls:// address needs --cert and --key"},
		{[]string{"--addr", "ws://127.0.0.1:0/w", "--cert", "x.pem"}, "are for tls:// and wss:// addresses, not ws://"},
		{[]string{"--metrics", "systemd:"}, "--metrics takes a unix, tcp, tls or ws address"},
		{[]string{"--metrics", "tls://127.0.0.1:0"}, "needs the service on a tls:// or wss:// --addr"},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--addr") {
			args = append([]string{"--addr", addr}, args...)
		}
		r := runCmd(t, nil, "", append([]string{"serve"}, args...)...)
		wantFail(t, strings.Join(tc.args, " "), r, 2, tc.want)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused serve left a socket: %v", err)
	}
}

func TestAllowUIDParsing(t *testing.T) {
	s := serveTemp(t, "--allow-uid", "1234", "--allow-uid", "1235,1236", "--allow-gid", "77", "--mode", "660")
	s.waitStderr(fmt.Sprintf("socket mode 0660; callers allowed: uid %d (you), or uid 1234,1235,1236, or gid 77", os.Geteuid()))
	fi, err := os.Stat(s.path)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v, %v", fi.Mode(), err)
	}
	call(t, s.addr, "Counter.Set", `{"name":"a","value":1}`) // we are still allowed
}

// The policy as another user sees it. Needs root, to run the client as
// the nobody user.
func TestPolicyOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const nobody = 65534
	cred := &syscall.Credential{Uid: nobody, Gid: nobody}
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := func(name string) string { return "unix://" + filepath.Join(dir, name) }

	// Mode 0600: the socket file keeps nobody out.
	s := startServe(t, nil, "--addr", addr("a.sock"))
	r := runAs(t, cred, cmdEnv(t), "", "call", s.addr, "Counter.List")
	wantFail(t, "nobody, mode 0600", r, 1, "error: permission_denied: cannot connect to "+s.addr,
		fmt.Sprintf("does not let uid %d in", nobody), "--mode 0666")

	// Mode 0666, same-user policy: the server refuses nobody, and says so.
	s = startServe(t, nil, "--addr", addr("b.sock"), "--mode", "0666")
	r = runAs(t, cred, cmdEnv(t), "", "call", s.addr, "Counter.List")
	wantFail(t, "nobody, not allowed", r, 1,
		fmt.Sprintf("error: permission_denied: permission denied by the server's policy for uid %d", nobody),
		fmt.Sprintf("--allow-uid %d", nobody))
	r = runAs(t, cred, cmdEnv(t), "", "ping", s.addr)
	wantFail(t, "ping, nobody, not allowed", r, 1, "error: permission_denied: permission denied by the server's policy")

	// --allow-uid and --allow-gid let nobody in.
	for i, flag := range []string{"--allow-uid", "--allow-gid"} {
		s = startServe(t, nil, "--addr", addr(fmt.Sprintf("c%d.sock", i)), "--mode", "0666", flag, strconv.Itoa(nobody))
		r = runAs(t, cred, cmdEnv(t), "", "call", s.addr, "Counter.Set", `{"name":"n","value":7}`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"n","value":"7"}` {
			t.Fatalf("nobody with %s: %s", flag, r)
		}
	}

	// Over HTTP too, the policy applies at accept; the refusal is
	// answered in the peer's protocol: 403 with Connect's JSON error, over
	// HTTP/1.1 and HTTP/2.
	if curl, err := exec.LookPath("curl"); err == nil {
		s = startServe(t, nil, "--addr", addr("d.sock"), "--mode", "0666")
		for _, proto := range []string{"--http1.1", "--http2-prior-knowledge"} {
			cmd := exec.Command(curl, "-sS", proto, "--max-time", "20", "--unix-socket", s.path,
				"-w", "\nHTTP %{http_code}", "http://warren/Counter.List", "-H", "Content-Type: application/json", "-d", "{}")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			out, _ := cmd.CombinedOutput()
			if !strings.Contains(string(out), "HTTP 403") || !strings.Contains(string(out), `"code":"permission_denied"`) ||
				!strings.Contains(string(out), fmt.Sprintf("uid %d is not", nobody)) {
				t.Fatalf("HTTP (%s) as nobody to a same-user server: %s, want 403 permission_denied with the reason", proto, out)
			}
		}
	}
}

// TestRefusedPeerNotRead checks that `warren serve` applies its policy at
// accept: a refused peer that sends nothing gets, at once, the server's
// preface and a GOAWAY naming the policy, and the connection is closed.
// (Before, the server waited for the peer's preface, for up to 10 s, and
// served it a session.)
func TestRefusedPeerNotRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	socat := requireTool(t, "socat")
	dir := shortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--addr", "unix://"+filepath.Join(dir, "r.sock"), "--mode", "0666")
	silent, w, err := os.Pipe() // socat's stdin: never written
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	defer w.Close()
	cmd := exec.Command(socat, "-", "UNIX-CONNECT:"+s.path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stdin = silent
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("refused connection still open after 3 s; got %q", out.Bytes())
	}
	took := time.Since(start)
	got := out.Bytes()
	_, n, ok, err := wire.ParsePreface(got)
	if err != nil || !ok {
		t.Fatalf("reply %q does not start with a preface: %v", got, err)
	}
	rest, h, p, ok, err := wire.ParseFrame(got[n:], 1<<20)
	if err != nil || !ok || h.Type != wire.TypeGoAway || len(rest) != 0 || !bytes.Contains(p, []byte("uid 65534")) {
		t.Fatalf("refused peer got %q after the preface, want one GOAWAY naming uid 65534", got[n:])
	}
	t.Logf("refused and closed in %v", took.Round(time.Millisecond))
}

func TestDefaultAddress(t *testing.T) {
	// With XDG_RUNTIME_DIR.
	xdg := shortTempDir(t)
	env := cmdEnv(t, "XDG_RUNTIME_DIR="+xdg)
	s := startServe(t, env)
	want := "unix://" + filepath.Join(xdg, "warren", "warren.sock")
	if s.addr != want {
		t.Fatalf("default address %s, want %s", s.addr, want)
	}
	if fi, err := os.Stat(filepath.Join(xdg, "warren")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default directory: %v, %v", fi, err)
	}
	r := runCmd(t, env, "", "call", "default", "Counter.Set", `{"name":"d","value":3}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"name":"d","value":"3"}` {
		t.Fatalf("call default: %s", r)
	}
	if r := runCmd(t, env, "", "list", "default"); r.code != 0 || !strings.Contains(r.stdout, "Counter.Watch") {
		t.Fatalf("list default: %s", r)
	}
	if r := runCmd(t, env, "", "ping", "-n", "3", "default"); r.code != 0 || !strings.HasPrefix(r.stdout, "3 pings to default") {
		t.Fatalf("ping default: %s", r)
	}
	// "--addr default" is the same address: in use.
	wantFail(t, "second default serve", runCmd(t, env, "", "serve", "--addr", "default"), 1, "is in use by a running server")
	s.signal(syscall.SIGTERM)
	if code := s.wait(); code != 0 {
		t.Fatalf("serve exit %d\n%s", code, s.stderr)
	}
	r = runCmd(t, env, "", "call", "default", "Counter.List")
	wantFail(t, "default without a server", r, 1,
		"error: unavailable: no server at the default address "+want+": is `warren serve` running?")

	// Without XDG_RUNTIME_DIR: warren-UID in the temporary directory.
	tmp := shortTempDir(t)
	env = cmdEnv(t, "TMPDIR="+tmp)
	s = startServe(t, env)
	dir := filepath.Join(tmp, fmt.Sprintf("warren-%d", os.Geteuid()))
	if s.addr != "unix://"+filepath.Join(dir, "warren.sock") {
		t.Fatalf("default address without XDG_RUNTIME_DIR: %s", s.addr)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default directory: %v, %v", fi, err)
	}
	wantOut(t, "call default", strings.TrimSpace(runCmd(t, env, "", "call", "default", "Counter.List").stdout), `{}`)
	s.signal(syscall.SIGTERM)
	s.wait()

	// A directory others can write to is refused, and left alone.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	wantFail(t, "world-writable default directory", runCmd(t, env, "", "serve"), 1,
		"the default socket directory "+dir+" has mode 0777, writable by others", "chmod 700")
	// So is one that belongs to someone else.
	if os.Geteuid() == 0 {
		os.Chmod(dir, 0o700)
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		wantFail(t, "someone else's default directory", runCmd(t, env, "", "serve"), 1,
			"belongs to uid 65534, not to you")
	}
}

func TestNoServer(t *testing.T) {
	dir := shortTempDir(t)
	addr := "unix://" + filepath.Join(dir, "none.sock")
	for _, args := range [][]string{
		{"call", addr, "Counter.List"},
		{"list", addr},
		{"ping", addr},
	} {
		wantFail(t, args[0], runCmd(t, nil, "", args...), 1,
			"error: unavailable: no server at "+addr+": is `warren serve` running?")
	}
	// A stale socket file (its server died): the same.
	s := serveTemp(t)
	s.cmd.Process.Kill()
	s.wait()
	if _, err := os.Lstat(s.path); err != nil {
		t.Fatalf("a killed server's socket should stay behind: %v", err)
	}
	wantFail(t, "stale socket", runCmd(t, nil, "", "call", s.addr, "Counter.List"), 1,
		"error: unavailable: no server at "+s.addr+": is `warren serve` running?")
	// serve replaces the stale socket.
	s2 := startServe(t, nil, "--addr", s.addr)
	call(t, s2.addr, "Counter.List", "{}")
}

func TestHelp(t *testing.T) {
	for _, c := range []string{"serve", "call", "list", "ping", "demo", "bench"} {
		for _, h := range []string{"-h", "--help"} {
			r := runCmd(t, nil, "", c, h)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: warren "+c) || !strings.Contains(r.stdout, "examples:\n  warren "+c) {
				t.Fatalf("warren %s %s: %s", c, h, r)
			}
		}
	}
	r := runCmd(t, nil, "", "help", "ping")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "usage: warren ping") {
		t.Fatalf("warren help ping: %s", r)
	}
	r = runCmd(t, nil, "", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "commands:") || !strings.Contains(r.stdout, "examples:") {
		t.Fatalf("warren --help: %s", r)
	}
	wantFail(t, "no command", runCmd(t, nil, ""), 2, "usage: warren <command>")
	wantFail(t, "unknown command", runCmd(t, nil, "", "frobnicate"), 2, `error: unknown command "frobnicate"`)
}

func TestBench(t *testing.T) {
	// Not found: say how to run it. (The test binary is built with
	// -trimpath and lives in a temporary directory.)
	empty := shortTempDir(t)
	r := runIn(t, empty, "bench")
	wantFail(t, "bench without the source", r, 1, "was not found", "cd warren/bench && go run ./cmd/compare")

	// Found from the working directory, in a parent: runs cmd/compare
	// there with the arguments.
	requireTool(t, "go")
	root := shortTempDir(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "bench", "cmd", "compare"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "deep", "er"), 0o755))
	must(os.WriteFile(filepath.Join(root, "bench", "go.mod"), []byte("module "+benchModule+"\n\ngo 1.22\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "bench", "cmd", "compare", "main.go"), []byte(`package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Println("compare:", strings.Join(os.Args[1:], " "))
	os.Exit(3)
}
`), 0o644))
	r = runIn(t, filepath.Join(root, "deep", "er"), "bench", "-quick", "x")
	// go run reports the program's failure as its own exit status 1.
	if r.code != 1 || strings.TrimSpace(r.stdout) != "compare: -quick x" || !strings.Contains(r.stderr, "go run ./cmd/compare -quick x") {
		t.Fatalf("bench: %s", r)
	}
}

// runIn runs warren in dir.
func runIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, warrenBin, args...)
	cmd.Dir = dir
	cmd.Env = cmdEnv(t)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// The demo, in this process (so that the race detector sees it), with
// its output checked.
func TestDemo(t *testing.T) {
	var out, errOut strings.Builder
	addr := "unix://" + filepath.Join(shortTempDir(t), "d.sock")
	code := run([]string{"demo", "-addr", addr, "-calls", "600"}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		"counter service on " + addr,
		`Counter.Set {"name":"demo","value":0} -> {"name":"demo"}`,
		fmt.Sprintf("the server read the caller's identity from the kernel: uid %d", os.Geteuid()),
		"error not_found: no counter named \"nope\"",
		"methods: Counter.Get Counter.Inc Counter.List Counter.Set Counter.Watch Warren.Methods",
		"allocs/call",
		`counter "demo" = 600 = the number of increments; the watch saw it`,
		"server shut down gracefully; socket removed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The table has a row per transport, with numbers.
	rows := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && (f[0] == "rpc" || f[0] == "http" || f[0] == "watch") {
			if _, err := strconv.Atoi(f[1]); err != nil {
				t.Errorf("row %q", l)
			}
			rows[f[0]] = true
		}
	}
	if !rows["rpc"] || !rows["http"] || !rows["watch"] {
		t.Errorf("table rows %v:\n%s", rows, out.String())
	}
}

// The demo as CI runs it, through the binary, timed: a few seconds by
// default.
func TestDemoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	start := time.Now()
	r := runCmd(t, nil, "", "demo", "-duration", "1500ms")
	if r.code != 0 || !strings.Contains(r.stdout, "socket removed") {
		t.Fatalf("demo: %s", r)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("demo -duration 1500ms took %v", el)
	}
	// Plain progress lines, no terminal codes, when stdout is not a terminal.
	if strings.Contains(r.stdout, "\x1b[") || strings.Contains(r.stdout, "\r") {
		t.Fatalf("terminal codes in non-terminal output:\n%q", r.stdout)
	}
}

func TestDemoUsage(t *testing.T) {
	var out, errOut strings.Builder
	if code := run([]string{"demo", "-addr", "carrier-pigeon://x"}, strings.NewReader(""), &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "accepted forms are") {
		t.Fatalf("demo with a bad address: exit %d\n%s", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"demo", "-callers", "0"}, strings.NewReader(""), &out, &errOut); code != 2 {
		t.Fatalf("demo -callers 0: exit %d\n%s", code, errOut.String())
	}
}

// Unit tests of the pieces.

func TestHistogram(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram")
	}
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}, {0, time.Microsecond}} {
		got := h.quantile(tc.q)
		if diff := float64(got-tc.want) / float64(tc.want); diff < -0.07 || diff > 0.07 {
			t.Errorf("q%.2f = %v, want about %v", tc.q, got, tc.want)
		}
	}
	for _, d := range []time.Duration{0, 1, 15, 16, 17, 1000, time.Second, time.Hour, 1<<63 - 1} {
		b := bucketOf(d)
		if b < 0 || b >= len(h.counts) {
			t.Fatalf("bucket of %v: %d", d, b)
		}
		if v := bucketValue(b); d >= 16 && (float64(v) < float64(d)*0.93 || float64(v) > float64(d)*1.07) {
			t.Errorf("bucket of %v has value %v", d, v)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]uint32{"0600": 0o600, "600": 0o600, "0o660": 0o660, "0777": 0o777} {
		m, err := parseMode(in)
		if err != nil || uint32(m) != want {
			t.Errorf("parseMode(%q) = %o, %v", in, m, err)
		}
	}
	for _, in := range []string{"", "0", "999", "01777", "rw-------", "-600"} {
		if _, err := parseMode(in); err == nil {
			t.Errorf("parseMode(%q) accepted", in)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if d, _ := defaultDir(); d != "/run/user/1000/warren" {
		t.Errorf("with XDG_RUNTIME_DIR: %s", d)
	}
	t.Setenv("XDG_RUNTIME_DIR", "relative/dir") // ignored, as the spec says
	t.Setenv("TMPDIR", "/var/tmp")
	if d, _ := defaultDir(); d != fmt.Sprintf("/var/tmp/warren-%d", os.Geteuid()) {
		t.Errorf("without XDG_RUNTIME_DIR: %s", d)
	}
}

func TestParseFlagsInterspersed(t *testing.T) {
	e := &env{stdout: io.Discard, stderr: io.Discard}
	fs := newFlagSet("x")
	n := fs.Int("n", 0, "")
	pos, err := parseFlags(e, fs, help{}, []string{"a", "-n", "3", "b", "--", "-n", "c"})
	if err != nil || *n != 3 || strings.Join(pos, " ") != "a b -n c" {
		t.Fatalf("pos %q, n %d, err %v", pos, *n, err)
	}
}

// Client- and bidi-streaming methods read their requests from stdin; a
// server without the counter service works too. In this process, with a
// server of its own.
func TestCallStreamsInProcess(t *testing.T) {
	type msg struct {
		N int `json:"n"`
	}
	srv := rpc.NewServer(nil)
	rpc.HandleClientStream(srv, "T.Sum", func(ctx context.Context, st *rpc.Stream[msg, msg]) (*msg, error) {
		var sum msg
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return &sum, nil
			}
			if err != nil {
				return nil, err
			}
			sum.N += m.N
		}
	})
	rpc.HandleBidiStream(srv, "T.Double", func(ctx context.Context, st *rpc.Stream[msg, msg]) error {
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := st.Send(&msg{N: 2 * m.N}); err != nil {
				return err
			}
		}
	})
	rpc.HandleServerStream(srv, "T.Fail", func(ctx context.Context, m *msg, st *rpc.Stream[msg, msg]) error {
		st.Send(m)
		return status.New(status.FailedPrecondition, "no more")
	})
	addr := "unix://" + filepath.Join(shortTempDir(t), "s.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-served
	}()

	call := func(stdin string, args ...string) (string, string, int) {
		var out, errOut strings.Builder
		code := run(append([]string{"call", addr}, args...), strings.NewReader(stdin), &out, &errOut)
		return out.String(), errOut.String(), code
	}
	if out, errOut, code := call(`{"n":1} {"n":2}`+"\n"+`{"n":39}`, "T.Sum"); code != 0 || out != `{"n":42}`+"\n" {
		t.Fatalf("T.Sum: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := call("", "T.Sum", `{"n":5}`); code != 0 || out != `{"n":5}`+"\n" {
		t.Fatalf("T.Sum with an argument: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := call(`{"n":1}{"n":2}`, "T.Double"); code != 0 || out != `{"n":2}`+"\n"+`{"n":4}`+"\n" {
		t.Fatalf("T.Double: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := call(`{"n":1} oops`, "T.Double"); code != 1 || !strings.Contains(errOut, "error: invalid_argument: reading requests from stdin") {
		t.Fatalf("T.Double with bad stdin: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A stream that fails after a message: the message, then the error.
	if out, errOut, code := call("", "T.Fail", `{"n":7}`); code != 1 || out != `{"n":7}`+"\n" || errOut != "error: failed_precondition: no more\n" {
		t.Fatalf("T.Fail: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var out, errOut strings.Builder
	if code := run([]string{"list", addr}, strings.NewReader(""), &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "T.Double") || !strings.Contains(out.String(), "stream {n: integer}  stream {n: integer}") {
		t.Fatalf("list: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// TestAbstractAddress: --mode is refused with an abstract address (it has
// no file permissions), and --server-uid lets a client require the
// server's uid on any address.
func TestAbstractAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("abstract sockets are Linux only")
	}
	name := fmt.Sprintf("unix:@warren-test-%d", os.Getpid())
	r := runCmd(t, nil, "", "serve", "--addr", name, "--mode", "0666")
	wantFail(t, "serve --mode with an abstract address", r, 2, "--mode cannot apply to an abstract address", "--server-uid")
	s := startServe(t, nil, "--addr", name)
	me := strconv.Itoa(os.Geteuid())
	if out := runCmd(t, nil, "", "call", "--server-uid", me, s.addr, "Counter.Set", `{"name":"a","value":3}`); out.code != 0 {
		t.Fatalf("call --server-uid %s: %s", me, out)
	}
	for _, cmd := range [][]string{
		{"call", "--server-uid", "4242", s.addr, "Counter.Get", `{"name":"a"}`},
		{"list", "--server-uid", "4242", s.addr},
		{"ping", "--server-uid", "4242", s.addr},
	} {
		r := runCmd(t, nil, "", cmd...)
		wantFail(t, cmd[0]+" --server-uid 4242", r, 1, "error: permission_denied: refusing the server", "runs as uid "+me+", not as uid 4242")
	}
}

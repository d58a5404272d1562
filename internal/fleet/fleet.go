// Package fleet runs `warren serve` processes for the tests that put load
// balancers in front of several servers and restart them: it builds the
// binary, starts a server (optionally through a prefix such as
// "ip netns exec NS"), stops it with SIGTERM and reads the increments it
// reports as it exits ("counter increments applied").
package fleet

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/internal/testutil"
)

// Build builds cmd/warren (its directory given as pkg, e.g. "../../cmd/warren")
// into a temporary directory and returns the binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "warren")
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Applied is what a server reported as it exited.
type Applied struct {
	Calls int64 `json:"calls"` // Counter.Inc calls applied
	Sum   int64 `json:"sum"`   // the sum they added
}

// ParseApplied finds the "counter increments applied" record in a JSON log
// (serve --log-format json).
func ParseApplied(log string) (Applied, bool) {
	for _, line := range strings.Split(log, "\n") {
		var r struct {
			Msg string `json:"msg"`
			Applied
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Msg == "counter increments applied" {
			return r.Applied, true
		}
	}
	return Applied{}, false
}

// Server is a running `warren serve`.
type Server struct {
	Addr   string // as it printed: tcp://host:port
	cmd    *exec.Cmd
	stderr testutil.SyncBuffer
	done   chan struct{}
	err    error
}

// Stderr returns what the server wrote on stderr so far.
func (s *Server) Stderr() string { return s.stderr.String() }

// Start runs prefix, bin, "serve", "--log-format", "json", args... and
// waits for "listening on ADDR". The process is killed at the end of the
// test if it still runs.
func Start(t testing.TB, prefix []string, bin string, args ...string) *Server {
	t.Helper()
	argv := append(append(append([]string{}, prefix...), bin, "serve", "--log-format", "json"), args...)
	s := &Server{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.done:
		default:
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	select {
	case l, ok := <-lines:
		if a, found := strings.CutPrefix(l, "listening on "); ok && found {
			s.Addr = a
			return s
		}
		<-s.done
		t.Fatalf("%s: printed %q, not \"listening on ADDR\"; stderr:\n%s", s.cmd, l, s.Stderr())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not listening after 20 s; stderr:\n%s", s.cmd, s.Stderr())
	}
	return nil
}

// HostPort returns the server's address without its scheme.
func (s *Server) HostPort() string { return strings.TrimPrefix(s.Addr, "tcp://") }

// CheckSum fails the test unless every server applied some calls and their
// sums add up to want, the increments callers saw succeed. It logs each.
func CheckSum(t testing.TB, applied []Applied, want int64) {
	t.Helper()
	var sum int64
	for i, a := range applied {
		t.Logf("w%d applied %d increments", i+1, a.Sum)
		if a.Calls == 0 {
			t.Errorf("w%d got no call: the calls were not spread", i+1)
		}
		sum += a.Sum
	}
	if sum != want {
		t.Fatalf("the servers applied %d increments; %d calls succeeded", sum, want)
	}
}

// Stop sends SIGTERM, waits for the process to exit (20 s at most) and
// returns what it reported. A server that does not exit 0 or reports
// nothing is an error.
func (s *Server) Stop() (Applied, error) {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return Applied{}, fmt.Errorf("%s did not exit within 20 s of SIGTERM; stderr:\n%s", s.Addr, s.Stderr())
	}
	if s.err != nil {
		return Applied{}, fmt.Errorf("%s: %v; stderr:\n%s", s.Addr, s.err, s.Stderr())
	}
	a, ok := ParseApplied(s.Stderr())
	if !ok {
		return Applied{}, fmt.Errorf("%s exited without its \"counter increments applied\" record; stderr:\n%s", s.Addr, s.Stderr())
	}
	return a, nil
}

// Replace returns text with each pair's first string replaced by its
// second, failing the test unless each first string occurs exactly once
// (so that a configuration file and its test cannot drift apart).
func Replace(t testing.TB, text string, pairs ...[2]string) string {
	t.Helper()
	for _, p := range pairs {
		if n := strings.Count(text, p[0]); n != 1 {
			t.Fatalf("the configuration has %q %d times, want once", p[0], n)
		}
		text = strings.Replace(text, p[0], p[1], 1)
	}
	return text
}

// RequireTool returns the path of a program, skipping the test without it,
// or failing it when WARREN_REQUIRE_TOOLS is set (CI).
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("WARREN_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is required (WARREN_REQUIRE_TOOLS is set): %v", name, err)
		}
		t.Skipf("%s not installed (apt-get install %s)", name, name)
	}
	return p
}

// Proc is a load balancer (or any helper program) run in the foreground.
type Proc struct {
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan struct{}
}

// StartProc starts argv with its output collected, and stops it with
// stopSig (then SIGKILL after 10 s) at the end of the test.
func StartProc(t testing.TB, stopSig syscall.Signal, argv ...string) *Proc {
	t.Helper()
	p := &Proc{cmd: exec.Command(argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(stopSig)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// Output returns what the process wrote so far.
func (p *Proc) Output() string { return p.out.String() }

// WaitDial waits until dial succeeds (10 s at most), failing the test if
// the process exits first.
func (p *Proc) WaitDial(t testing.TB, dial func() error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if dial() == nil {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %s", p.cmd, p.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not listen after 10 s: %s", p.cmd, p.Output())
		}
	}
}

// DrainsHTTP2 reports whether s sends an HTTP/2 GOAWAY to an idle h2c
// connection when it is stopped with SIGTERM: the drain that lets an HTTP/2
// load balancer (nginx, HAProxy in mode http) tell the calls a server will
// finish from the ones it refused unprocessed. It stops s.
func (s *Server) DrainsHTTP2(t testing.TB) bool {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.HostPort(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The client preface and an empty SETTINGS frame.
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var head [9]byte
	if _, err := io.ReadFull(r, head[:]); err != nil || head[3] != 0x4 {
		t.Fatalf("%s does not answer an h2c preface with SETTINGS: % x, %v", s.Addr, head, err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := io.CopyN(io.Discard, r, int64(head[0])<<16|int64(head[1])<<8|int64(head[2])); err != nil {
			return false
		}
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return false
		}
		if head[3] == 0x7 { // GOAWAY
			return true
		}
	}
}

// Reload sends SIGHUP (nginx, HAProxy in master-worker mode: reload the
// configuration) and waits until every worker process that was running
// before has exited: from then on only the new configuration is in use.
func (p *Proc) Reload(t testing.TB) {
	t.Helper()
	old := p.children()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cur := p.children()
		left := 0
		for _, pid := range old {
			if slices.Contains(cur, pid) {
				left++
			}
		}
		if left == 0 && len(cur) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d old workers still running 20 s after SIGHUP: %s", p.cmd, left, p.Output())
		}
	}
}

func (p *Proc) children() []int { return ChildPIDs(p.cmd.Process.Pid) }

// ChildPIDs returns the processes whose parent is pid, from /proc.
func ChildPIDs(parent int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; split after it.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			kids = append(kids, pid)
		}
	}
	return kids
}

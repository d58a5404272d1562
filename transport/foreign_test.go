//go:build linux

package transport_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

const nobody = 65534

// TestForeignUID connects from a real process running as another user (uid
// and gid 65534) and checks what the server sees and decides.
func TestForeignUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as uid 65534 (CI runs as root)")
	}
	// A directory every user can enter, for the test binary and a socket.
	shared, err := os.MkdirTemp("", "warren-foreign-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(shared, "transport.test")
	if err := copyFile(os.Args[0], exe, 0o755); err != nil {
		t.Fatal(err)
	}

	allowNobody := peer.AnyOf(peer.SameUser(), peer.AllowUIDs(nobody))
	tests := []struct {
		name     string
		addr     string
		cfg      transport.ListenConfig
		want     string // the helper's verdict
		accepted bool
	}{
		{"default policy rejects", abstractAddr(t), transport.ListenConfig{}, "closed", false},
		{"allowed uid", abstractAddr(t), transport.ListenConfig{Policy: allowNobody}, "echo hello", true},
		{"allowed uid, socket file 0666", "unix://" + filepath.Join(shared, "open.sock"),
			transport.ListenConfig{Mode: 0o666, Policy: allowNobody}, "echo hello", true},
		{"socket file 0600 keeps others out", "unix://" + filepath.Join(shared, "closed.sock"),
			transport.ListenConfig{Policy: peer.AllowAll()}, "dial error", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log syncBuffer
			tt.cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
			l := listen(t, tt.addr, &tt.cfg)
			report := make(chan served, 1)
			serveEcho(t, l, report)

			verdict, pid := runHelper(t, exe, tt.addr)
			if !strings.HasPrefix(verdict, tt.want) {
				t.Fatalf("helper: %q, want %q", verdict, tt.want)
			}
			stats := l.Stats()
			if !tt.accepted {
				if stats.Accepted != 0 {
					t.Errorf("Stats = %+v, want nothing accepted", stats)
				}
				if tt.want == "closed" {
					if stats.Rejected != 1 {
						t.Errorf("Stats = %+v, want 1 rejected", stats)
					}
					for _, want := range []string{"peer rejected", "uid=65534", "gid=65534", "pid=" + strconv.Itoa(pid)} {
						if !strings.Contains(log.String(), want) {
							t.Errorf("log %q does not contain %q", log.String(), want)
						}
					}
				}
				return
			}
			if stats != (transport.Stats{Accepted: 1}) {
				t.Errorf("Stats = %+v, want 1 accepted", stats)
			}
			s := receive(t, report)
			if p := s.peer; !p.HasCred || p.UID != nobody || p.GID != nobody || p.PID != pid {
				t.Errorf("server saw %v, want uid and gid %d, pid %d", p, nobody, pid)
			}
		})
	}
}

// runHelper runs TestHelperProcess as uid and gid 65534 against addr and
// returns its verdict and its pid.
func runHelper(t *testing.T, exe, addr string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Dir = filepath.Dir(exe)
	// GORACE: a race-enabled binary otherwise sleeps a second at exit.
	cmd.Env = append(os.Environ(), "WARREN_TEST_HELPER_ADDR="+addr, "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var verdict string
	uid := -1
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "helper: "); ok {
			verdict = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "helper uid: "); ok {
			uid, _ = strconv.Atoi(v)
		}
	}
	if uid != nobody {
		t.Fatalf("helper ran as uid %d, want %d; output:\n%s", uid, nobody, out)
	}
	return verdict, cmd.Process.Pid
}

// TestHelperProcess is the client half of TestForeignUID, run in a child
// process. It connects to the address it is given, sends "hello\n" and
// prints what became of it.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv("WARREN_TEST_HELPER_ADDR")
	if addr == "" {
		t.Skip("run by TestForeignUID")
	}
	fmt.Printf("helper uid: %d\n", os.Getuid())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := transport.Dial(ctx, addr, nil)
	if err != nil {
		fmt.Printf("helper: dial error: %v\n", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, werr := io.WriteString(c, "hello\n")
	buf := make([]byte, len("hello\n"))
	_, rerr := io.ReadFull(c, buf)
	switch {
	case rerr == nil:
		fmt.Printf("helper: echo %s", buf)
	case werr != nil || errors.Is(rerr, io.EOF) || errors.Is(rerr, syscall.ECONNRESET):
		fmt.Printf("helper: closed (%v, %v)\n", werr, rerr)
	default:
		fmt.Printf("helper: read error: %v\n", rerr)
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

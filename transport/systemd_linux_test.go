package transport_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/transport"
)

func TestParseSystemdAddr(t *testing.T) {
	for in, name := range map[string]string{"systemd:": "", "systemd:api": "api", "systemd:warren.socket": "warren.socket"} {
		a, err := transport.ParseAddr(in)
		if err != nil || a.Scheme != transport.SchemeSystemd || a.Address != name || a.String() != in {
			t.Errorf("ParseAddr(%q) = %+v, %v", in, a, err)
		}
	}
	for _, in := range []string{"systemd:a:b", "systemd://api", "systemd:a/b", "systemd:" + strings.Repeat("a", 256)} {
		if _, err := transport.ParseAddr(in); err == nil {
			t.Errorf("ParseAddr(%q) succeeded", in)
		}
	}
	if _, err := transport.Dial(context.Background(), "systemd:", nil); err == nil || !strings.Contains(err.Error(), "dial the socket's own address") {
		t.Errorf("Dial(systemd:) = %v", err)
	}
}

// TestListenSystemd passes a unix and a tcp listening socket to a child
// process as systemd does (descriptors 3 and 4, LISTEN_FDS, LISTEN_PID,
// LISTEN_FDNAMES), which listens on them by name (TestSystemdChild).
func TestListenSystemd(t *testing.T) {
	if _, err := transport.Listen("systemd:", nil); err == nil || !strings.Contains(err.Error(), "LISTEN_FDS is not set") {
		t.Fatalf("Listen(systemd:) without sockets: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "api.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	if err := os.Chmod(path, 0o660); err != nil {
		t.Fatal(err)
	}
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	uf, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	tf, err := tl.File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSystemdChild$", "-test.v")
	cmd.ExtraFiles = []*os.File{uf, tf}
	cmd.Env = append(os.Environ(), "WARREN_SYSTEMD_CHILD=1", "LISTEN_FDS=2", "LISTEN_FDNAMES=api:metrics",
		"WANT_UNIX=unix://"+path, "WANT_TCP=tcp://"+tl.Addr().String())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestSystemdChild") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the unit's socket file after the child: %v, %v", fi, err)
	}
}

// TestSystemdChild is the child of TestListenSystemd.
func TestSystemdChild(t *testing.T) {
	if os.Getenv("WARREN_SYSTEMD_CHILD") == "" {
		t.Skip("the child process of TestListenSystemd")
	}
	// systemd sets LISTEN_PID after fork; the parent cannot know it.
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))

	tl := listen(t, "systemd:metrics", nil)
	if got := tl.Endpoint().String(); got != os.Getenv("WANT_TCP") {
		t.Errorf("systemd:metrics endpoint %s, want %s", got, os.Getenv("WANT_TCP"))
	}
	ul := listen(t, "systemd:", &transport.ListenConfig{Mode: 0o600}) // the first socket; Mode is the unit's
	want := os.Getenv("WANT_UNIX")
	if got := ul.Endpoint().String(); got != want {
		t.Fatalf("systemd: endpoint %s, want %s", got, want)
	}
	if _, err := transport.Listen("systemd:api", nil); err == nil || !strings.Contains(err.Error(), "already listened on") {
		t.Errorf("second Listen(systemd:api): %v", err)
	}
	if _, err := transport.Listen("systemd:nope", nil); err == nil || !strings.Contains(err.Error(), `the names are "api", "metrics"`) {
		t.Errorf("Listen(systemd:nope): %v", err)
	}
	if v := os.Getenv("LISTEN_FDS"); v != "" {
		t.Errorf("LISTEN_FDS=%s left for child processes", v)
	}

	// The policy (peer.SameUser by default for unix) sees kernel credentials.
	report := make(chan served, 1)
	serveEcho(t, ul, report)
	c := dial(t, want, nil)
	echo(t, c, "hello")
	c.Close()
	if s := receive(t, report); s.err != nil || s.peer == nil || s.peer.UID != os.Geteuid() {
		t.Fatalf("served %+v", s)
	}
	ul.Close()
	tl.Close()
	if _, err := os.Stat(strings.TrimPrefix(want, "unix://")); err != nil {
		t.Fatalf("Close removed the unit's socket file: %v", err)
	}
}

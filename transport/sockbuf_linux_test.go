package transport_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/transport"
)

// sendBuffer returns c's SO_SNDBUF as the kernel reports it.
func sendBuffer(t *testing.T, c net.Conn) int {
	t.Helper()
	sc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var serr error
	if err := sc.Control(func(fd uintptr) { n, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return n
}

// sysctl reads an integer from /proc/sys.
func sysctl(t *testing.T, name string) int {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		t.Skipf("cannot read %s: %v", name, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}

// Both ends of a unix-socket connection get a send buffer of 1 MiB (which
// the kernel doubles), or as much as net.core.wmem_max allows; TCP keeps the
// kernel's sizing.
func TestUnixSendBuffer(t *testing.T) {
	want := 2 * min(1<<20, sysctl(t, "net.core.wmem_max"))
	if def := sysctl(t, "net.core.wmem_default"); want <= def {
		t.Skipf("net.core.wmem_max allows no more than the default %d", def)
	}
	addr := "unix://" + filepath.Join(t.TempDir(), "app.sock")
	l := listen(t, addr, nil)
	accepted := make(chan *transport.Conn, 1)
	go func() {
		c, err := l.AcceptConn()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c := dial(t, addr, nil)
	s := <-accepted
	if s == nil {
		return
	}
	defer s.Close()
	if got := sendBuffer(t, c.NetConn()); got != want {
		t.Errorf("client SO_SNDBUF = %d, want %d", got, want)
	}
	if got := sendBuffer(t, s.NetConn()); got != want {
		t.Errorf("server SO_SNDBUF = %d, want %d", got, want)
	}

	tl := listen(t, "tcp://127.0.0.1:0", nil)
	serveEcho(t, tl, nil)
	tc := dial(t, "tcp://"+tl.Addr().String(), nil)
	echo(t, tc, "autotuned")
	if got := sendBuffer(t, tc.NetConn()); got == 2*(1<<20) {
		t.Errorf("tcp SO_SNDBUF = %d: set by the transport", got)
	}
}

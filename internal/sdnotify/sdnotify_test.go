package sdnotify

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listenNotify listens on a notification socket and points NOTIFY_SOCKET at it.
func listenNotify(t *testing.T) *net.UnixConn {
	dir, err := os.MkdirTemp("", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if ok, err := Notify("READY=1"); ok || err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %v %v", ok, err)
	}
	c := listenNotify(t)
	if ok, err := Notify("READY=1\nSTATUS=serving"); !ok || err != nil {
		t.Fatalf("Notify: %v %v", ok, err)
	}
	if got := read(t, c); got != "READY=1\nSTATUS=serving" {
		t.Errorf("got %q", got)
	}
	t.Setenv("NOTIFY_SOCKET", "relative")
	if _, err := Notify("READY=1"); err == nil {
		t.Error("a relative NOTIFY_SOCKET was accepted")
	}
}

func TestWatchdog(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "")
	if d := WatchdogInterval(); d != 0 {
		t.Fatalf("unset: %v", d)
	}
	t.Setenv("WATCHDOG_USEC", "40000")
	t.Setenv("WATCHDOG_PID", "1")
	if d := WatchdogInterval(); d != 0 && os.Getpid() != 1 {
		t.Fatalf("another process's watchdog: %v", d)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if d := WatchdogInterval(); d != 20*time.Millisecond {
		t.Fatalf("interval %v", d)
	}
	c := listenNotify(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Watchdog(ctx); close(done) }()
	for range 2 {
		if got := read(t, c); got != "WATCHDOG=1" {
			t.Errorf("got %q", got)
		}
	}
	cancel()
	<-done
}

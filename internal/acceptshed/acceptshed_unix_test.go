//go:build unix

package acceptshed

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShedOutOfDescriptors: with every descriptor of the process taken,
// accept fails with EMFILE, and Shed takes the pending connection and
// closes it; the reserve is held again afterwards.
func TestShedOutOfDescriptors(t *testing.T) {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := New()
	defer s.Close()
	if s.fd < 0 {
		t.Fatal("no reserve descriptor")
	}

	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	var filler []int
	func() {
		// Take every descriptor under a low limit, then put the limit back.
		low := old
		low.Cur = 64
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Skip("setrlimit:", err)
		}
		defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
		for {
			fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				break
			}
			filler = append(filler, fd)
		}
		defer func() {
			for _, fd := range filler {
				syscall.Close(fd)
			}
		}()
		_, err := l.Accept()
		if !OutOfDescriptors(err) {
			t.Fatalf("accept with no descriptor free: %v", err)
		}
		if !s.ShedListener(l) {
			t.Fatal("no shed")
		}
		if s.fd < 0 {
			t.Fatal("reserve not taken again")
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the pending connection was not closed: %v", err)
	}
	if s.Sheds() != 1 {
		t.Fatalf("%d sheds", s.Sheds())
	}
}

// TestLogInterval: accept errors are logged once per interval, the next
// line counting those left out.
func TestLogInterval(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	s := &Shedder{fd: -1, interval: 50 * time.Millisecond}
	for range 100 {
		s.Log(logger, syscall.EMFILE, 0)
	}
	time.Sleep(60 * time.Millisecond)
	s.Log(logger, syscall.EMFILE, 0)
	out := buf.String()
	if n := strings.Count(out, "accept error"); n != 2 || !strings.Contains(out, "more=99") {
		t.Fatalf("%d lines:\n%s", n, out)
	}
}

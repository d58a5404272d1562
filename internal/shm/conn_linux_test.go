package shm

import (
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func fdCount(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "s")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conn(p[0]), conn(p[1])
}

func nulls(t *testing.T, n int) []int {
	var fds []int
	for range n {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	return fds
}

func TestConnQueueAndTake(t *testing.T) {
	before := fdCount(t)
	a, b := pair(t)
	c := Wrap(b, 2, 3)
	w := Wrap(a, 2, 3)
	fds := nulls(t, 2)
	if _, err := w.WriteFiles([]byte("ab"), fds); err != nil {
		t.Fatal(err)
	}
	CloseAll(fds)
	buf := make([]byte, 8)
	if n, err := c.Read(buf); err != nil || n != 2 {
		t.Fatal(n, err)
	}
	got, err := c.Take(2)
	if err != nil || len(got) != 2 {
		t.Fatal(got, err)
	}
	if fl, _ := unix.FcntlInt(uintptr(got[0]), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
		t.Error("received descriptor without close-on-exec")
	}
	CloseAll(got)
	if _, err := c.Take(1); !errors.Is(err, ErrDescriptors) {
		t.Fatalf("Take of none queued: %v", err)
	}
	// Over the in-flight limit (3): the read fails and all are closed.
	for range 2 {
		fds := nulls(t, 2)
		if _, err := w.WriteFiles([]byte("x"), fds); err != nil {
			t.Fatal(err)
		}
		CloseAll(fds)
	}
	var rerr error
	for range 2 {
		if _, rerr = c.Read(buf); rerr != nil {
			break
		}
	}
	if !errors.Is(rerr, ErrDescriptors) {
		t.Fatalf("over the limit: %v", rerr)
	}
	if _, err := c.Read(buf); !errors.Is(err, ErrDescriptors) {
		t.Fatalf("read after the limit: %v", err)
	}
	c.Close()
	w.Close()
	if after := fdCount(t); after != before {
		t.Fatalf("descriptors: %d before, %d after", before, after)
	}
}

func TestConnTruncated(t *testing.T) {
	before := fdCount(t)
	a, b := pair(t)
	c := Wrap(b, 1, 100) // room for a few per read
	fds := nulls(t, 40)
	if _, _, err := a.WriteMsgUnix([]byte("x"), unix.UnixRights(fds...), nil); err != nil {
		t.Fatal(err)
	}
	CloseAll(fds)
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, ErrDescriptors) {
		t.Fatalf("truncated control message: %v", err)
	}
	c.Close()
	a.Close()
	if after := fdCount(t); after != before {
		t.Fatalf("descriptors: %d before, %d after", before, after)
	}
}

func TestMapRefuses(t *testing.T) {
	fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	unix.Ftruncate(fd, 4096)
	if _, err := Map(fd, 4096, false); !errors.Is(err, ErrRefused) {
		t.Fatalf("unsealed: %v", err)
	}
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals)
	if _, err := Map(fd, 8192, false); !errors.Is(err, ErrRefused) {
		t.Fatalf("size: %v", err)
	}
	m, err := Map(fd, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	Unmap(m)
}

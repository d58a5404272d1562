//go:build linux

package idle

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/wire"
)

// serveBare is the "bare" mode: a minimal epoll loop that accepts, reads a
// client's 6-byte preface, answers with its own and keeps the descriptor in
// a slice (4 bytes a connection), and closes a connection that hangs up.
// It is the floor against which the warren modes are measured.
func serveBare(network, dir string, in io.Reader, out io.Writer) error {
	var ln net.Listener
	var err error
	if network == "unix" {
		ln, err = net.Listen("unix", filepath.Join(dir, "idle.sock"))
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return err
	}
	defer ln.Close()
	rc, err := ln.(interface {
		SyscallConn() (syscall.RawConn, error)
	}).SyscallConn()
	if err != nil {
		return err
	}
	var lfd int
	rc.Control(func(fd uintptr) { lfd, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)})
	var conns atomic.Int64
	go func() {
		var fds []int32 // the connections, by descriptor: 1 if open
		evs := make([]unix.EpollEvent, 256)
		var buf [64]byte
		pre := wire.AppendPreface(nil, wire.Settings{})
		for {
			n, err := unix.EpollWait(ep, evs, -1)
			if err != nil {
				continue
			}
			for _, ev := range evs[:n] {
				fd := int(ev.Fd)
				if fd == lfd {
					for {
						nfd, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
						if err != nil {
							break
						}
						for len(fds) <= nfd {
							fds = append(fds, 0)
						}
						fds[nfd] = 1
						conns.Add(1)
						unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, nfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(nfd)})
					}
					continue
				}
				k, err := unix.Read(fd, buf[:])
				if err == unix.EAGAIN {
					continue
				}
				if k <= 0 {
					unix.Close(fd)
					fds[fd] = 0
					conns.Add(-1)
					continue
				}
				unix.Write(fd, pre)
			}
		}
	}()
	fmt.Fprintf(out, "ready %s\n", ln.Addr())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "rss" {
			return fmt.Errorf("unknown command %q", sc.Text())
		}
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(out, "rss %d %d %d %d %d\n", residentBytes(), ms.HeapInuse, ms.StackInuse, runtime.NumGoroutine(), conns.Load())
	}
	return sc.Err()
}

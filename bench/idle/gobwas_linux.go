//go:build linux

package idle

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"golang.org/x/sys/unix"
)

// serveGobwasEpoll is the system "gobwas-epoll": the WebSocket server of
// "Going Infinite, handling 1M websockets connections in Go" (E. Yanay,
// Gophercon Israel 2019). One goroutine accepts TCP connections and
// upgrades each with ws.Upgrade, keeps the net.Conn in a map by its
// descriptor and adds the descriptor to an epoll set; another waits on the
// set and, for each connection with something to read, reads one message
// with wsutil.ReadClientData and echoes it with wsutil.WriteServerMessage,
// or closes the connection when it has ended. An idle connection holds no
// goroutine and no buffer: its net.Conn (which the Go runtime's own poller
// also watches), its map entry and its epoll item.
func serveGobwasEpoll(in io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(ep)
	var (
		mu    sync.Mutex
		conns = map[int]net.Conn{}
		count atomic.Int64
	)
	remove := func(fd int, conn net.Conn) {
		unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
		mu.Lock()
		delete(conns, fd)
		mu.Unlock()
		conn.Close()
		count.Add(-1)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if _, err := ws.Upgrade(conn); err != nil {
				conn.Close()
				continue
			}
			fd := socketFD(conn)
			if fd < 0 {
				conn.Close()
				continue
			}
			mu.Lock()
			conns[fd] = conn
			mu.Unlock()
			count.Add(1)
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLHUP | unix.EPOLLRDHUP, Fd: int32(fd)}
			if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
				remove(fd, conn)
			}
		}
	}()
	go func() {
		evs := make([]unix.EpollEvent, 128)
		for {
			n, err := unix.EpollWait(ep, evs, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return // ep closed: the child is exiting
			}
			for _, ev := range evs[:n] {
				fd := int(ev.Fd)
				mu.Lock()
				conn := conns[fd]
				mu.Unlock()
				if conn == nil {
					continue
				}
				msg, op, err := wsutil.ReadClientData(conn)
				if err == nil {
					err = wsutil.WriteServerMessage(conn, op, msg)
				}
				if err != nil {
					remove(fd, conn)
				}
			}
		}
	}()
	fmt.Fprintf(out, "ready %s\n", ln.Addr())
	return AnswerStats(in, out, count.Load)
}

// socketFD returns conn's descriptor, or -1.
func socketFD(conn net.Conn) int {
	sc, ok := conn.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return -1
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	rc.Control(func(s uintptr) { fd = int(s) })
	return fd
}

//go:build linux

package eventloop

import (
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/internal/shm"
)

// Descriptors and shared messages on the event loop. A loop serving a
// plain unix listener announces the server's Settings.MaxFiles in its
// preface, as the goroutine mode does, and then reads every connection
// with recvmsg (MSG_CMSG_CLOEXEC) into its shared buffers, with one
// control buffer for the loop. The descriptors a read brings are queued
// in the connection's shm.Queue (activeConn.files), with the same limits
// as in goroutine mode: a truncated control message or more descriptors
// than the queue holds is a connection error and closes every one that
// arrived. The fed session takes them from the queue as frames name
// them (mux.Config.FedFiles), and sends descriptors with fedConn's
// WriteFiles. A connection with descriptors queued and no frame naming
// them yet does not hibernate; the queue, and what it holds, goes with
// the activeConn.

// loopFiles is an event loop's state for descriptors.
type loopFiles struct {
	per int    // MaxFiles announced; 0: the loop takes no descriptors
	oob []byte // the control buffer of every read
	msg unix.Msghdr
	iov unix.Iovec
}

// loopMaxFiles is the MaxFiles a loop serving ls announces: the server's,
// on a plain unix listener (not ws://); none elsewhere.
func loopMaxFiles(ls *loopListener, maxFiles uint32) uint32 {
	if !ls.unix || ls.ws {
		return 0
	}
	return maxFiles
}

// initFiles prepares the loop to receive descriptors if its preface
// announces them.
func (l *evLoop) initFiles() {
	f := &l.files
	f.per = int(l.local.MaxFiles)
	if f.per == 0 {
		return
	}
	f.oob = make([]byte, shm.OOBSize(f.per))
}

// filesConfig gives a session of rec the connection's descriptor queue
// and the server's shared-message settings.
func (l *evLoop) filesConfig(rec *loopConn, cfg *mux.Config) {
	cfg.SharedMin, cfg.MaxShared = l.opts.SharedMin, l.opts.MaxShared
	if l.files.per == 0 || rec.flags&flWS != 0 {
		return
	}
	a := rec.act
	if a.files == nil {
		a.files = mux.NewFileQueue(l.files.per)
	}
	cfg.FedFiles = a.files
}

// readSock reads rec's socket into b (not empty): with read(2), or, where
// descriptors are announced, with recvmsg, queueing the descriptors that
// came. A read whose descriptors break a limit fails, every one of them
// closed.
func (l *evLoop) readSock(rec *loopConn, b []byte) (int, error) {
	f := &l.files
	if f.per == 0 {
		return syscall.Read(rec.fd(), b)
	}
	f.iov.Base = unsafe.SliceData(b)
	f.iov.SetLen(len(b))
	f.msg.Iov = &f.iov
	f.msg.SetIovlen(1)
	defer func() { f.iov.Base, f.msg.Iov = nil, nil }() // keep no reference to b
	for {
		f.msg.Control, f.msg.Controllen = &f.oob[0], uint64(len(f.oob))
		f.msg.Flags = 0
		n, _, e := syscall.Syscall(unix.SYS_RECVMSG, uintptr(rec.fd()), uintptr(unsafe.Pointer(&f.msg)), unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		default:
			return 0, e
		}
		raceAcquireIO()
		if f.msg.Controllen > 0 || f.msg.Flags&unix.MSG_CTRUNC != 0 {
			if err := l.queueFiles(rec, f.oob[:f.msg.Controllen], int(f.msg.Flags)); err != nil {
				return 0, err
			}
		}
		return int(n), nil
	}
}

// queueFiles queues the descriptors of a read of rec's connection. A
// hibernating connection becomes active (without a session yet), so that
// they have a queue to wait in.
func (l *evLoop) queueFiles(rec *loopConn, oob []byte, flags int) error {
	a := rec.act
	if a == nil {
		a = &activeConn{since: l.now, lastIO: l.now}
		l.addActive(rec, a)
	}
	if a.files == nil {
		a.files = mux.NewFileQueue(l.files.per)
	}
	return a.files.Add(oob, flags)
}

// filesWaiting reports whether descriptors wait in a's queue for a frame
// naming them: the connection must not hibernate, which would drop them.
func filesWaiting(a *activeConn) bool { return a.files != nil && a.files.Queued() > 0 }

// closeFiles closes the descriptors no frame of a took.
func closeFiles(a *activeConn) {
	if a.files != nil {
		a.files.Close()
		a.files = nil
	}
}

var _ mux.FedFilesConn = (*fedConn)(nil)

// WriteFiles writes b with fds attached to its first byte, in one
// non-blocking sendmsg (see mux.FedFilesConn). What the socket does not
// take is reported with mux.ErrWouldBlock.
func (c *fedConn) WriteFiles(b []byte, fds []int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.fr != nil {
		return 0, mux.ErrNoFiles
	}
	oob := unix.UnixRights(fds...)
	raceReleaseIO()
	for {
		n, err := unix.SendmsgN(c.fd, b, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		switch err {
		case nil:
			if n < len(b) {
				return n, mux.ErrWouldBlock
			}
			return n, nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, mux.ErrWouldBlock
		}
		return 0, c.writeError(err)
	}
}

// The loop reads and writes with syscall.Read and Write so that the race
// detector sees a write to a socket happen before the read of its bytes
// (see loop_linux.go). recvmsg and sendmsg tell it nothing: under
// the race detector, raceReleaseIO and raceAcquireIO give it the same
// edges through zero-length calls of those functions (on /dev/null, since
// a zero-length read of the socket could take its descriptors).
// The descriptor is opened once, with the package.
var devNull = func() int {
	if !rawio.RaceEnabled {
		return -1
	}
	fd, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}()

func raceReleaseIO() {
	if rawio.RaceEnabled {
		syscall.Write(devNull, nil)
	}
}

func raceAcquireIO() {
	if rawio.RaceEnabled {
		syscall.Read(devNull, nil)
	}
}

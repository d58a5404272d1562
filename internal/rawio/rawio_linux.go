package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// IO reads and writes a unix or tcp socket with raw system calls
// (syscall.RawSyscall) inside the runtime poller's RawConn callbacks,
// instead of the ordinary syscall.Read and Write.
//
// The calls are recvfrom, sendto and sendmsg with MSG_DONTWAIT, so they
// never block, even if something has put the socket in blocking mode (as
// os.File.Fd does to a File's descriptor, which shares the socket's flags):
// a raw call that blocked would hold its P. They return EAGAIN instead, and
// the RawConn then waits for the poller exactly as Read and Write do, with
// the same deadlines and the same handling of Close. MSG_NOSIGNAL makes a
// write to a closed peer fail with EPIPE and no SIGPIPE, which is what Go
// programs get for sockets anyway. What
// the raw call saves is the scheduler's bookkeeping around a system call,
// and above all its side effect: entering a system call while every P is
// idle wakes the runtime's monitor thread (sysmon), which then polls every
// 20µs for a while. Two processes exchanging requests and replies in
// turns go idle and wake up thousands of times a second, and each time the
// first read or write woke sysmon: measured, that was a tenth of a
// client's CPU time.
//
// Under the race detector the ordinary calls are used (New returns
// nil): they tell it that a write to a socket happens before the read of
// the same bytes.
type IO struct {
	rc  syscall.RawConn
	net string // "unix" or "tcp", for errors
	c   net.Conn

	rmu  sync.Mutex // one Read at a time; protects the following
	rfn  func(fd uintptr) bool
	rb   []byte
	rn   int
	rerr syscall.Errno

	wmu  sync.Mutex // one Write or WriteBuffers at a time; protects the following
	wfn  func(fd uintptr) bool
	wb   []byte
	wn   int
	werr syscall.Errno
	wvfn func(fd uintptr) bool
	wv   *net.Buffers
	wvn  int64
	iov  [8]unix.Iovec
	msg  unix.Msghdr
}

// sendFlags are the flags of every raw send.
const sendFlags = syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL

func New(c net.Conn) *IO {
	if RaceEnabled {
		return nil
	}
	return For(c)
}

// For is New under the race detector too, for tests; nil if c is
// not a unix or tcp connection.
func For(c net.Conn) *IO {
	var netw string
	var sc syscall.Conn
	switch c := c.(type) {
	case *net.UnixConn:
		netw, sc = "unix", c
	case *net.TCPConn:
		netw, sc = "tcp", c
	default:
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &IO{rc: rc, net: netw, c: c}
	r.rfn = r.readFd
	r.wfn = r.writeFd
	r.wvfn = r.writevFd
	return r
}

// readFd is the RawConn.Read callback: false asks the poller to wait.
func (r *IO) readFd(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(r.rb))), uintptr(len(r.rb)), syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			r.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.rerr = e
		return true
	}
}

// writeFd is the RawConn.Write callback: it writes until r.wb is written,
// returning false to wait for room.
func (r *IO) writeFd(fd uintptr) bool {
	for r.wn < len(r.wb) {
		p := r.wb[r.wn:]
		n, _, e := syscall.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), sendFlags, 0, 0)
		switch e {
		case 0:
			r.wn += int(n)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.werr = e
		return true
	}
	return true
}

// writevFd is the RawConn.Write callback of WriteBuffers: it writes the
// buffers of r.wv with sendmsg (writev with flags), consuming them, until
// none is left.
func (r *IO) writevFd(fd uintptr) bool {
	for {
		iov := r.iov[:0]
		for _, b := range *r.wv {
			if len(b) == 0 {
				continue
			}
			var v unix.Iovec
			v.Base = unsafe.SliceData(b)
			v.SetLen(len(b))
			iov = append(iov, v)
			if len(iov) == cap(iov) {
				break
			}
		}
		if len(iov) == 0 {
			*r.wv = (*r.wv)[:0]
			return true
		}
		r.msg.Iov = &iov[0]
		r.msg.SetIovlen(len(iov))
		n, _, e := syscall.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&r.msg)), sendFlags)
		clear(iov) // keep no reference to the caller's memory
		r.msg.Iov = nil
		switch e {
		case 0:
			r.wvn += int64(n)
			consume(r.wv, int64(n))
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.werr = e
		return true
	}
}

// consume drops the first n bytes of v's buffers, as net.Buffers.WriteTo
// does with what it wrote.
func consume(v *net.Buffers, n int64) {
	for len(*v) > 0 {
		l := int64(len((*v)[0]))
		if l > n {
			(*v)[0] = (*v)[0][n:]
			return
		}
		n -= l
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}

// WriteBuffers writes v's buffers with writev, consuming them, as
// net.Buffers.WriteTo does.
func (r *IO) WriteBuffers(v *net.Buffers) (int64, error) {
	r.wmu.Lock()
	r.wv, r.wvn, r.werr = v, 0, 0
	err := r.rc.Write(r.wvfn)
	n, errno := r.wvn, r.werr
	r.wv = nil
	r.wmu.Unlock()
	return n, r.result("writev", err, errno)
}

func (r *IO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r.rmu.Lock()
	r.rb, r.rn, r.rerr = b, 0, 0
	err := r.rc.Read(r.rfn)
	n, errno := r.rn, r.rerr
	r.rb = nil
	r.rmu.Unlock()
	if err := r.result("read", err, errno); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *IO) Write(b []byte) (int, error) {
	r.wmu.Lock()
	r.wb, r.wn, r.werr = b, 0, 0
	err := r.rc.Write(r.wfn)
	n, errno := r.wn, r.werr
	r.wb = nil
	r.wmu.Unlock()
	return n, r.result("write", err, errno)
}

// result is the error of a raw op: the RawConn's (a deadline, Close) or
// the system call's, wrapped as the net package wraps them; nil if
// neither failed.
func (r *IO) result(op string, err error, errno syscall.Errno) error {
	switch {
	case err != nil:
		return r.opError(op, err)
	case errno != 0:
		return r.opError(op, os.NewSyscallError(op, errno))
	}
	return nil
}

// opError wraps err as the net package does for Read and Write, unwrapping
// the RawConn's own *net.OpError first.
func (r *IO) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: r.net, Source: r.c.LocalAddr(), Addr: r.c.RemoteAddr(), Err: err}
}

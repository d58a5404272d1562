package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/warrenipc/warren/internal/rawio"
	"golang.org/x/sys/unix"
)

// ErrDescriptors is wrapped by the errors of a Conn about descriptors the
// peer sent: too many waiting, a truncated control message, a frame
// naming more than arrived.
var ErrDescriptors = errors.New("warren: descriptors")

// Queue holds, in order, the descriptors a connection received and no
// frame took yet: Add queues those of a read's control messages, Take
// hands them out. A read breaking a limit fails the queue for good, and
// every descriptor it held or that arrived is closed.
type Queue struct {
	max  int // descriptors received and not taken, at most
	room int // descriptors one read's control buffer holds

	mu     sync.Mutex // protects following
	q      []int
	err    error // sticky: the peer broke a limit
	closed bool
}

// OOBSize is the size of a control buffer for reads of a connection whose
// frames carry at most perRead descriptors: room for perRead descriptors
// per control message and a few control messages per read (one per write
// of the peer it spans).
func OOBSize(perRead int) int { return unix.CmsgSpace(4*perRead) * 4 }

// NewQueue returns a queue holding at most max descriptors, for a
// connection whose frames carry at most perRead.
func NewQueue(perRead, max int) *Queue {
	return &Queue{max: max, room: OOBSize(perRead) / 4}
}

// Conn is a unix-socket connection that receives the descriptors sent
// with its bytes (SCM_RIGHTS, with MSG_CMSG_CLOEXEC) into a Queue, in
// order, and sends descriptors with the bytes of a write (WriteFiles).
// Frames name the descriptors they carry; Take hands them out.
//
// The embedded net.Conn is the connection Conn wraps: writes without
// descriptors, deadlines and the addresses go to it.
type Conn struct {
	net.Conn
	*Queue
	uc *net.UnixConn

	rmu sync.Mutex // one Read at a time; protects the following
	oob []byte
	rc  syscall.RawConn // nil: ReadMsgUnix (under the race detector)
	rfn func(fd uintptr) bool
	msg unix.Msghdr
	iov unix.Iovec
	rn  int // bytes of the last raw read
	on  int // control bytes of the last raw read
	rfl int // flags of the last raw read
	re  syscall.Errno
}

// Wrap returns c as a *Conn if c is a plain unix-socket connection (no
// TLS or WebSocket over it), and nil otherwise. perRead is the most
// descriptors one frame may carry; max the most the queue holds.
func Wrap(c net.Conn, perRead, max int) *Conn {
	uc := unixOf(c)
	if uc == nil {
		return nil
	}
	fc := &Conn{Conn: c, Queue: NewQueue(perRead, max), uc: uc, oob: make([]byte, OOBSize(perRead))}
	if !rawio.RaceEnabled {
		if rc, err := uc.SyscallConn(); err == nil {
			fc.rc, fc.rfn = rc, fc.readFd
		}
	}
	return fc
}

// readFd is the RawConn.Read callback: one recvmsg with MSG_DONTWAIT (a
// raw system call, as rawio reads: see rawio.IO), into c.iov and c.oob;
// false asks the poller to wait. ReadMsgUnix would allocate the sender's
// address on every read.
func (c *Conn) readFd(fd uintptr) bool {
	for {
		c.msg.Control, c.msg.Controllen = &c.oob[0], uint64(len(c.oob))
		c.msg.Flags = 0
		n, _, e := syscall.RawSyscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&c.msg)), unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
		switch e {
		case 0:
			c.rn, c.on, c.rfl = int(n), int(c.msg.Controllen), int(c.msg.Flags)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.re = e
		return true
	}
}

// readMsg reads bytes into b and control messages into c.oob.
func (c *Conn) readMsg(b []byte) (n, oobn, flags int, err error) {
	if c.rc == nil {
		n, oobn, flags, _, err = c.uc.ReadMsgUnix(b, c.oob)
		return n, oobn, flags, err
	}
	c.iov.Base = unsafe.SliceData(b)
	c.iov.SetLen(len(b))
	c.msg.Iov = &c.iov
	c.msg.SetIovlen(1)
	c.rn, c.on, c.rfl, c.re = 0, 0, 0, 0
	err = c.rc.Read(c.rfn)
	c.iov.Base, c.msg.Iov = nil, nil // keep no reference to the caller's memory
	switch {
	case err != nil:
	case c.re != 0:
		err = os.NewSyscallError("recvmsg", c.re)
	case c.rn == 0 && len(b) > 0:
		err = io.EOF
	}
	if err != nil && err != io.EOF {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		err = &net.OpError{Op: "read", Net: "unix", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	return c.rn, c.on, c.rfl, err
}

// UnixOf returns the *net.UnixConn under c, as Wrap finds it, or nil.
func UnixOf(c net.Conn) *net.UnixConn { return unixOf(c) }

// unixOf finds the *net.UnixConn under c through connections whose reads
// are the socket's own bytes (ReadsResume: rawio.Conn, a plain
// transport.Conn).
func unixOf(c net.Conn) *net.UnixConn {
	for range 4 {
		if uc, ok := c.(*net.UnixConn); ok {
			return uc
		}
		w, ok := rawio.View(c).(interface {
			ReadsResume() bool
			NetConn() net.Conn
		})
		if !ok || !w.ReadsResume() {
			return nil
		}
		c = w.NetConn()
	}
	return nil
}

// Read reads bytes, and queues the descriptors that came with them. A
// truncated control message, or more descriptors than the queue holds,
// fails the read (and every later one); every descriptor that arrived
// is closed.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if err := c.Err(); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, nil
	}
	n, oobn, flags, err := c.readMsg(b)
	if oobn > 0 || flags&unix.MSG_CTRUNC != 0 {
		if qerr := c.Add(c.oob[:oobn], flags); qerr != nil {
			return 0, qerr
		}
	}
	return n, err
}

// Err returns the queue's sticky error: the limit the peer broke.
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Add parses the control messages of a read (oob, and the read's flags)
// and queues their descriptors. A truncated control message, or more
// descriptors than the queue holds, fails the queue: every descriptor
// it held or that arrived is closed, and the error returned.
func (q *Queue) Add(oob []byte, flags int) error {
	var fds []int
	msgs, perr := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_RIGHTS {
			got, _ := unix.ParseUnixRights(&m)
			fds = append(fds, got...)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	switch {
	case flags&unix.MSG_CTRUNC != 0:
		err = fmt.Errorf("%w: control message truncated (more descriptors in one read than %d)", ErrDescriptors, q.room)
	case perr != nil:
		err = fmt.Errorf("%w: bad control message: %v", ErrDescriptors, perr)
	case q.closed:
		err = net.ErrClosed
	case len(q.q)+len(fds) > q.max:
		err = fmt.Errorf("%w: %d received and not named by a frame, limit %d", ErrDescriptors, len(q.q)+len(fds), q.max)
	}
	if err != nil {
		CloseAll(fds)
		CloseAll(q.q)
		q.q = nil
		if q.err == nil {
			q.err = err
		}
		return err
	}
	q.q = append(q.q, fds...)
	return nil
}

// Take removes the first n queued descriptors and returns them; the caller
// owns them. Fewer than n queued is an error: the frame naming them came
// without them.
func (q *Queue) Take(n int) ([]int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) < n {
		return nil, fmt.Errorf("%w: a frame names %d, %d arrived", ErrDescriptors, n, len(q.q))
	}
	fds := make([]int, n)
	copy(fds, q.q)
	q.q = append(q.q[:0], q.q[n:]...)
	return fds, nil
}

// Queued reports how many descriptors wait to be taken.
func (q *Queue) Queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q)
}

// Close closes the descriptors no frame took; later ones are refused.
func (q *Queue) Close() {
	q.mu.Lock()
	CloseAll(q.q)
	q.q, q.closed = nil, true
	q.mu.Unlock()
}

// WriteFiles writes b with fds attached to its first byte (one sendmsg),
// then the rest of b if that sendmsg wrote part of it. The caller keeps
// fds (the peer gets duplicates).
func (c *Conn) WriteFiles(b []byte, fds []int) (int, error) {
	n, _, err := c.uc.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err != nil || n == len(b) {
		return n, err
	}
	m, err := c.Conn.Write(b[n:])
	return n + m, err
}

// WriteBuffers writes v through the wrapped connection.
func (c *Conn) WriteBuffers(v *net.Buffers) (int64, error) {
	if w, ok := rawio.View(c.Conn).(interface {
		WriteBuffers(*net.Buffers) (int64, error)
	}); ok {
		return w.WriteBuffers(v)
	}
	return v.WriteTo(c.Conn)
}

// ReadsResume reports true: a read a deadline interrupts leaves the byte
// stream, and the descriptor queue, intact.
func (c *Conn) ReadsResume() bool { return true }

// NetConn returns the wrapped connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Close closes the connection and the descriptors no frame took.
func (c *Conn) Close() error {
	c.Queue.Close()
	return c.Conn.Close()
}

package shmring

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/warrenipc/warren/internal/shm"
	"golang.org/x/sys/unix"
)

// SpinWindow is how long a side that finds its ring empty (or its peer's
// full) polls it before it sleeps: the sides of a sequence of calls keep
// polling, an idle connection sleeps after this and costs no CPU.
var SpinWindow = 100 * time.Microsecond

// A reader whose polling keeps ending in sleep stops polling: its spin
// halves each time, and under minSpin it is 0. It then polls for
// probeSpin only when the peer was awake when this side last wrote (a
// reply may come before a wake-up could), and on one read in probeEvery:
// if polling finds bytes, the spin is SpinWindow again.
const (
	minSpin    = 5 * time.Microsecond
	probeSpin  = 50 * time.Microsecond
	probeEvery = 32
)

// The longest a writer waiting for room sleeps between looks at the
// ring: a consumer wakes it through the socket only while this side
// reads the socket.
const maxRoomSleep = time.Millisecond

// The bytes of the socket once the rings carry the frames.
const (
	byteWake  = 'W' // a sleeping side is woken: look at the rings
	byteFiles = 'F' // descriptors for a frame of the rings (SCM_RIGHTS)
)

// errPeerGone is the error of a write once the peer closed the socket.
var errPeerGone = errors.New("warren: shared-memory ring: peer closed the connection")

// Conn carries a connection's bytes over the rings of a shared mapping;
// its socket carries wake-ups, descriptors and the end.
type Conn struct {
	sock net.Conn // the socket (an *shm.Conn when it takes descriptors)
	rc   syscall.RawConn
	mem  []byte // nil once closed; under rmu and wmu

	in  *Consumer
	out *Producer

	rmu     sync.Mutex // one Read at a time; protects the following
	fdsGot  uint64     // descriptor messages read from the socket
	goneErr error      // why the socket's read ended
	sbuf    [64]byte
	// spin is how long a read polls an empty ring before it sleeps:
	// SpinWindow at first and whenever polling finds bytes, halved each
	// time polling ends in sleep (see minSpin). When the two sides
	// compete for few CPUs with other processes, the peer is often not
	// running while this side polls: polling then only takes CPU time
	// the peer needs, and the connection does better sleeping at once.
	spin  time.Duration
	reads uint32 // reads while spin is 0, for the probes

	peerAwake atomic.Bool // the peer was not sleeping at this side's last write

	wmu   sync.Mutex    // one write at a time
	wwake chan struct{} // the reader read the socket, or the write deadline changed
	wdl   atomic.Int64  // write deadline in Unix nanoseconds; 0: none
	rdl   atomic.Int64  // read deadline, as wdl

	gone    atomic.Bool // the socket's read ended: the peer is gone
	closing atomic.Bool
	closed  chan struct{}
	once    sync.Once
}

// newConn returns a Conn over mem (MapLen(size) bytes), the client's side
// if client is true. It owns mem from then on.
func newConn(sock net.Conn, uc *net.UnixConn, mem []byte, size int, client bool) (*Conn, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	in, out := DirServer, DirClient
	if !client {
		in, out = DirClient, DirServer
	}
	return &Conn{
		sock: sock, rc: rc, mem: mem, spin: SpinWindow,
		in: NewConsumer(mem, size, in), out: NewProducer(mem, size, out),
		wwake: make(chan struct{}, 1), closed: make(chan struct{}),
	}, nil
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// kick wakes the peer: one byte on the socket, without waiting. A full
// socket already holds a wake-up the peer has not read.
func (c *Conn) kick() {
	c.rc.Write(func(fd uintptr) bool {
		syscall.Write(int(fd), []byte{byteWake})
		return true
	})
}

// readable returns how many bytes the ring holds that can be read: none
// until the descriptors the producer sent before them are read from the
// socket (sock then reports that the socket must be read first).
func (c *Conn) readable() (n uint64, sock bool, err error) {
	n, err = c.in.Avail()
	if err != nil || n == 0 {
		return 0, false, err
	}
	if c.fdsGot < c.in.FDSeq() { // loaded after the tail
		return 0, true, nil
	}
	return n, false, nil
}

// Read copies bytes out of the ring. While the ring is empty it polls it
// for SpinWindow, then sleeps in a read of the socket, which the peer's
// wake-up, its descriptors, its end or the read deadline ends. Once the
// peer is gone, what the ring holds is read, then the socket's error
// (io.EOF).
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.mem == nil {
		return 0, net.ErrClosed
	}
	if len(b) == 0 {
		return 0, nil
	}
	start := time.Time{}
	spin := c.spin
	if spin == 0 {
		if c.reads++; c.reads%probeEvery == 0 || c.peerAwake.Load() {
			spin = probeSpin
		}
	}
	for i := 0; ; i++ {
		avail, sock, err := c.readable()
		if err != nil {
			return 0, err
		}
		if avail > 0 {
			if !start.IsZero() {
				c.spin = SpinWindow
			}
			n := c.in.Copy(b, avail)
			if c.in.ProducerWaiting() {
				c.kick()
			}
			return n, nil
		}
		if c.gone.Load() {
			return 0, c.goneErr
		}
		if !sock {
			if i&15 == 0 {
				if err := c.stopped(&c.rdl); err != nil {
					return 0, err
				}
				if now := time.Now(); start.IsZero() {
					start = now
				}
				if time.Since(start) < spin {
					runtime.Gosched()
					continue
				}
				if c.spin /= 2; c.spin < minSpin {
					c.spin = 0
				}
				spin = 0
			} else {
				runtime.Gosched()
				continue
			}
			c.in.SetSleeping(1)
			avail, _, err := c.readable()
			if avail > 0 || err != nil {
				c.in.SetSleeping(0)
				continue
			}
		}
		err = c.readSock()
		c.in.SetSleeping(0)
		start = time.Time{}
		if err != nil {
			return 0, err
		}
	}
}

// readSock sleeps in a read of the socket, and counts the descriptor
// messages it reads (an *shm.Conn queues their descriptors). Its error is
// that of the deadline or of Close; any other ends the socket (gone).
func (c *Conn) readSock() error {
	n, err := c.sock.Read(c.sbuf[:])
	for _, b := range c.sbuf[:max(n, 0)] {
		if b == byteFiles {
			c.fdsGot++
		}
	}
	poke(c.wwake)
	switch {
	case err == nil:
		return nil
	case c.closing.Load():
		return net.ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		return err
	}
	c.goneErr = err
	c.gone.Store(true)
	return nil
}

// Write copies b into the ring.
func (c *Conn) Write(b []byte) (int, error) {
	bufs := [][]byte{b}
	n, err := c.write(bufs)
	return int(n), err
}

// WriteBuffers writes v as one write, consuming it.
func (c *Conn) WriteBuffers(v *net.Buffers) (int64, error) {
	n, err := c.write(*v)
	*v = nil
	return n, err
}

// WriteFiles sends fds on the socket, then b through the ring: the peer
// reads b only once it has the descriptors.
func (c *Conn) WriteFiles(b []byte, fds []int) (int, error) {
	fc, ok := c.sock.(*shm.Conn)
	if !ok {
		return 0, shm.ErrDescriptors
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.mem == nil {
		return 0, net.ErrClosed
	}
	// Under one lock: no other write's bytes or descriptors can come
	// between these descriptors and the frame that names them.
	if _, err := fc.WriteFiles([]byte{byteFiles}, fds); err != nil {
		return 0, err
	}
	c.out.AddFDs()
	n, err := c.writeLocked([][]byte{b})
	return int(n), err
}

func (c *Conn) write(bufs [][]byte) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.mem == nil {
		return 0, net.ErrClosed
	}
	return c.writeLocked(bufs)
}

func (c *Conn) writeLocked(bufs [][]byte) (int64, error) {
	var total int64
	for len(bufs) > 0 {
		if c.gone.Load() {
			return total, errPeerGone
		}
		room, err := c.waitRoom()
		if err != nil {
			return total, err
		}
		total += int64(c.out.Put(&bufs, room))
		c.out.Publish()
		sleeping := c.out.ConsumerSleeping()
		if sleeping {
			c.kick()
		}
		c.peerAwake.Store(!sleeping)
	}
	return total, nil
}

// waitRoom returns once the ring has room: it polls for SpinWindow, then
// publishes that it waits and sleeps, woken by this side's reader when
// the socket speaks, or after a while (the consumer's wake-up lands in
// the socket, which no one may be reading).
func (c *Conn) waitRoom() (uint64, error) {
	start := time.Time{}
	nap := 20 * time.Microsecond
	for i := 0; ; i++ {
		room, err := c.out.Room()
		if err != nil || room > 0 {
			if i > 0 {
				c.out.SetWaiting(0)
			}
			return room, err
		}
		if err := c.stopped(&c.wdl); err != nil {
			c.out.SetWaiting(0)
			return 0, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start) <= SpinWindow {
			runtime.Gosched()
			continue
		}
		c.out.SetWaiting(1)
		if room, _ := c.out.Room(); room > 0 {
			continue
		}
		if c.peerGone() {
			c.gone.Store(true)
			continue
		}
		t := time.NewTimer(nap)
		select {
		case <-c.wwake:
		case <-c.closed:
		case <-t.C:
		}
		t.Stop()
		nap = min(2*nap, maxRoomSleep)
	}
}

// peerGone looks, without reading, for the end of the socket.
func (c *Conn) peerGone() bool {
	gone := false
	c.rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = n == 0 && err == nil
	})
	return gone
}

// stopped returns why a wait must end without the ring being ready.
func (c *Conn) stopped(dl *atomic.Int64) error {
	switch {
	case c.closing.Load():
		return net.ErrClosed
	case dl == &c.wdl && c.gone.Load():
		return errPeerGone
	}
	if d := dl.Load(); d != 0 && time.Now().UnixNano() >= d {
		return os.ErrDeadlineExceeded
	}
	return nil
}

// Close closes the socket and unmaps the rings once no read or write is
// in them.
func (c *Conn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.closing.Store(true)
		close(c.closed)
		err = c.sock.Close()
		c.rmu.Lock()
		c.wmu.Lock()
		unix.Munmap(c.mem)
		c.mem = nil
		c.wmu.Unlock()
		c.rmu.Unlock()
	})
	return err
}

func deadline(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixNano(), 1)
}

// SetReadDeadline bounds reads of the ring and of the socket.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(deadline(t))
	return c.sock.SetReadDeadline(t)
}

// SetWriteDeadline bounds writes of the ring and of the socket.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(deadline(t))
	poke(c.wwake)
	return c.sock.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// LocalAddr returns the socket's local address.
func (c *Conn) LocalAddr() net.Addr { return c.sock.LocalAddr() }

// RemoteAddr returns the socket's remote address.
func (c *Conn) RemoteAddr() net.Addr { return c.sock.RemoteAddr() }

// ReadsResume reports true: a read a deadline interrupts leaves the ring
// intact.
func (c *Conn) ReadsResume() bool { return true }

// NetConn returns the socket.
func (c *Conn) NetConn() net.Conn { return c.sock }

var _ io.ReadWriteCloser = (*Conn)(nil)

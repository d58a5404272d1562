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

	rmu, wmu sync.Mutex
	rwake    chan struct{} // the socket spoke, or a read deadline changed
	wwake    chan struct{} // the socket spoke, or a write deadline changed
	rdl, wdl atomic.Int64  // deadlines in Unix nanoseconds; 0: none

	fdsGot   atomic.Uint64 // descriptor messages read from the socket
	dead     chan struct{} // closed when the socket's read fails
	deadErr  error         // why; set before dead is closed
	gone     atomic.Bool   // dead is closed
	closing  atomic.Bool
	closed   chan struct{}
	pumpDone chan struct{}
	once     sync.Once
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
	c := &Conn{
		sock: sock, rc: rc, mem: mem,
		in: NewConsumer(mem, size, in), out: NewProducer(mem, size, out),
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1),
		dead: make(chan struct{}), closed: make(chan struct{}), pumpDone: make(chan struct{}),
	}
	go c.pump()
	return c, nil
}

// pump reads the socket: each byte wakes both sides, a byteFiles counts a
// descriptor message (the *shm.Conn queues its descriptors), and the end
// of the socket is the end of the connection.
func (c *Conn) pump() {
	defer close(c.pumpDone)
	var buf [64]byte
	for {
		n, err := c.sock.Read(buf[:])
		n = max(n, 0)
		var files uint64
		for _, b := range buf[:n] {
			if b == byteFiles {
				files++
			}
		}
		if files > 0 {
			c.fdsGot.Add(files)
		}
		if err != nil {
			c.deadErr = err
			c.gone.Store(true)
			close(c.dead)
		}
		if n > 0 || err != nil {
			poke(c.rwake)
			poke(c.wwake)
		}
		if err != nil {
			return
		}
	}
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

// readable reports how many bytes the ring holds that can be read: all
// of them once the descriptors the producer sent before them are read.
func (c *Conn) readable() (uint64, error) {
	n, err := c.in.Avail()
	if err != nil || n == 0 {
		return 0, err
	}
	if c.fdsGot.Load() < c.in.FDSeq() { // loaded after the tail
		return 0, nil
	}
	return n, nil
}

// Read copies bytes out of the ring; it spins, then sleeps, while the ring
// is empty. Once the peer closed the socket, what the ring holds is read,
// then io.EOF.
func (c *Conn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.mem == nil {
		return 0, net.ErrClosed
	}
	if len(b) == 0 {
		return 0, nil
	}
	var avail uint64
	ready := func() (bool, error) {
		var err error
		avail, err = c.readable()
		return avail > 0, err
	}
	err := c.wait(ready, c.in.SetSleeping, c.rwake, &c.rdl)
	if err == errGone {
		if ok, rerr := ready(); !ok || rerr != nil {
			return 0, c.deadErr
		}
		err = nil
	}
	if err != nil {
		return 0, err
	}
	n := c.in.Copy(b, avail)
	if c.in.ProducerWaiting() {
		c.kick()
	}
	return n, nil
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
	if c.mem == nil {
		c.wmu.Unlock()
		return 0, net.ErrClosed
	}
	_, err := fc.WriteFiles([]byte{byteFiles}, fds)
	if err == nil {
		c.out.AddFDs()
	}
	c.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Write(b)
}

func (c *Conn) write(bufs [][]byte) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.mem == nil {
		return 0, net.ErrClosed
	}
	var total int64
	var room uint64
	ready := func() (bool, error) {
		var err error
		room, err = c.out.Room()
		return room > 0, err
	}
	for len(bufs) > 0 {
		if c.gone.Load() {
			return total, errPeerGone
		}
		err := c.wait(ready, c.out.SetWaiting, c.wwake, &c.wdl)
		if err == errGone {
			err = errPeerGone
		}
		if err != nil {
			return total, err
		}
		total += int64(c.out.Put(&bufs, room))
		c.out.Publish()
		if c.out.ConsumerSleeping() {
			c.kick()
		}
	}
	return total, nil
}

var errGone = errors.New("gone")

// wait returns once ready reports true: it polls for SpinWindow, then
// publishes that it sleeps (flag), looks again, and sleeps until the
// socket speaks. It returns ready's error, errGone once the socket
// ended, net.ErrClosed, or os.ErrDeadlineExceeded past the deadline dl.
func (c *Conn) wait(ready func() (bool, error), flag func(uint32), wake chan struct{}, dl *atomic.Int64) error {
	if ok, err := ready(); ok || err != nil {
		return err
	}
	start := time.Now()
	for i := 1; ; i++ {
		if ok, err := ready(); ok || err != nil {
			return err
		}
		if i&15 == 0 {
			if err := c.stopped(dl); err != nil {
				return err
			}
			if time.Since(start) > SpinWindow {
				break
			}
		}
		runtime.Gosched()
	}
	for {
		flag(1)
		ok, err := ready()
		if ok || err != nil {
			flag(0)
			return err
		}
		if err := c.stopped(dl); err != nil {
			flag(0)
			return err
		}
		var t *time.Timer
		var timer <-chan time.Time
		if d := dl.Load(); d != 0 {
			t = time.NewTimer(time.Until(time.Unix(0, d)))
			timer = t.C
		}
		select {
		case <-wake:
		case <-c.dead:
		case <-c.closed:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		flag(0)
		// Awake: poll again for a spin window, as after a call.
		start = time.Now()
		for i := 1; ; i++ {
			if ok, err := ready(); ok || err != nil {
				return err
			}
			if err := c.stopped(dl); err != nil {
				return err
			}
			if time.Since(start) > SpinWindow {
				break
			}
			runtime.Gosched()
		}
	}
}

// stopped returns why a wait must end without the ring being ready.
func (c *Conn) stopped(dl *atomic.Int64) error {
	switch {
	case c.closing.Load():
		return net.ErrClosed
	case c.gone.Load():
		return errGone
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
		<-c.pumpDone
		c.rmu.Lock()
		c.wmu.Lock()
		unix.Munmap(c.mem)
		c.mem = nil
		c.wmu.Unlock()
		c.rmu.Unlock()
	})
	return err
}

func setDL(dl *atomic.Int64, t time.Time, wake chan struct{}) {
	var v int64
	if !t.IsZero() {
		v = max(t.UnixNano(), 1)
	}
	dl.Store(v)
	poke(wake)
}

// SetReadDeadline bounds reads of the ring.
func (c *Conn) SetReadDeadline(t time.Time) error {
	setDL(&c.rdl, t, c.rwake)
	return nil
}

// SetWriteDeadline bounds writes of the ring and of the socket.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	setDL(&c.wdl, t, c.wwake)
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

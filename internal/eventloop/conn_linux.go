//go:build linux

package eventloop

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/internal/evloop"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/wsframe"
)

// fedConn: the non-blocking net.Conn through which a fed session writes.

// fedConn is the mux.FedConn of an active connection: non-blocking writes
// to the raw descriptor. Its lock orders writes with the loop closing the
// descriptor, so that a write never reaches a descriptor number the kernel
// has given to a newer connection. Only the loop closes the descriptor;
// Close (from a session) shuts the socket down, and the loop, which sees the
// hang-up, finishes.
type fedConn struct {
	l             *evLoop
	fd            int
	local, remote net.Addr
	wdl           atomic.Int64 // write deadline (UnixNano); 0 for none

	mu     sync.Mutex // protects following
	closed bool       // no more writes: closed by the session, or retired by the loop
	out    bool       // registered for EPOLLOUT
	paused bool       // not registered for EPOLLIN
	// pausedAt is when reading was last paused (updatePause).
	pausedAt time.Time

	// WebSocket connections only: each Write is one binary frame.
	fr       evloop.Framing
	hdr      [16]byte // the header of the frame being written
	hoff     uint8    // hdr[hoff:hlen] is still to write
	hlen     uint8
	left     int    // payload bytes of the frame being written still to write
	ctl      []byte // control frames (pong, close) waiting for the socket or the end of a frame
	wsClosed bool   // a close frame was sent or queued: no data frame may follow
}

var _ mux.FedConn = (*fedConn)(nil)

func (c *fedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.fr != nil {
		return c.writeWSLocked(b)
	}
	n := 0
	for n < len(b) {
		k, err := syscall.Write(c.fd, b[n:])
		if k > 0 {
			n += k
		}
		switch err {
		case nil:
		case unix.EINTR:
		case unix.EAGAIN:
			return n, mux.ErrWouldBlock
		default:
			return n, c.writeError(err)
		}
	}
	return n, nil
}

func (c *fedConn) events() uint32 {
	ev := uint32(evloop.RdHup)
	if !c.paused {
		ev |= evloop.In
	}
	if c.out {
		ev |= evloop.Out
	}
	return ev
}

// WaitWritable registers the socket for EPOLLOUT; the loop then calls the
// session's Writable.
func (c *fedConn) WaitWritable() {
	c.mu.Lock()
	if !c.closed && !c.out {
		c.out = true
		c.l.p.Mod(c.fd, c.events())
	}
	c.mu.Unlock()
}

// writableEvent unregisters EPOLLOUT after the loop saw it, and reports
// whether it was asked for.
func (c *fedConn) writableEvent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.out || c.closed {
		return false
	}
	c.out = false
	if c.fr != nil && len(c.ctl) > 0 && c.atBoundary() && c.flushControlLocked() == mux.ErrWouldBlock {
		c.out = true
	}
	c.l.p.Mod(c.fd, c.events())
	return true
}

func (c *fedConn) setPaused(p bool) {
	c.mu.Lock()
	if !c.closed && c.paused != p {
		c.paused = p
		if p {
			c.pausedAt = time.Now()
		}
		c.l.p.Mod(c.fd, c.events())
	}
	c.mu.Unlock()
}

// retire ends the fedConn's use of the descriptor (the session hibernated
// or the loop is closing it). The descriptor goes back to reading only.
func (c *fedConn) retire() {
	c.mu.Lock()
	if !c.closed && (c.out || c.paused) {
		c.out, c.paused = false, false
		c.l.p.Mod(c.fd, c.events())
	}
	c.closed = true
	c.mu.Unlock()
}

// stuck reports whether reading has been paused, the peer not reading its
// output, for mux.StuckAfter.
func (c *fedConn) stuck(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused && !c.closed && now.Sub(c.pausedAt) >= mux.StuckAfter()
}

func (c *fedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close shuts the socket down; the loop sees the hang-up and closes it.
func (c *fedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.fr != nil {
		// End the WebSocket connection with a close frame, if it can go
		// out now, and let the peer read what was sent before it.
		if !c.wsClosed && c.atBoundary() && len(c.ctl) == 0 {
			var b [4]byte
			syscall.Write(c.fd, c.fr.AppendClose(b[:0], wsframe.CloseNormal))
		}
		c.wsClosed = true
		unix.Shutdown(c.fd, unix.SHUT_WR)
	} else {
		unix.Shutdown(c.fd, unix.SHUT_RDWR)
	}
	c.l.p.Wake()
	return nil
}

func (c *fedConn) writeTimedOut(now time.Time) bool {
	d := c.wdl.Load()
	return d != 0 && now.UnixNano() >= d
}

func (c *fedConn) Read([]byte) (int, error) {
	return 0, errors.New("warren: the event loop reads this connection")
}

func (c *fedConn) LocalAddr() net.Addr { return c.local }

func (c *fedConn) RemoteAddr() net.Addr { return c.remote }

func (c *fedConn) SetReadDeadline(time.Time) error { return nil }

func (c *fedConn) SetDeadline(t time.Time) error { return c.SetWriteDeadline(t) }

func (c *fedConn) SetWriteDeadline(t time.Time) error {
	var d int64
	if !t.IsZero() {
		d = t.UnixNano()
	}
	c.wdl.Store(d)
	return nil
}

package rawio

import "net"

// Conn is a *net.UnixConn or *net.TCPConn whose Read, Write and
// WriteBuffers go through an IO. Both have CloseWrite, which Conn keeps.
type Conn struct {
	net.Conn
	io *IO
}

// Wrap returns c as a *Conn when c is a unix or tcp connection and raw I/O
// is used here (Linux, not under the race detector), and c itself
// otherwise.
func Wrap(c net.Conn) net.Conn {
	if r := New(c); r != nil {
		return &Conn{Conn: c, io: r}
	}
	return c
}

func (c *Conn) Read(b []byte) (int, error)  { return c.io.Read(b) }
func (c *Conn) Write(b []byte) (int, error) { return c.io.Write(b) }

// WriteBuffers writes v's buffers with one system call where it can,
// consuming them.
func (c *Conn) WriteBuffers(v *net.Buffers) (int64, error) { return c.io.WriteBuffers(v) }

// CloseWrite shuts down the writing side of the connection (net/http uses
// it to end a response cleanly).
func (c *Conn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

// ReadsResume reports true: a read that a deadline interrupts leaves the
// byte stream intact.
func (c *Conn) ReadsResume() bool { return true }

// NetConn returns the wrapped connection, for its credentials and
// options.
func (c *Conn) NetConn() net.Conn { return c.Conn }

package rawio

import "net"

// Ext is what a connection can offer a session beyond net.Conn: writes of
// several buffers in one system call, and reads that survive a deadline.
// Conn and shm.Conn implement it, and transport's connections through
// View.
type Ext interface {
	net.Conn
	// WriteBuffers writes v's buffers in order, consuming them.
	WriteBuffers(v *net.Buffers) (int64, error)
	// ReadsResume reports whether a Read that a past read deadline
	// interrupts leaves the byte stream intact, so that reading can go on
	// once the deadline is cleared.
	ReadsResume() bool
}

// transportView is set by package transport (SetTransportView).
var transportView func(net.Conn) net.Conn

// SetTransportView is called by package transport at init with the
// function that returns, for one of its connections, a view of it that
// implements Ext (its methods are not part of transport's API), and any
// other connection as it is. The view must not allocate.
func SetTransportView(f func(net.Conn) net.Conn) { transportView = f }

// View returns c, or for a transport connection the view of it that
// implements Ext. It allocates nothing; callers assert what they need of
// the result.
func View(c net.Conn) net.Conn {
	if transportView != nil {
		return transportView(c)
	}
	return c
}

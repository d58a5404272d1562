package httpbody

import "net"

// A connection speaks warren or HTTP: the server decides from its first
// bytes. mux.Server reads the preface; with mux.Config.KeepHTTP, a peer
// whose first bytes are an HTTP request is left open, and its
// *wire.NotWarrenError holds the bytes read (at most 6), which the HTTP
// bridge reads again through NewReplayConn (rpc's serveSession).

// replayConn reads prefix, the bytes the preface reader consumed, before
// reading from the connection.
type replayConn struct {
	net.Conn
	prefix []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// NetConn returns the underlying connection.
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// replayCloseWriteConn is a replayConn over a connection that can close its
// write side (TCP, unix), which net/http uses to end a response cleanly.
type replayCloseWriteConn struct{ replayConn }

func (c *replayCloseWriteConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

// NewReplayConn returns conn reading prefix first.
func NewReplayConn(conn net.Conn, prefix []byte) net.Conn {
	if _, ok := conn.(interface{ CloseWrite() error }); ok {
		return &replayCloseWriteConn{replayConn{conn, prefix}}
	}
	return &replayConn{conn, prefix}
}

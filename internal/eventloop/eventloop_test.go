package eventloop

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
)

// TestHandoffConnReplays: a handed-off connection reads the bytes the loop
// read first, then the socket's, and carries the loop's peer.
func TestHandoffConnReplays(t *testing.T) {
	c, s := testutil.UnixPair(t)
	p := &peer.Peer{Network: "unix", UID: 7}
	hc := &HandoffConn{Conn: s, prefix: []byte("GET / HTTP/1.1\r\n"), peer: p}
	if _, err := c.Write([]byte("Host: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	b, err := io.ReadAll(hc)
	if err != nil || !bytes.Equal(b, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) {
		t.Fatalf("read %q, %v", b, err)
	}
	if hc.Peer() != p || hc.NetConn() != s {
		t.Fatal("peer or connection lost")
	}
	if err := hc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// TestHandoffConnAdoptOnlyWebSocket: Adopt takes only an upgraded
// WebSocket connection, and only from a loop's hand-off.
func TestHandoffConnAdoptOnlyWebSocket(t *testing.T) {
	c, s := testutil.UnixPair(t)
	released := false
	hc := &HandoffConn{Conn: s, adopt: func(net.Conn, []byte, *peer.Peer) bool { return true }}
	if hc.Adopt(c, func() { released = true }) || released {
		t.Fatal("adopted a connection that is not an upgraded WebSocket")
	}
}

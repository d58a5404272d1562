package peer_test

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/warrenipc/warren/internal/testutil"
	"github.com/warrenipc/warren/peer"
)

func TestReadCred(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("peer credentials are read on linux and darwin only")
	}
	client, server := testutil.UnixPair(t)
	for name, c := range map[string]net.Conn{"server side": server, "client side": client} {
		t.Run(name, func(t *testing.T) {
			var p peer.Peer
			if err := peer.ReadCred(c, &p); err != nil {
				t.Fatal(err)
			}
			if !p.HasCred || p.UID != os.Geteuid() || p.GID != os.Getegid() || p.PID != os.Getpid() {
				t.Errorf("ReadCred = %+v, want uid %d gid %d pid %d", p, os.Geteuid(), os.Getegid(), os.Getpid())
			}
		})
	}
	t.Run("through NetConn", func(t *testing.T) {
		// A tls.Conn is never handshaken here: ReadCred only unwraps it.
		var p peer.Peer
		if err := peer.ReadCred(tls.Client(client, &tls.Config{}), &p); err != nil || p.PID != os.Getpid() {
			t.Fatalf("ReadCred(tls.Conn) = %+v, %v", p, err)
		}
	})
}

func TestReadCredNotUnix(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	for name, conn := range map[string]net.Conn{"tcp": c, "pipe": a, "nil": nil} {
		if err := peer.ReadCred(conn, &peer.Peer{}); !errors.Is(err, peer.ErrNoCred) {
			t.Errorf("%s: ReadCred error = %v, want ErrNoCred", name, err)
		}
	}
}

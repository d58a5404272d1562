package transport_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// transportCase is one transport of the test matrix.
type transportCase struct {
	name   string
	linux  bool // needs Linux (abstract sockets)
	addr   func(t *testing.T) string
	listen func(t *testing.T) *transport.ListenConfig
	dial   func(t *testing.T) *transport.DialConfig
}

var abstractSeq int

// abstractAddr returns an abstract socket address unique to this process.
func abstractAddr(t *testing.T) string {
	abstractSeq++
	return fmt.Sprintf("unix:@warren-test-%d-%d", os.Getpid(), abstractSeq)
}

func transports() []transportCase {
	none := func(*testing.T) *transport.ListenConfig { return nil }
	noDial := func(*testing.T) *transport.DialConfig { return nil }
	return []transportCase{
		{
			name:   "unix path",
			addr:   func(t *testing.T) string { return "unix://" + filepath.Join(t.TempDir(), "app.sock") },
			listen: none, dial: noDial,
		},
		{
			name: "unix abstract", linux: true,
			addr:   abstractAddr,
			listen: none, dial: noDial,
		},
		{
			name:   "tcp",
			addr:   func(*testing.T) string { return "tcp://127.0.0.1:0" },
			listen: none, dial: noDial,
		},
		{
			name: "tls",
			addr: func(*testing.T) string { return "tls://127.0.0.1:0" },
			listen: func(t *testing.T) *transport.ListenConfig {
				return &transport.ListenConfig{TLS: getPKI(t).serverConfig()}
			},
			dial: func(t *testing.T) *transport.DialConfig {
				p := getPKI(t)
				return &transport.DialConfig{TLS: p.clientConfig(p.client)}
			},
		},
		{
			name:   "ws",
			addr:   func(*testing.T) string { return "ws://127.0.0.1:0/warren" },
			listen: none, dial: noDial,
		},
		{
			name: "wss",
			addr: func(*testing.T) string { return "wss://127.0.0.1:0/warren" },
			listen: func(t *testing.T) *transport.ListenConfig {
				return &transport.ListenConfig{TLS: getPKI(t).serverConfig()}
			},
			dial: func(t *testing.T) *transport.DialConfig {
				p := getPKI(t)
				return &transport.DialConfig{TLS: p.clientConfig(p.client)}
			},
		},
	}
}

func TestTransports(t *testing.T) {
	for _, tc := range transports() {
		t.Run(tc.name, func(t *testing.T) {
			if tc.linux && runtime.GOOS != "linux" {
				t.Skip("abstract sockets are Linux only")
			}
			l := listen(t, tc.addr(t), tc.listen(t))
			report := make(chan served, 1)
			serveEcho(t, l, report)

			endpoint := l.Endpoint()
			if _, err := transport.ParseAddr(endpoint.String()); err != nil {
				t.Fatalf("Endpoint %q does not parse: %v", endpoint, err)
			}
			if got, want := l.Addr().Network(), endpoint.Network(); got != want {
				t.Errorf("Addr().Network() = %q, want %q", got, want)
			}
			c := dial(t, endpoint.String(), tc.dial(t))
			echo(t, c, "hello, warren")
			echo(t, c, "again")
			s := receive(t, report)
			if s.err != nil {
				t.Fatalf("server handshake: %v", s.err)
			}
			server, client := s.peer, c.Peer() // the client as the server sees it, and the reverse

			for _, p := range []*peer.Peer{server, client} {
				if p.Network != endpoint.Scheme {
					t.Errorf("Peer.Network = %q, want %q", p.Network, endpoint.Scheme)
				}
			}
			if got, want := server.RemoteAddr.String(), c.LocalAddr().String(); got != want {
				t.Errorf("server Peer.RemoteAddr = %q, want the client's local address %q", got, want)
			}
			if got, want := client.RemoteAddr.String(), l.Addr().String(); endpoint.Scheme == "unix" && got != want {
				t.Errorf("client Peer.RemoteAddr = %q, want %q", got, want)
			}
			if got, want := server.LocalAddr.String(), l.Addr().String(); got != want {
				t.Errorf("server Peer.LocalAddr = %q, want the listener's address %q", got, want)
			}

			switch endpoint.Scheme {
			case "unix":
				for side, p := range map[string]*peer.Peer{"server": server, "client": client} {
					if !p.HasCred || p.UID != os.Geteuid() || p.GID != os.Getegid() || p.PID != os.Getpid() {
						t.Errorf("%s sees %+v, want uid %d gid %d pid %d", side, p, os.Geteuid(), os.Getegid(), os.Getpid())
					}
				}
				// ReadCred sees through a *Conn to its socket.
				if p := (peer.Peer{}); peer.ReadCred(c, &p) != nil || p.PID != os.Getpid() {
					t.Errorf("ReadCred(*Conn) = %+v", p)
				}
			case "tcp", "tls", "ws", "wss":
				if server.HasCred || client.HasCred {
					t.Error("a network peer has kernel credentials")
				}
				if _, ok := server.RemoteAddr.(*net.TCPAddr); !ok {
					t.Errorf("server Peer.RemoteAddr is a %T, want *net.TCPAddr", server.RemoteAddr)
				}
			}
			if endpoint.Scheme == "tls" || endpoint.Scheme == "wss" {
				checkChain(t, "server", server, "client")
				checkChain(t, "client", client, "server")
			} else if server.TLS != nil || client.TLS != nil {
				t.Error("a non-TLS peer has TLS state")
			}

			if got := l.Stats(); got != (transport.Stats{Accepted: 1}) {
				t.Errorf("Stats = %+v, want 1 accepted", got)
			}
		})
	}
}

// checkChain checks that p has a verified chain whose leaf is named cn.
func checkChain(t *testing.T, side string, p *peer.Peer, cn string) {
	t.Helper()
	if p.TLS == nil {
		t.Errorf("%s: Peer.TLS is nil", side)
		return
	}
	if len(p.TLS.VerifiedChains) == 0 || len(p.TLS.VerifiedChains[0]) == 0 {
		t.Errorf("%s: no verified chains", side)
		return
	}
	if got := p.TLS.VerifiedChains[0][0].Subject.CommonName; got != cn {
		t.Errorf("%s: verified leaf is %q, want %q", side, got, cn)
	}
}

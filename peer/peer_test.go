package peer_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"

	"github.com/warrenipc/warren/peer"
)

func TestPeerString(t *testing.T) {
	tcp := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 51234}
	tests := []struct {
		name string
		p    *peer.Peer
		want string
	}{
		{"nil", nil, "unknown peer"},
		{"empty", &peer.Peer{}, "peer"},
		{"unix", &peer.Peer{Network: "unix", HasCred: true, UID: 1000, GID: 1000, PID: 4242}, "unix uid=1000 gid=1000 pid=4242"},
		{"unix no pid", &peer.Peer{Network: "unix", HasCred: true, UID: 1, GID: 2}, "unix uid=1 gid=2"},
		{"unix unnamed client", &peer.Peer{Network: "unix", RemoteAddr: &net.UnixAddr{Net: "unix"}, HasCred: true, UID: 5, GID: 6, PID: 7}, "unix uid=5 gid=6 pid=7"},
		{"unix server path", &peer.Peer{Network: "unix", RemoteAddr: &net.UnixAddr{Name: "/run/app.sock", Net: "unix"}, HasCred: true}, "unix /run/app.sock uid=0 gid=0"},
		{"unix no cred", &peer.Peer{Network: "unix"}, "unix"},
		{"tcp", &peer.Peer{Network: "tcp", RemoteAddr: tcp}, "tcp 192.0.2.7:51234"},
		{"tls before handshake", &peer.Peer{Network: "tls", RemoteAddr: tcp}, "tls 192.0.2.7:51234"},
		{"tls", &peer.Peer{Network: "tls", RemoteAddr: tcp, TLS: &tls.ConnectionState{
			PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "client"}}},
		}}, "tls 192.0.2.7:51234 cn=client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestContext(t *testing.T) {
	if p, ok := peer.FromContext(context.Background()); ok || p != nil {
		t.Fatalf("FromContext(empty) = %v, %v; want nil, false", p, ok)
	}
	if _, ok := peer.FromContext(peer.NewContext(context.Background(), nil)); ok {
		t.Fatal("FromContext found a nil peer")
	}
	want := &peer.Peer{Network: "unix", HasCred: true, UID: 3}
	got, ok := peer.FromContext(peer.NewContext(context.Background(), want))
	if !ok || got != want {
		t.Fatalf("FromContext = %v, %v; want %v, true", got, ok, want)
	}
}

package peer

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
)

// Peer describes the other end of a connection: the client, as a server sees
// it, or the server, as a client sees it.
type Peer struct {
	Network    string   // "unix", "tcp" or "tls"
	LocalAddr  net.Addr // this end's address
	RemoteAddr net.Addr // the other end's address; often empty for unix clients

	// HasCred reports that UID, GID and PID were read from the kernel. It
	// is true only for Unix domain sockets on platforms that report them.
	HasCred bool
	UID     int
	GID     int // the primary group
	PID     int // 0 when the platform does not report it

	// TLS is the connection state of a TLS peer, set once the handshake has
	// completed (VerifiedChains holds the verified client or server
	// certificate chains). Nil for other networks and before the handshake.
	TLS *tls.ConnectionState
}

// String describes the peer in one line, for logs and errors, for example
// "unix uid=1000 gid=1000 pid=4242" or "tls 192.0.2.7:51234 cn=client".
func (p *Peer) String() string {
	if p == nil {
		return "unknown peer"
	}
	var b strings.Builder
	b.WriteString(p.Network)
	if b.Len() == 0 {
		b.WriteString("peer")
	}
	if a := p.RemoteAddr; a != nil {
		if s := a.String(); s != "" && s != "@" {
			b.WriteString(" ")
			b.WriteString(s)
		}
	}
	if p.HasCred {
		b.WriteString(" uid=")
		b.WriteString(strconv.Itoa(p.UID))
		b.WriteString(" gid=")
		b.WriteString(strconv.Itoa(p.GID))
		if p.PID != 0 {
			b.WriteString(" pid=")
			b.WriteString(strconv.Itoa(p.PID))
		}
	}
	if p.TLS != nil && len(p.TLS.PeerCertificates) > 0 {
		if cn := p.TLS.PeerCertificates[0].Subject.CommonName; cn != "" {
			b.WriteString(" cn=")
			b.WriteString(cn)
		}
	}
	return b.String()
}

type contextKey struct{}

// NewContext returns a copy of ctx that carries p.
func NewContext(ctx context.Context, p *Peer) context.Context {
	return context.WithValue(ctx, contextKey{}, p)
}

// FromContext returns the Peer stored in ctx by NewContext, if any.
func FromContext(ctx context.Context) (*Peer, bool) {
	p, ok := ctx.Value(contextKey{}).(*Peer)
	return p, ok && p != nil
}

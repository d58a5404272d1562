package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/internal/refusallog"
	"github.com/warrenipc/warren/peer"
)

// defaultHandshakeTimeout bounds a server's TLS and WebSocket handshakes
// when ListenConfig.HandshakeTimeout is zero.
const defaultHandshakeTimeout = 10 * time.Second

// Owner names the owner and group of a socket file. -1 leaves the owner or
// group as the process creates it (in ListenConfig) or accepts any (in
// DialConfig).
type Owner struct {
	UID int
	GID int
}

// ListenConfig configures Listen. The zero value, and a nil *ListenConfig,
// give the defaults. Options about socket files are ignored for addresses
// that have none (abstract sockets, tcp, tls, ws and wss), so that moving a
// server from a socket file to the network changes only its address.
type ListenConfig struct {
	// TLS is the server configuration for tls:// and wss:// addresses,
	// where it is required. It is cloned by Listen. For tls:// addresses a
	// configuration without NextProtos offers ALPN "h2" and "http/1.1", for
	// the HTTP side of an rpc.Server.
	TLS *tls.Config

	// WebSocket configures the WebSocket opening handshake of ws:// and
	// wss:// addresses (the origin check). Nil means the defaults.
	WebSocket *WebSocketOptions

	// Mode is the permission bits of the socket file; 0 means 0600. Only
	// permission bits are allowed.
	Mode fs.FileMode
	// Owner, if set, is applied to the socket file before it can be reached
	// at its path. Changing the owner needs privileges; changing only the
	// group needs membership in it.
	Owner *Owner
	// MkdirAll creates missing parent directories of the socket file with
	// mode 0700, owned by the process.
	MkdirAll bool

	// Policy decides which peers may connect. Nil means peer.SameUser() for
	// unix addresses and peer.AllowAll() for the others. Unix, tcp and ws
	// peers are checked at accept, before any byte is read; tls and wss
	// peers once the TLS handshake has completed, so that the policy can see
	// their verified certificates.
	Policy peer.Policy

	// Logger receives a line for the first rejected peer of each uid (or
	// address) in a 10-second interval, and a summary with the count of the
	// others at its end. Nil means slog.Default().
	Logger *slog.Logger

	// HandshakeTimeout bounds each server-side handshake (TLS, then the
	// WebSocket opening handshake for ws and wss); 0 means
	// 10 s and a negative value means no limit besides
	// the context's.
	HandshakeTimeout time.Duration
}

// Stats counts a Listener's connections.
type Stats struct {
	Accepted uint64 // connections returned by Accept
	// Rejected counts peers the policy refused: at accept, in which case
	// Accept did not return them, or at the TLS handshake. Refused
	// WebSocket handshakes are not counted.
	Rejected uint64
}

// Listener accepts connections whose peers the policy allows. It implements
// net.Listener and starts no goroutines.
type Listener struct {
	ln               net.Listener
	addr             Addr     // as listened on, with the port the system chose
	netAddr          net.Addr // what Addr returns
	policy           peer.Policy
	tlsConfig        *tls.Config
	ws               *wsAccept    // for ws and wss
	logger           *slog.Logger // nil means slog.Default()
	refusals         *refusallog.Log
	handshakeTimeout time.Duration
	file             *socketFile // the socket file Listen created; nil if none

	accepted atomic.Uint64
	rejected atomic.Uint64

	closeOnce sync.Once
	closeErr  error // the result of the first Close
}

var (
	_ net.Listener = (*Listener)(nil)
	_ net.Addr     = Addr{}
)

// Listen listens on addr, a warren address (see ParseAddr).
//
// For a socket file, Listen creates the file with its final mode and owner,
// replaces a stale socket, and refuses with ErrAddrInUse if a server is
// accepting on the socket already there and with ErrNotSocket if something
// else is at the path, as the package documentation describes. Close removes
// the file.
//
// For ws and wss, the Listener serves the WebSocket opening handshake at the
// address's path and nothing else: each connection it accepts answers one
// HTTP request, in its Handshake, with 101 Switching Protocols, or with an
// error (404 Not Found for another path, 426 Upgrade Required for a request
// that does not ask for WebSocket) after which it is closed. To serve
// WebSocket next to other HTTP requests, on the same port as warren's own
// protocol, listen on tcp:// (or unix:// or tls://) instead and upgrade
// with UpgradeWebSocket, as the HTTP bridge of package rpc does.
//
// For systemd: and systemd:NAME, Listen serves the socket systemd passed
// (see ParseAddr) as the unix or tcp address it is bound to, which Endpoint
// returns: the policy applies as for sockets Listen creates, and the
// file's mode and owner are the socket unit's (Mode, Owner and MkdirAll are
// ignored; Close leaves the file). Each passed socket can be listened on
// once. The first such Listen marks the passed descriptors close-on-exec
// and unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES, so that child
// processes inherit neither.
func Listen(addr string, cfg *ListenConfig) (*Listener, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &ListenConfig{}
	}
	fail := func(err error) (*Listener, error) { return nil, &opError{op: "listen", addr: a.String(), err: err} }
	var passed net.Listener
	if a.Scheme == SchemeSystemd {
		ln, real, err := listenSystemd(a)
		if err != nil {
			return fail(err)
		}
		passed, a = ln, real
	}
	l := &Listener{
		addr:             a,
		policy:           cfg.Policy,
		logger:           cfg.Logger,
		handshakeTimeout: cfg.HandshakeTimeout,
	}
	if l.handshakeTimeout == 0 {
		l.handshakeTimeout = defaultHandshakeTimeout
	}
	l.refusals = refusallog.New(l.log, "peer rejected", 0)
	if l.policy == nil {
		if a.Scheme == SchemeUnix {
			l.policy = peer.SameUser()
		} else {
			l.policy = peer.AllowAll()
		}
	}

	switch {
	case passed != nil:
		l.ln, l.netAddr = passed, passed.Addr()
	case a.isFile():
		perm := cfg.Mode
		if perm&^fs.ModePerm != 0 {
			return fail(fmt.Errorf("mode %v has bits other than permission bits", perm))
		}
		if perm == 0 {
			perm = 0o600
		}
		if err := a.checkPathLen(); err != nil {
			return fail(err)
		}
		if cfg.MkdirAll {
			if err := os.MkdirAll(filepath.Dir(a.Address), 0o700); err != nil {
				return fail(fmt.Errorf("create parent directories: %w", err))
			}
		}
		ln, f, err := listenFile(a.Address, perm, cfg.Owner)
		if err != nil {
			return fail(err)
		}
		l.ln, l.file = ln, f
		l.netAddr = &net.UnixAddr{Name: a.Address, Net: "unix"}
	case a.Scheme == SchemeUnix: // abstract
		if err := a.checkPathLen(); err != nil {
			return fail(err)
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: a.Address, Net: "unix"})
		if err != nil {
			return fail(err)
		}
		l.ln, l.netAddr = ln, ln.Addr()
	default:
		if a.Scheme == SchemeTLS || a.Scheme == SchemeWSS {
			if cfg.TLS == nil {
				return fail(fmt.Errorf("a %s:// address needs ListenConfig.TLS", a.Scheme))
			}
			if len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil && cfg.TLS.GetConfigForClient == nil {
				return fail(errors.New("ListenConfig.TLS has no certificate (Certificates, GetCertificate or GetConfigForClient)"))
			}
			l.tlsConfig = cfg.TLS.Clone()
			if a.Scheme == SchemeTLS && len(l.tlsConfig.NextProtos) == 0 {
				// ALPN for the HTTP side of an rpc.Server: HTTP/2 clients
				// (gRPC) negotiate h2; warren clients offer no protocol.
				l.tlsConfig.NextProtos = []string{"h2", "http/1.1"}
			}
		}
		if a.Scheme == SchemeWS || a.Scheme == SchemeWSS {
			l.ws = &wsAccept{path: a.Path, opts: cfg.WebSocket}
		}
		ln, err := net.Listen("tcp", a.Address)
		if err != nil {
			return fail(err)
		}
		l.ln, l.netAddr = ln, ln.Addr()
		if host, _, err := net.SplitHostPort(a.Address); err == nil {
			if ta, ok := ln.Addr().(*net.TCPAddr); ok {
				l.addr.Address = net.JoinHostPort(host, strconv.Itoa(ta.Port))
			}
		}
	}
	return l, nil
}

// Accept waits for the next connection whose peer the policy allows and
// returns it as a *Conn. Peers the policy refuses are closed, logged and
// counted in Stats, and Accept goes on waiting. It returns an error matching
// net.ErrClosed once the Listener is closed.
//
// For unix peers the kernel credentials are read and the policy applied
// before any byte is read. TLS and WebSocket connections are returned before
// their handshakes, which run on the first Read, Write or Handshake call, so
// that a slow client cannot stall Accept.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.acceptConn()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// acceptConn is Accept returning the *Conn type.
func (l *Listener) acceptConn() (*Conn, error) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if oe, ok := err.(*net.OpError); ok && l.file != nil {
				oe.Addr = l.netAddr // not the private name it was bound under
			}
			return nil, err
		}
		if conn := l.admit(c); conn != nil {
			l.accepted.Add(1)
			return conn, nil
		}
	}
}

// admit wraps a newly accepted connection, or rejects its peer and returns
// nil.
func (l *Listener) admit(c net.Conn) *Conn {
	tuneUnix(c)
	conn := &Conn{
		raw:    c,
		io:     c,
		rio:    rawio.New(c),
		srv:    l,
		policy: l.policy,
		peer: &peer.Peer{
			Network:    l.addr.Scheme,
			LocalAddr:  c.LocalAddr(),
			RemoteAddr: c.RemoteAddr(),
		},
	}
	if l.ws != nil {
		conn.wsAccept = l.ws
		conn.handshakeTimeout = l.handshakeTimeout
	}
	switch {
	case l.addr.Scheme == SchemeTLS || l.addr.Scheme == SchemeWSS:
		conn.tls = tls.Server(c, l.tlsConfig)
		conn.io = conn.tls
		conn.handshakeTimeout = l.handshakeTimeout
		if l.ws != nil {
			conn.ws = newWSConn(conn.tls, false)
			conn.io = conn.ws
		}
		return conn // the policy runs after the handshake
	case l.ws != nil:
		conn.ws = newWSConn(c, false)
		conn.io = conn.ws
	case l.addr.isFile():
		// The kernel reports the private name the socket was bound under;
		// report the path instead.
		conn.local = l.netAddr
		conn.peer.LocalAddr = l.netAddr
		fallthrough
	case l.addr.Scheme == SchemeUnix:
		// Failing to read credentials leaves HasCred false, which every
		// credential-based policy refuses.
		peer.ReadCred(c, conn.peer)
	}
	if err := peer.Authorize(l.policy, conn.peer); err != nil {
		l.reject(conn.peer, err)
		c.Close()
		return nil
	}
	return conn
}

// reject logs and counts a peer the policy refused. The caller closes its
// connection. The first refusal of a uid (or address) in an interval is
// logged in full, the others as one summary line per interval
// (refusallog), so that a peer refused in a loop cannot flood the log.
func (l *Listener) reject(p *peer.Peer, err error) {
	key := "addr " + fmt.Sprint(p.RemoteAddr)
	if p.HasCred {
		key = "uid " + strconv.Itoa(p.UID)
	} else if ta, ok := p.RemoteAddr.(*net.TCPAddr); ok {
		key = "ip " + ta.IP.String()
	}
	l.refusals.Refused(key, func() []any {
		attrs := append([]any{slog.String("listener", l.addr.String())}, refusallog.PeerAttrs(p)...)
		return append(attrs, slog.String("reason", err.Error()))
	})
	l.rejected.Add(1)
}

func (l *Listener) log() *slog.Logger {
	if l.logger == nil {
		return slog.Default()
	}
	return l.logger
}

// Stats returns the Listener's counters.
func (l *Listener) Stats() Stats {
	return Stats{Accepted: l.accepted.Load(), Rejected: l.rejected.Load()}
}

// Addr returns the listener's network address: for a socket file, its path
// as given to Listen; for tcp, tls, ws and wss, the address with the port
// the system chose.
func (l *Listener) Addr() net.Addr { return l.netAddr }

// Endpoint returns the warren address to dial this listener at, with the
// port the system chose for a tcp, tls, ws or wss address with port 0.
func (l *Listener) Endpoint() Addr { return l.addr }

// Close stops listening and removes the socket file Listen created, unless
// the path now holds another socket (a newer server's). Connections already
// accepted stay open. Close may be called more than once; later calls return
// the first call's result.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		var errs []error
		// Remove the file first, while the socket is still live, so that a
		// server starting at the same path never sees it stale.
		if l.file != nil {
			errs = append(errs, l.file.remove())
		}
		errs = append(errs, l.ln.Close())
		l.refusals.Close()
		if err := errors.Join(errs...); err != nil {
			l.closeErr = &opError{op: "close", addr: l.addr.String(), err: err}
		}
	})
	return l.closeErr
}

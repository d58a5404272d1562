package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/peer"
)

// DialConfig configures Dial. The zero value, and a nil *DialConfig, dial
// without any check of the server.
type DialConfig struct {
	// TLS is the client configuration for tls:// and wss:// addresses. Nil
	// means the defaults; an empty ServerName is taken from the address's
	// host. ServerName pins the server's identity by DNS name (or IP
	// address): the server's certificate must be valid for it, whatever
	// host the address names. To pin a URI SAN such as a SPIFFE ID, or a
	// common name, set ServerPolicy to peer.AllowURIs or
	// peer.AllowCommonNames as well.
	TLS *tls.Config

	// WebSocketHeader adds header fields to the WebSocket opening handshake
	// request of ws:// and wss:// addresses, such as Origin or
	// Authorization. The fields of the handshake itself (Host, Upgrade,
	// Connection, Sec-WebSocket-*) must not be among them. It is ignored
	// for other schemes.
	WebSocketHeader http.Header

	// RequireOwner, for a socket file, requires its owner and group to be
	// these (-1 accepts any). It is checked before connecting.
	RequireOwner *Owner
	// RequireModes, for a socket file, requires its permission bits to be
	// one of these; empty accepts any. It is checked before connecting.
	RequireModes []fs.FileMode

	// ServerPolicy authorizes the server once connected. For unix it sees
	// the kernel credentials of the process that listens on the connected
	// socket, which, unlike RequireOwner and RequireModes, cannot change
	// between the check and the connection. For tls it runs after the
	// handshake and sees the server's verified certificates. Nil allows any
	// server.
	ServerPolicy peer.Policy
}

// Dial connects to addr, a warren address (see ParseAddr), and checks the
// server as cfg asks. A tls connection is returned after its handshake; a
// ws or wss connection after the TLS handshake, if any, ServerPolicy and the
// WebSocket opening handshake, whose failure is a *WebSocketHandshakeError
// that says what the server answered.
// RequireOwner and RequireModes are errors for addresses without a socket
// file: a check that cannot run fails rather than passing silently. A
// server refused by ServerPolicy fails Dial with an error that matches
// peer.ErrDenied.
func Dial(ctx context.Context, addr string, cfg *DialConfig) (*Conn, error) {
	a, err := ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &DialConfig{}
	}
	fail := func(err error) (*Conn, error) { return nil, &opError{op: "dial", addr: a.String(), err: err} }
	if a.Scheme == SchemeSystemd {
		return fail(errors.New("a systemd: address names a socket passed to a server; dial the socket's own address (its ListenStream=)"))
	}
	if err := a.checkPathLen(); err != nil {
		return fail(err)
	}
	if cfg.RequireOwner != nil || len(cfg.RequireModes) > 0 {
		if !a.isFile() {
			return fail(errors.New("RequireOwner and RequireModes need a socket file; use ServerPolicy to check this server"))
		}
		if err := checkSocketFile(a.Address, cfg.RequireOwner, cfg.RequireModes); err != nil {
			return fail(err)
		}
	}

	raw, err := dialSocket(ctx, a)
	if err != nil {
		return fail(err)
	}
	tuneUnix(raw)
	c := &Conn{
		raw:    raw,
		io:     raw,
		rio:    rawio.New(raw),
		policy: cfg.ServerPolicy,
		peer: &peer.Peer{
			Network:    a.Scheme,
			LocalAddr:  raw.LocalAddr(),
			RemoteAddr: raw.RemoteAddr(),
		},
	}
	switch a.Scheme {
	case SchemeTLS, SchemeWSS:
		conf := &tls.Config{}
		if cfg.TLS != nil {
			conf = cfg.TLS.Clone()
		}
		if conf.ServerName == "" {
			host, _, _ := net.SplitHostPort(a.Address)
			conf.ServerName = host
		}
		c.tls = tls.Client(raw, conf)
		c.io = c.tls
		if err := c.Handshake(ctx); err != nil { // applies ServerPolicy
			return fail(err)
		}
		if a.Scheme == SchemeWSS {
			return c.dialWebSocket(ctx, a, cfg, fail)
		}
		return c, nil
	case SchemeUnix:
		if a.isFile() {
			// The kernel reports the name the server bound, which may be
			// a private one (see the package documentation).
			c.remote = &net.UnixAddr{Name: a.Address, Net: "unix"}
			c.peer.RemoteAddr = c.remote
		}
		peer.ReadCred(raw, c.peer)
	}
	if err := peer.Authorize(cfg.ServerPolicy, c.peer); err != nil {
		raw.Close()
		return fail(err)
	}
	if a.Scheme == SchemeWS {
		return c.dialWebSocket(ctx, a, cfg, fail)
	}
	return c, nil
}

// dialWebSocket runs the WebSocket opening handshake on c, whose TLS
// handshake and ServerPolicy have passed, and makes c carry its byte stream
// in WebSocket messages.
func (c *Conn) dialWebSocket(ctx context.Context, a Addr, cfg *DialConfig, fail func(error) (*Conn, error)) (*Conn, error) {
	ws, err := dialWebSocket(ctx, c.io, a, cfg.WebSocketHeader)
	if err != nil {
		c.raw.Close()
		return fail(err)
	}
	c.ws, c.io = ws, ws
	return c, nil
}

// checkSocketFile checks the socket file that path leads to against the
// required owner and modes.
func checkSocketFile(path string, owner *Owner, modes []fs.FileMode) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("inspect socket file: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w (found %s)", ErrNotSocket, describe(fi))
	}
	if owner != nil {
		uid, gid, ok := fileOwner(fi)
		if !ok {
			return fmt.Errorf("check socket file owner: %w", ErrUnsupported)
		}
		if owner.UID != -1 && uid != owner.UID || owner.GID != -1 && gid != owner.GID {
			return &SocketFileError{
				Path:  path,
				Check: "owner",
				Want:  idString("uid", owner.UID) + ", " + idString("gid", owner.GID),
				Got:   fmt.Sprintf("uid %d, gid %d", uid, gid),
			}
		}
	}
	perm := fi.Mode().Perm()
	if len(modes) > 0 && !slices.ContainsFunc(modes, func(m fs.FileMode) bool { return m.Perm() == perm }) {
		want := make([]string, len(modes))
		for i, m := range modes {
			want[i] = fileMode(m)
		}
		w := want[0]
		if len(want) > 1 {
			w = "one of " + strings.Join(want, ", ")
		}
		return &SocketFileError{Path: path, Check: "mode", Want: w, Got: fileMode(perm)}
	}
	return nil
}

func idString(what string, id int) string {
	if id == -1 {
		return "any " + what
	}
	return fmt.Sprintf("%s %d", what, id)
}

// fullQueueWait bounds the retries of dialSocket when ctx has no deadline.
const fullQueueWait = 5 * time.Second

// dialSocket connects to a's socket. A unix socket whose queue of
// connections to accept is full refuses a connect at once (EAGAIN) where
// a blocking connect would wait for room: the connect is retried, backing
// off from 1 ms to 50 ms, until ctx ends or for fullQueueWait.
func dialSocket(ctx context.Context, a Addr) (net.Conn, error) {
	var d net.Dialer
	var give time.Time
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 50*time.Millisecond) {
		raw, err := d.DialContext(ctx, a.Network(), a.Address)
		if err == nil || a.Network() != "unix" || !errors.Is(err, syscall.EAGAIN) {
			return raw, err
		}
		if give.IsZero() {
			give = time.Now().Add(fullQueueWait)
		}
		if time.Now().Add(backoff).After(give) {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"io/fs"
	"log/slog"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// metricsListen opens serve's --metrics address: another listener of the
// same server (rpc.ServerOptions.Metrics), so the same policy and token
// rules apply to it. A network address needs a token even when the
// service's address does not (a unix socket): *auth is then made from
// --token (or a random one) and --no-auth, as for a network --addr; unix
// peers stay exempt. The policy of a service on a unix socket (*policy)
// then lets peers without kernel credentials through to the token check.
func metricsListen(addr string, service transport.Addr, policy *peer.Policy, auth **rpc.TokenAuth, token string, noAuth bool, mode fs.FileMode, tlsConf *tls.Config, logger *slog.Logger) (*transport.Listener, error) {
	a, err := transport.ParseAddr(addr)
	if err != nil {
		return nil, &usageError{cmd: "serve", msg: "--metrics: " + trimWarren(err.Error())}
	}
	switch a.Scheme {
	case transport.SchemeSystemd:
		return nil, &usageError{cmd: "serve", msg: "--metrics takes a unix, tcp, tls or ws address, not a systemd socket"}
	case transport.SchemeTLS, transport.SchemeWSS:
		if tlsConf == nil {
			return nil, &usageError{cmd: "serve", msg: "--metrics " + addr + " needs the service on a tls:// or wss:// --addr (with --cert and --key); use tcp://127.0.0.1:PORT or a unix socket"}
		}
	case transport.SchemeUnix:
	default:
		if *auth == nil && !noAuth {
			if *auth, err = serveAuth(io.Discard, a, token, false); err != nil {
				return nil, err
			}
		}
		if unixPolicy := *policy; service.Scheme == transport.SchemeUnix && unixPolicy != nil {
			*policy = peer.PolicyFunc(func(p *peer.Peer) error {
				if !p.HasCred {
					return nil // a network peer: the token decides
				}
				return peer.Authorize(unixPolicy, p)
			})
		}
	}
	l, err := transport.Listen(addr, &transport.ListenConfig{Mode: mode, Policy: peer.AllowAll(), TLS: tlsConf, WebSocket: wsOptions(*auth), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", listenError(a, err))
	}
	return l, nil
}

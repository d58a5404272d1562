package rpc

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/warrenipc/warren/transport"
)

// HTTPClient returns an *http.Client whose every request goes to addr, a
// warren address (unix:///run/app.sock, unix:@name, tcp://host:port,
// tls://host:port), whatever the host in the request's URL: the pattern of
// local APIs such as Docker's, where http://localhost/... names a path on
// the socket (over tcp to a loopback warren server, use http://warren/ or
// http://localhost/: it checks the Host, see ServerOptions.AllowedHosts).
// Connections are made with transport.Dial and cfg, so its
// checks of the server (socket owner and mode, ServerPolicy) run on every
// connection, and tls:// addresses speak TLS under plain http:// URLs.
//
// It speaks HTTP/1.1 and keeps idle connections for reuse; call
// CloseIdleConnections when done with it. The server can be a warren
// rpc.Server (methods are POST /Service/Method, in the Connect protocol) or
// any HTTP server listening on addr.
func HTTPClient(addr string, cfg *transport.DialConfig) *http.Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return transport.Dial(ctx, addr, cfg)
	}
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		DialTLSContext:      dial, // so that https:// URLs work too: TLS is transport's (tls://)
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}}
}

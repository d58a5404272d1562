package main

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/transport"
)

// The token of network servers: warren serve's --token and --no-auth, and
// the --token flag (or WARREN_TOKEN) of call, list and ping.

// clientToken is the token call, list and ping send; set by --token, else
// read from WARREN_TOKEN when dialing.
var clientToken string

// tokenFlag adds --token to a client command's flags.
func tokenFlag(fs *flag.FlagSet) {
	fs.StringVar(&clientToken, "token", "", "token for a server that requires one (default $WARREN_TOKEN)")
}

// token is the token the client commands send, or "".
func token() string {
	if clientToken != "" {
		return clientToken
	}
	return os.Getenv("WARREN_TOKEN")
}

// bearer adds the token, if any, to every request of an HTTP client.
type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if t := token(); t != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+t)
	}
	return b.next.RoundTrip(r)
}

// clientOptions adds the token, if any, to a client's options.
func clientOptions(o *rpc.ClientOptions) *rpc.ClientOptions {
	o.Token = token()
	o.Settings.ShmRing = ringSize(clientShmRing)
	return o
}

// clientShmRing is set by --shm-ring on call and ping.
var clientShmRing bool

// shmRingFlag adds --shm-ring to fs, setting on.
func shmRingFlag(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "shm-ring", false, "move frames onto shared-memory rings when the other side asks too (Linux, unix sockets; see PROTOCOL.md)")
}

// ringSize is the ring size --shm-ring asks for, or 0.
func ringSize(on bool) uint32 {
	if on {
		return 256 << 10
	}
	return 0
}

// serveAuth decides the token policy of a server on a, and says what it
// decided on w. Network addresses require a token: token, or a random one;
// noAuth turns that off, on loopback addresses only.
func serveAuth(w io.Writer, a transport.Addr, token string, noAuth bool) (*rpc.TokenAuth, error) {
	if a.Scheme == transport.SchemeUnix {
		if token != "" {
			// Asked for: unix peers must show it too.
			return &rpc.TokenAuth{Token: token, Unix: true}, nil
		}
		if noAuth {
			return nil, &usageError{cmd: "serve", msg: "--no-auth is for network addresses: a unix socket's callers are checked by their credentials (see --allow-uid)"}
		}
		return nil, nil
	}
	if noAuth {
		if token != "" {
			return nil, &usageError{cmd: "serve", msg: "--token and --no-auth exclude each other"}
		}
		host, _, err := net.SplitHostPort(a.Address)
		ip := net.ParseIP(host)
		if err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return nil, &usageError{cmd: "serve", msg: fmt.Sprintf("--no-auth is allowed on loopback addresses only (127.0.0.1, ::1, localhost), not %s", a.Address)}
		}
		fmt.Fprintln(w, "warren serve: WARNING: --no-auth: every local user and process, and every page a browser on this machine opens that passes the origin check, can call this server")
		return nil, nil
	}
	if token == "" {
		token = newToken()
	}
	return &rpc.TokenAuth{Token: token}, nil
}

// pageURL is the address to open in a browser: the listener's, with
// 127.0.0.1 for an unspecified host, https for tls and wss, and the token
// if there is one.
func pageURL(a transport.Addr, l net.Addr, auth *rpc.TokenAuth) string {
	host, port, err := net.SplitHostPort(l.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http://"
	if a.Scheme == transport.SchemeTLS {
		scheme = "https://"
	}
	u := scheme + net.JoinHostPort(host, port) + "/"
	if auth != nil {
		u += "?token=" + auth.Token
	}
	return u
}

// newToken returns a random token of 256 bits, base64url-encoded.
func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// wsOptions is the WebSocket handshake of a ws:// or wss:// listener: the
// origin check, the "warren" subprotocol and, with auth, the token, which a
// browser offers as the subprotocol "warren.bearer.TOKEN" (it cannot set
// headers on a WebSocket), and other clients send as
// "Authorization: Bearer TOKEN". A handshake without it is refused (401);
// calls on the connection are checked too.
func wsOptions(auth *rpc.TokenAuth) *transport.WebSocketOptions {
	o := &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin, Subprotocols: []string{"warren"}}
	if auth != nil {
		o.Authorize = func(r *http.Request) error {
			if upgradeHasToken(r, auth.Token) {
				return nil
			}
			return errors.New("this server requires a token: send \"Authorization: Bearer TOKEN\" (warren call --token, or WARREN_TOKEN), or the subprotocol warren.bearer.TOKEN")
		}
	}
	return o
}

// upgradeHasToken reports whether a WebSocket upgrade carries token, in its
// Authorization header, the page's cookie or a subprotocol.
func upgradeHasToken(r *http.Request, token string) bool {
	same := func(v string) bool { return subtle.ConstantTimeCompare([]byte(v), []byte(token)) == 1 }
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && same(v) {
		return true
	}
	_, port, _ := net.SplitHostPort(r.Host)
	if c, err := r.Cookie("warren-token-" + port); err == nil && same(c.Value) {
		return true
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(p), "warren.bearer."); ok && same(v) {
				return true
			}
		}
	}
	return false
}

// Package tokenauth holds the parts of rpc.TokenAuth that read an HTTP
// request: where a token may travel and how it is compared.
package tokenauth

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
)

// ProtocolPrefix starts the WebSocket subprotocol that carries a token:
// "warren.bearer.TOKEN".
const ProtocolPrefix = "warren.bearer."

// Cookie is the name of the cookie that keeps the token in a browser for a
// server reached at host ("127.0.0.1:7000"): cookies are shared by every
// port of a host, so the port is part of the name. A browser still sends
// the cookie to the other ports of that host: a server listening on one of
// them receives the token.
func Cookie(host string) string {
	_, port, err := net.SplitHostPort(host)
	if err != nil {
		port = ""
	}
	return "warren-token-" + port
}

// Match reports whether v is token, in constant time.
func Match(v, token string) bool {
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(token)) == 1
}

// Bearer reports whether an "authorization" value is "Bearer TOKEN".
func Bearer(v, token string) bool {
	const p = "bearer "
	return len(v) > len(p) && strings.EqualFold(v[:len(p)], p) && Match(strings.TrimSpace(v[len(p):]), token)
}

// InRequest reports whether r carries token in its Authorization header,
// its cookie, or (for a WebSocket upgrade, ws) a subprotocol. The query
// parameter is the caller's to check.
func InRequest(r *http.Request, token string, ws bool) bool {
	for _, v := range r.Header.Values("Authorization") {
		if Bearer(v, token) {
			return true
		}
	}
	if c, err := r.Cookie(Cookie(r.Host)); err == nil && Match(c.Value, token) {
		return true
	}
	if ws {
		for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
			for t := range strings.SplitSeq(v, ",") {
				if t, found := strings.CutPrefix(strings.TrimSpace(t), ProtocolPrefix); found && Match(t, token) {
					return true
				}
			}
		}
	}
	return false
}

// WantsHTML reports whether a request asks for a page (a browser's
// navigation) rather than data.
func WantsHTML(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/html") {
			return true
		}
	}
	return false
}

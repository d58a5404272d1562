package rpc

import (
	"context"
	"io"
	"net/http"
	"net/url"

	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/tokenauth"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// TokenAuth is an authentication policy for servers reachable over a
// network, where peers have no kernel credentials: every call, HTTP request
// and WebSocket upgrade must carry a secret token. Set it in
// ServerOptions.Auth.
//
// The token travels, in order of preference:
//
//   - as call metadata "authorization: Bearer TOKEN", on every warren call
//     (any transport, including WebSocket);
//   - in HTTP requests (Connect calls, the page, WebSocket upgrades), as the
//     header "Authorization: Bearer TOKEN", as the cookie
//     "warren-token-PORT" that a browser keeps, in the query parameter "token" (a GET that asks
//     for HTML and carries a valid token gets the cookie, HttpOnly and, over
//     TLS, Secure, and is redirected to the same URL without it), or, for a
//     WebSocket upgrade, as the subprotocol "warren.bearer.TOKEN" (browsers
//     cannot set headers on a WebSocket; the server then selects the
//     subprotocol "warren").
//
// Calls that arrive over an HTTP request that carried the token are
// authenticated by it. Peers of unix sockets (those with kernel
// credentials) are exempt unless Unix is set: the socket file's
// permissions and ServerOptions.Policy decide who they are. A Go client
// sends a token with ClientOptions.Token.
type TokenAuth struct {
	// Token is the secret: at least 128 random bits, such as 32 bytes from
	// crypto/rand, base64url-encoded.
	Token string
	// Unix requires the token from unix-socket peers too.
	Unix bool
}

// tokenInterceptors returns client interceptors that send token as call
// metadata "authorization: Bearer TOKEN" on every call (ClientOptions.Token).
func tokenInterceptors(token string) (UnaryClientInterceptor, StreamClientInterceptor) {
	md := WithMetadata(Metadata{"authorization": {"Bearer " + token}})
	return func(ctx context.Context, method string, req, resp any, next UnaryInvoker, opts ...CallOption) error {
			return next(ctx, method, req, resp, append(opts, md)...)
		}, func(ctx context.Context, method string, opts []CallOption, open func(ctx context.Context, opts ...CallOption) error) error {
			return open(ctx, append(opts, md)...)
		}
}

// authedKey marks the context of a call that arrived over an
// authenticated HTTP request.
type authedKey struct{}

func (a *TokenAuth) exempt(p *peer.Peer) bool {
	return !a.Unix && p != nil && p.HasCred
}

var errNoToken = status.New(status.Unauthenticated,
	`this server requires a token: send call metadata "authorization: Bearer TOKEN" (warren call --token, or WARREN_TOKEN), or open the URL that warren serve printed`)

// allowCall is the per-call check, run by the interceptors below.
func (a *TokenAuth) allowCall(ctx context.Context) error {
	// A call of an HTTP request that carried the token (the request's
	// context is the call's parent), or of a WebSocket session whose
	// upgrade carried it (the connection is marked).
	if c, _ := ctx.Value(callKey{}).(*serverCall); c != nil && (c.parent != nil && c.parent.Value(authedKey{}) != nil ||
		c.conn != nil && c.conn.tokenOK.Load()) {
		return nil
	}
	if p, ok := peer.FromContext(ctx); ok && a.exempt(p) {
		return nil
	}
	if a.bearerIn(IncomingMetadata(ctx)) {
		return nil
	}
	return errNoToken
}

// bearerIn reports whether md carries "authorization: Bearer TOKEN".
func (a *TokenAuth) bearerIn(md Metadata) bool {
	for _, v := range md["authorization"] {
		if tokenauth.Bearer(v, a.Token) {
			return true
		}
	}
	return false
}

// allowMetadata is the token check of a call on sc from its wire metadata
// block, for calls refused before they reach the interceptors.
func (a *TokenAuth) allowMetadata(sc *serverConn, block []byte) bool {
	if a.exempt(sc.peer) || sc.tokenOK.Load() {
		return true
	}
	md, _ := parseMetadata(block)
	return a.bearerIn(md)
}

func (a *TokenAuth) unary(ctx context.Context, req any, info *CallInfo, next UnaryHandler) (any, error) {
	if err := a.allowCall(ctx); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (a *TokenAuth) stream(ctx context.Context, info *CallInfo, next func(ctx context.Context) error) error {
	if err := a.allowCall(ctx); err != nil {
		return err
	}
	return next(ctx)
}

// applyAuth installs the token check as the outermost interceptors, and
// lets WebSocket clients that offer subprotocols (browsers passing the
// token) be answered with "warren".
func applyAuth(o *ServerOptions) {
	a := o.Auth
	if a == nil {
		return
	}
	if a.Token == "" {
		panic("warren: ServerOptions.Auth with an empty Token")
	}
	o.Interceptors = append([]UnaryServerInterceptor{a.unary}, o.Interceptors...)
	o.StreamInterceptors = append([]StreamServerInterceptor{a.stream}, o.StreamInterceptors...)
}

// defaultWebSocketOptions are the WebSocket options of the HTTP bridge when
// ServerOptions.WebSocket is nil.
var defaultWebSocketOptions = &transport.WebSocketOptions{CheckOrigin: transport.SameHostOrigin, Subprotocols: []string{"warren"}}

// authorizeHTTP checks an HTTP request against s's TokenAuth. It returns
// the request to serve (marked authenticated), or nil after answering it:
// 401 without a valid token, or a redirect that moves a token from the URL
// into a cookie.
func (s *Server) authorizeHTTP(w http.ResponseWriter, r *http.Request, p *peer.Peer) *http.Request {
	a := s.opts.Auth
	if a == nil || a.exempt(p) {
		return r
	}
	ok := tokenauth.InRequest(r, a.Token, transport.IsWebSocketUpgrade(r))
	q := r.URL.Query()
	if t := q.Get("token"); t != "" && tokenauth.Match(t, a.Token) {
		ok = true
		if r.Method == http.MethodGet && !transport.IsWebSocketUpgrade(r) && tokenauth.WantsHTML(r) {
			// Keep it in a cookie and take it out of the address bar and
			// the history.
			// HttpOnly: the page's scripts never see it (the browser
			// sends it with the WebSocket upgrade); Secure over TLS.
			secure := r.TLS != nil || p != nil && p.TLS != nil
			http.SetCookie(w, &http.Cookie{Name: tokenauth.Cookie(r.Host), Value: a.Token, Path: "/",
				SameSite: http.SameSiteStrictMode, HttpOnly: true, Secure: secure})
			q.Del("token")
			u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return nil
		}
	}
	if !ok {
		s.met.CallRefused(metrics.CallNoToken)
		w.Header().Set("WWW-Authenticate", `Bearer realm="warren"`)
		if r.Method == http.MethodGet && tokenauth.WantsHTML(r) && !transport.IsWebSocketUpgrade(r) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, bridgecore.UnauthorizedPage)
			return nil
		}
		bridgecore.DrainRefused(w, r)
		bridgecore.WriteProtocolError(w, r, 0, errNoToken)
		return nil
	}
	return r.WithContext(context.WithValue(r.Context(), authedKey{}, true))
}

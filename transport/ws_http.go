package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/ws"

	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/wire"
)

// WebSocketOptions configures the server side of the WebSocket opening
// handshake: in ListenConfig.WebSocket for ws and wss listeners, and as the
// argument of UpgradeWebSocket. A nil *WebSocketOptions gives the defaults.
type WebSocketOptions struct {
	// CheckOrigin decides whether a handshake may proceed, given the value
	// of the request's Origin header ("" when there is none) and the
	// request. Refused handshakes are answered 403 Forbidden. Nil allows
	// every origin.
	//
	// Browsers send the origin of the page that opens a WebSocket, and let
	// any page open one to any server: a server that browsers reach, and
	// that trusts something a browser carries along (cookies, a
	// network position on localhost or behind a firewall), should check
	// it. SameHostOrigin allows only pages served from the host the request
	// is addressed to, and clients that are not browsers.
	CheckOrigin func(origin string, r *http.Request) bool

	// Authorize, if set, decides whether a handshake may proceed once its
	// origin is allowed, such as by a token the request carries. A
	// handshake it refuses is answered 401 Unauthorized with its error's
	// text.
	Authorize func(r *http.Request) error

	// Subprotocols lists the subprotocols (Sec-WebSocket-Protocol) the
	// server accepts. The first one the client offers that is in the list
	// is selected. Browsers that offer subprotocols fail the connection
	// when none is selected. Empty selects none.
	Subprotocols []string
}

// SameHostOrigin is a WebSocketOptions.CheckOrigin that allows requests
// without an Origin header (clients that are not browsers) and those whose
// Origin names the host and port the request is addressed to (its Host
// header), compared without regard to case. It refuses the rest, including
// the opaque origin "null".
func SameHostOrigin(origin string, r *http.Request) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// WebSocketHandshakeError reports a WebSocket opening handshake that failed:
// on the server, a request it refused, answering with Status; on the
// client, a server that did not answer 101 Switching Protocols or answered
// it badly.
type WebSocketHandshakeError struct {
	Status int    // the HTTP status sent (server) or received (client); 0 if none
	Path   string // the request's path
	Reason string // what happened
	Err    error  // the underlying error, if any
}

func (e *WebSocketHandshakeError) Error() string {
	s := "warren: websocket handshake: " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *WebSocketHandshakeError) Unwrap() error { return e.Err }

// IsWebSocketUpgrade reports whether r asks to open a WebSocket connection:
// a GET request whose Connection header has the token "upgrade" and whose
// Upgrade header has the token "websocket", both without regard to case.
// An HTTP server that serves other requests too calls it to decide when to
// call UpgradeWebSocket.
func IsWebSocketUpgrade(r *http.Request) bool {
	return r.Method == http.MethodGet &&
		headerHasToken(r.Header, "Connection", "upgrade") &&
		headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether a comma-separated list in header key has
// token, without regard to case.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h[key] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// UpgradeWebSocket runs the server side of the WebSocket opening handshake
// (RFC 6455) for r and returns the connection, over which warren frames, or
// any byte stream, then travel in binary messages. It is for HTTP servers
// that serve WebSocket next to other requests, such as the HTTP bridge of
// package rpc; a ws or wss Listener runs the same handshake itself.
//
// A request that is not a valid opening handshake is answered with an HTTP
// error and UpgradeWebSocket returns a *WebSocketHandshakeError: 426 Upgrade
// Required if it does not ask for an upgrade (see IsWebSocketUpgrade), 400
// Bad Request for a bad Sec-WebSocket-Key or HTTP version, a request body,
// or a Sec-WebSocket-Version other than 13 (then with the header
// "Sec-WebSocket-Version: 13"), and 403 Forbidden when opts.CheckOrigin
// refuses it. Otherwise UpgradeWebSocket hijacks the connection from w,
// answers 101 Switching Protocols and returns a *Conn that owns the
// hijacked connection; bytes the HTTP server had already read past the
// request are not lost. The caller must not use w or r.Body afterwards.
//
// The *Conn keeps the identity of the hijacked connection: the Peer of the
// first connection that has a Peer() *peer.Peer method in the chain from
// the hijacked one through NetConn() methods (a *Conn from Listen has one);
// failing that the Peer in r's context (peer.FromContext, as set by an
// http.Server's ConnContext); failing that a Peer made from the
// connection's addresses and, for Unix sockets, its kernel credentials.
// Its Handshake method does nothing, and NetConn returns the hijacked
// connection.
func UpgradeWebSocket(w http.ResponseWriter, r *http.Request, opts *WebSocketOptions) (net.Conn, error) {
	conn, buffered, err := upgradeHTTP(w, r, opts)
	if err != nil {
		return nil, err
	}
	wc := newWSConn(conn, false)
	wc.start(buffered)
	c := &Conn{raw: conn, ws: wc, io: wc, peer: hijackedPeer(conn, r)}
	return c, nil
}

// hijackedPeer returns the identity of the peer of a connection hijacked
// from an HTTP server; see UpgradeWebSocket.
func hijackedPeer(conn net.Conn, r *http.Request) *peer.Peer {
	for c := conn; c != nil; {
		if pc, ok := c.(interface{ Peer() *peer.Peer }); ok {
			if p := pc.Peer(); p != nil {
				return p
			}
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	if p, ok := peer.FromContext(r.Context()); ok {
		return p
	}
	p := &peer.Peer{Network: conn.LocalAddr().Network(), LocalAddr: conn.LocalAddr(), RemoteAddr: conn.RemoteAddr()}
	peer.ReadCred(conn, p)
	return p
}

// upgradeHTTP checks an opening handshake and answers it: with an error
// written to w, or by hijacking the connection and answering 101. It
// returns the hijacked connection and the bytes read past the request.
func upgradeHTTP(w http.ResponseWriter, r *http.Request, opts *WebSocketOptions) (net.Conn, []byte, error) {
	if opts == nil {
		opts = &WebSocketOptions{}
	}
	path := r.URL.EscapedPath()
	refuse := func(code int, reason string, header ...string) (net.Conn, []byte, error) {
		h := w.Header()
		for i := 0; i+1 < len(header); i += 2 {
			h.Set(header[i], header[i+1])
		}
		h.Set("Connection", "close")
		http.Error(w, "warren: "+reason, code)
		return nil, nil, &WebSocketHandshakeError{Status: code, Path: path, Reason: fmt.Sprintf("refused %s with %d %s: %s", path, code, http.StatusText(code), reason)}
	}
	switch {
	case !IsWebSocketUpgrade(r):
		return refuse(http.StatusUpgradeRequired, "this endpoint speaks WebSocket only: send a GET request with \"Connection: Upgrade\" and \"Upgrade: websocket\"",
			"Upgrade", "websocket", "Sec-WebSocket-Version", "13")
	case !r.ProtoAtLeast(1, 1):
		return refuse(http.StatusBadRequest, "WebSocket needs HTTP/1.1 or later")
	case r.Host == "":
		return refuse(http.StatusBadRequest, "missing Host header")
	case len(r.Header.Values("Sec-WebSocket-Version")) != 1 || r.Header.Get("Sec-WebSocket-Version") != "13":
		return refuse(http.StatusBadRequest, "unsupported Sec-WebSocket-Version "+strconv.Quote(r.Header.Get("Sec-WebSocket-Version"))+": this server speaks version 13 (RFC 6455)",
			"Sec-WebSocket-Version", "13")
	case !validKey(r.Header.Values("Sec-WebSocket-Key")):
		return refuse(http.StatusBadRequest, "Sec-WebSocket-Key is not the base64 encoding of 16 bytes")
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return refuse(http.StatusBadRequest, "an opening handshake has no body")
	case opts.CheckOrigin != nil && !opts.CheckOrigin(r.Header.Get("Origin"), r):
		return refuse(http.StatusForbidden, "origin "+strconv.Quote(r.Header.Get("Origin"))+" is not allowed")
	}
	if opts.Authorize != nil {
		if err := opts.Authorize(r); err != nil {
			return refuse(http.StatusUnauthorized, strings.TrimPrefix(err.Error(), "warren: "), "WWW-Authenticate", `Bearer realm="warren"`)
		}
	}
	u := ws.HTTPUpgrader{}
	if len(opts.Subprotocols) > 0 {
		u.Protocol = func(p string) bool { return slices.Contains(opts.Subprotocols, p) }
	}
	conn, rw, _, err := u.Upgrade(r, w)
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, nil, &WebSocketHandshakeError{Path: path, Reason: "upgrade " + path, Err: err}
	}
	var buffered []byte
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Reader.Peek(n)
		buffered = bytes.Clone(b)
	}
	return conn, buffered, nil
}

// validKey reports whether a request's Sec-WebSocket-Key values are one
// base64-encoded 16-byte nonce.
func validKey(v []string) bool {
	if len(v) != 1 || len(v[0]) != 24 {
		return false
	}
	var nonce [18]byte
	n, err := base64.StdEncoding.Decode(nonce[:], []byte(v[0]))
	return err == nil && n == 16
}

// wsAccept is a ws or wss Listener's side of the opening handshake.
type wsAccept struct {
	path string // the path served, as in the address
	opts *WebSocketOptions
}

// errWarrenPreface is the error of an opening handshake that starts with
// warren's preface: a client dialed a ws address as tcp.
var errWarrenPreface = errors.New("a warren preface, not an HTTP request")

// maxHandshakeRequest bounds the opening handshake request a Listener
// reads, headers included.
const maxHandshakeRequest = 16 << 10

// accept reads the client's opening handshake from c's connection and
// answers it, bounded by ctx.
func (c *wsConn) accept(ctx context.Context, a *wsAccept) (err error) {
	stop := watchContext(ctx, c.conn)
	defer func() {
		if ctxErr := stop(); ctxErr != nil && err != nil {
			err = &WebSocketHandshakeError{Path: a.path, Reason: "read the opening handshake", Err: ctxErr}
		}
	}()
	lr := &io.LimitedReader{R: c.conn, N: maxHandshakeRequest}
	br := bufio.NewReaderSize(lr, 4096)
	resp := &connResponse{conn: c.conn, br: br, header: make(http.Header)}
	if first, _ := br.Peek(len(wire.Magic)); string(first) == wire.Magic {
		return &WebSocketHandshakeError{Path: a.path, Reason: "read the opening handshake", Err: errWarrenPreface}
	}
	r, err := http.ReadRequest(br)
	if err != nil {
		hsErr := &WebSocketHandshakeError{Path: a.path, Reason: "read the opening handshake", Err: err}
		switch {
		case lr.N == 0:
			hsErr.Status = http.StatusRequestHeaderFieldsTooLarge
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || isTimeout(err) || errors.Is(err, net.ErrClosed):
			return hsErr // nothing to answer
		default:
			hsErr.Status = http.StatusBadRequest
		}
		http.Error(resp, "warren: bad HTTP request", hsErr.Status)
		resp.send()
		return hsErr
	}
	if p, err := url.PathUnescape(a.path); err == nil && r.URL.Path != p {
		msg := fmt.Sprintf("no WebSocket endpoint at %s", r.URL.EscapedPath())
		resp.header.Set("Connection", "close")
		http.Error(resp, "warren: "+msg, http.StatusNotFound)
		resp.send()
		return &WebSocketHandshakeError{Status: http.StatusNotFound, Path: r.URL.EscapedPath(), Reason: msg}
	}
	conn, buffered, err := upgradeHTTP(resp, r, a.opts)
	if err != nil {
		resp.send()
		return err
	}
	_ = conn // c.conn, which resp hijacked
	c.start(buffered)
	return nil
}

// watchContext bounds I/O on conn by ctx's deadline and cancellation until
// stop is called. stop clears the deadline, and returns ctx's error if ctx
// ended meanwhile.
func watchContext(ctx context.Context, conn net.Conn) (stop func() error) {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	interrupted := make(chan struct{})
	stopAfter := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0))
		close(interrupted)
	})
	return func() error {
		var err error
		if !stopAfter() {
			<-interrupted
			err = ctx.Err()
		} else if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			err = context.DeadlineExceeded
		}
		conn.SetDeadline(time.Time{})
		return err
	}
}

// connResponse is the http.ResponseWriter of a Listener's opening
// handshake, which is read from the connection without an http.Server. It
// collects an error response until send writes it, or is hijacked.
type connResponse struct {
	conn   net.Conn
	br     *bufio.Reader // the reader of the request, with what it read past it
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *connResponse) Header() http.Header { return w.header }

func (w *connResponse) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *connResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

// Hijack makes the ResponseWriter usable by ws.HTTPUpgrader.
func (w *connResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(w.br, bufio.NewWriterSize(w.conn, 512)), nil
}

// send writes the response and closes the connection for writing, then
// reads until the client closes it or a short while passes, so that the
// response is not lost to a connection reset.
func (w *connResponse) send() {
	if w.status == 0 {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", w.status, http.StatusText(w.status))
	w.header.Set("Content-Length", strconv.Itoa(w.body.Len()))
	w.header.Set("Connection", "close")
	w.header.Write(&b)
	b.WriteString("\r\n")
	b.Write(w.body.Bytes())
	w.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := w.conn.Write(b.Bytes()); err != nil {
		return
	}
	if cw, ok := w.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	w.conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, w.conn)
}

// dialWebSocket runs the client side of the opening handshake on conn for
// a, bounded by ctx, and returns the connection ready.
func dialWebSocket(ctx context.Context, conn net.Conn, a Addr, header http.Header) (c *wsConn, err error) {
	stop := watchContext(ctx, conn)
	defer func() {
		if ctxErr := stop(); ctxErr != nil && err != nil {
			err = &WebSocketHandshakeError{Path: a.Path, Reason: "websocket handshake with " + a.Address, Err: ctxErr}
		}
	}()
	host := a.Address
	if i := strings.IndexByte(host, '%'); i >= 0 && strings.HasPrefix(host, "[") {
		// An IPv6 zone is local to this host: Host headers leave it out.
		host = host[:i] + host[strings.IndexByte(host, ']'):]
	}
	var status string
	var body []byte
	d := ws.Dialer{
		Host: host,
		OnStatusError: func(code int, reason []byte, resp io.Reader) {
			status = strconv.Itoa(code) + " " + string(reason)
			body = statusErrorBody(resp)
		},
	}
	if len(header) > 0 {
		d.Header = ws.HandshakeHeaderHTTP(header)
	}
	p, _ := url.PathUnescape(a.Path)
	br, _, err := d.Upgrade(conn, &url.URL{Path: p, RawPath: a.Path})
	if err != nil {
		return nil, handshakeError(a, err, status, body)
	}
	var buffered []byte
	if br != nil {
		buffered, _ = br.Peek(br.Buffered())
		buffered = bytes.Clone(buffered)
		ws.PutReader(br)
	}
	c = newWSConn(conn, true)
	c.start(buffered)
	return c, nil
}

// statusErrorBody returns the start of the body of an HTTP error response,
// if it is short text that has arrived.
func statusErrorBody(r io.Reader) []byte {
	resp, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.ContentLength <= 0 || resp.ContentLength > 1024 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return b
}

// handshakeError explains why a client's opening handshake failed.
func handshakeError(a Addr, err error, status string, body []byte) error {
	e := &WebSocketHandshakeError{Path: a.Path}
	var se ws.StatusError
	switch {
	case errors.As(err, &se):
		e.Status = int(se)
		e.Reason = fmt.Sprintf("server answered HTTP %s for %s", strings.TrimSpace(status), a.Path)
		if line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n"); line != "" {
			e.Reason += fmt.Sprintf(" (%q)", line)
		}
		switch e.Status {
		case http.StatusForbidden:
			e.Reason += ": the server refused this client or its Origin"
		case http.StatusUnauthorized:
			e.Reason += ": the server requires a token (warren call --token, WARREN_TOKEN, or rpc.ClientOptions.Token)"
		case http.StatusUpgradeRequired:
			e.Reason += ": the server wants another WebSocket version or request"
		default:
			e.Reason += ": is it a warren server with WebSocket enabled at this path?"
		}
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		e.Reason, e.Err = "server closed the connection during the handshake (is it a WebSocket server?)", err
	case errors.Is(err, ws.ErrMalformedResponse) || errors.Is(err, ws.ErrHandshakeBadProtocol):
		e.Reason, e.Err = "server did not answer with HTTP/1.1 (is it a WebSocket server?)", err
	default:
		e.Reason, e.Err = "bad answer from the server", err
	}
	return e
}

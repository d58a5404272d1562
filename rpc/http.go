package rpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// The HTTP bridge. A connection whose first bytes are an HTTP request
// (HTTP/1.x, or the HTTP/2 preface) is handed by mux.Server
// (Config.KeepHTTP) and handed by serveSession to serveHTTPConn, which serves it with a net/http server
// of its own: keep-alive, chunked bodies, Expect: 100-continue, HTTP/2 and
// the rest are net/http's. Each request is a call in the Connect, gRPC or
// gRPC-Web protocol and goes through the same path as a warren call: the
// connection was authorized and counted by ServeConn, the call is admitted
// by serverConn.admit (method policy, concurrency limits, rate limit), a
// unary call runs the registered handler through serverCall.invoke
// (interceptors, panics), and a streaming call runs serverCall.runStream
// with a connectStream in place of the mux stream. This file serves Connect
// unary calls over HTTP/1.1 by hand; connect.go serves the rest with
// connectrpc.com/connect. See ARCHITECTURE.md, "HTTP bridge", and
// PROTOCOL.md, "HTTP (Connect)".

// httpIdleTimeout closes a keep-alive connection idle for this long. It is
// longer than net/http's client default (90 s), so that a client, not the
// server, normally ends an idle connection.
const httpIdleTimeout = 2 * time.Minute

// Content types, as header values (shared: net/http does not modify them).
var (
	ctJSON       = []string{"application/json"}
	ctProto      = []string{"application/proto"}
	ctRaw        = []string{"application/octet-stream"}
	hdrClose     = []string{"close"}
	hdrAllowPost = []string{"POST"}
)

// httpEncoding is what a request's Content-Type asks for.
type httpEncoding struct {
	codec  uint8 // codec.IDJSON, IDProto or IDRaw
	stream bool  // Connect streaming (served by connect.go)
}

// contentType returns the response content type for e, a unary call.
func (e httpEncoding) contentType() []string {
	switch {
	case e.codec == codec.IDProto:
		return ctProto
	case e.codec == codec.IDRaw:
		return ctRaw
	}
	return ctJSON
}

// parseContentType maps a request's Content-Type to an encoding. No type,
// and the form type curl sends with -d, are read as JSON.
func parseContentType(ct string) (httpEncoding, bool) {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	eq := strings.EqualFold
	switch {
	case mt == "" || eq(mt, "application/json") || eq(mt, "application/x-www-form-urlencoded"):
		return httpEncoding{codec: codec.IDJSON}, true
	case eq(mt, "application/proto"):
		return httpEncoding{codec: codec.IDProto}, true
	case eq(mt, "application/octet-stream"):
		return httpEncoding{codec: codec.IDRaw}, true
	case eq(mt, "application/connect+json"):
		return httpEncoding{codec: codec.IDJSON, stream: true}, true
	case eq(mt, "application/connect+proto"):
		return httpEncoding{codec: codec.IDProto, stream: true}, true
	}
	return httpEncoding{}, false
}

// connListener is a net.Listener that accepts one connection, then blocks
// until that connection has ended (or been hijacked).
type connListener struct {
	mu   sync.Mutex // protects conn
	conn net.Conn
	addr net.Addr
	once sync.Once
	done chan struct{}
}

func (l *connListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.conn
	l.conn = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *connListener) Close() error   { return nil } // http.Server.Serve closes it on return
func (l *connListener) Addr() net.Addr { return l.addr }
func (l *connListener) end()           { l.once.Do(func() { close(l.done) }) }

// serveHTTPConn serves the HTTP requests of one connection, on the calling
// goroutine (ServeConn's), and returns when the connection has ended and
// every handler it ran has returned. refuse, if set, is why the connection
// was refused: each request is then answered with that error and the
// connection closed.
func (s *Server) serveHTTPConn(sc *serverConn, conn net.Conn, refuse string) {
	l := &connListener{conn: &smuggleGuard{Conn: conn}, addr: conn.LocalAddr(), done: make(chan struct{})}
	h := &httpConn{srv: s, sc: sc}
	readHeader := s.handshakeTimeout()
	if refuse != "" {
		h.refuseCode, h.refuseMsg = status.ResourceExhausted, refuse
		if peer.Authorize(s.opts.Policy, sc.peer) != nil {
			h.refuseCode = status.PermissionDenied
		}
		readHeader = min(readHeader, time.Second) // it is not counted: bound it
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // prior knowledge: served by connect.go
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeader,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    int(s.opts.Settings.WithDefaults().MaxFrameSize),
		Protocols:         protocols,
		BaseContext:       func(net.Listener) context.Context { return sc.ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.end()
			}
		},
		ErrorLog: s.httpErrorLog(),
	}
	hs.Serve(l)
	h.active.Wait() // a handler that hijacked the connection may still run
}

// httpErrorLog returns the logger net/http reports its own errors to.
func (s *Server) httpErrorLog() *log.Logger {
	s.httpLogOnce.Do(func() { s.httpLog = slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn) })
	return s.httpLog
}

// crossOrigin refuses state-changing requests that a browser sends on
// behalf of a page from another origin (a form POSTed to a warren address
// on localhost): the bridge reads form-encoded bodies as JSON, which would
// otherwise make every method reachable by cross-site request forgery.
// Requests from non-browser clients carry neither Sec-Fetch-Site nor
// Origin and pass.
var crossOrigin = http.NewCrossOriginProtection()

// httpConn is the http.Handler of one connection.
type httpConn struct {
	srv        *Server
	sc         *serverConn
	refuseCode status.Code // non-OK when the connection was refused
	refuseMsg  string
	active     sync.WaitGroup // handlers running
}

func (h *httpConn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.active.Add(1)
	defer h.active.Done()
	if h.refuseCode != status.OK {
		w.Header()["Connection"] = hdrClose
		writeUnaryError(w, 0, status.New(h.refuseCode, h.refuseMsg), nil, nil)
		return
	}
	if len(r.TransferEncoding) > 0 {
		// No request after a chunked one: see smuggleGuard.
		w.Header()["Connection"] = hdrClose
	}
	if se := h.srv.checkHost(h.sc, r); se != nil {
		writeUnaryError(w, 0, se, nil, nil)
		return
	}
	if h.srv.opts.CORS != nil && h.srv.serveCORS(w, r) {
		return // a preflight request, answered
	}
	if err := h.srv.crossOriginCheck(r); err != nil {
		writeUnaryError(w, 0, status.Errorf(status.PermissionDenied, "%v", err), nil, nil)
		return
	}
	if r = h.srv.authorizeHTTP(w, r, h.sc.peer); r == nil {
		return
	}
	if useConnectGo(r) || h.srv.bridgeAll {
		h.serveConnectGo(w, r)
		return
	}
	switch r.Method {
	case http.MethodPost:
		hd, _ := h.srv.lookupPath(r.URL.Path)
		if hd == nil { // reflection, health or an unknown method: connect.go
			h.serveConnectGo(w, r)
			return
		}
		h.call(w, r, hd, nil)
	case http.MethodGet, http.MethodHead:
		if transport.IsWebSocketUpgrade(r) {
			h.srv.serveWebSocket(h.sc, w, r)
			return
		}
		if r.URL.Path == "/" && (h.srv.opts.Page == nil || !wantsHTML(r)) {
			// The list of methods: a call of IntrospectionMethod.
			h.call(w, r, (*h.srv.handlers.Load())[IntrospectionMethod], emptyJSON)
			return
		}
		if h.srv.opts.Page != nil {
			h.srv.opts.Page.ServeHTTP(w, r)
			return
		}
		w.Header()["Allow"] = hdrAllowPost
		writeUnaryError(w, http.StatusMethodNotAllowed, status.Errorf(status.Unimplemented,
			"%s %s: methods are called with POST (GET / lists them)", r.Method, r.URL.Path), nil, nil)
	default:
		w.Header()["Allow"] = hdrAllowPost
		writePlainError(w, http.StatusMethodNotAllowed, r.Method+": methods are called with POST (GET / lists them)")
	}
}

var emptyJSON = []byte("{}")

// lookupPath returns the handler for a Connect path, /Service/Method or
// /Service.Method (nil if there is none), and the method name for messages.
func (s *Server) lookupPath(path string) (*handler, string) {
	p := strings.TrimPrefix(path, "/")
	slash := strings.IndexByte(p, '/')
	if slash < 0 {
		return (*s.handlers.Load())[p], p
	}
	var buf [128]byte
	key := append(buf[:0], p...)
	key[slash] = '.'
	if hd := (*s.handlers.Load())[string(key)]; hd != nil {
		return hd, hd.name
	}
	return nil, string(key)
}

// serveWebSocket upgrades an HTTP request to WebSocket and serves a warren
// session on the result, for as long as it lasts. The session belongs to
// sc, the connection the request came on, which is already authorized and
// counted: the upgrade is not another connection.
func (s *Server) serveWebSocket(sc *serverConn, w http.ResponseWriter, r *http.Request) {
	opts := s.opts.WebSocket
	if opts == nil {
		opts = defaultWebSocketOptions
	}
	conn, err := transport.UpgradeWebSocket(w, r, opts)
	if err != nil {
		return // UpgradeWebSocket has answered the request
	}
	if s.adoptWebSocket(sc, conn) {
		return // an event loop serves it
	}
	s.serveSession(sc, conn, "", false)
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// call serves a unary call of hd in Connect's unary protocol over
// HTTP/1.1 with an identity body: every other call goes to connect.go
// (useConnectGo). body, if set, is the request message instead of the
// request's body.
func (h *httpConn) call(w http.ResponseWriter, r *http.Request, hd *handler, body []byte) {
	s := h.srv
	enc, ok := parseContentType(r.Header.Get("Content-Type"))
	if body != nil {
		enc, ok = httpEncoding{codec: codec.IDJSON}, true
	}
	if !ok {
		w.Header()["Accept-Post"] = []string{"application/json, application/proto, application/connect+json, application/connect+proto, application/grpc, application/grpc-web"}
		writePlainError(w, http.StatusUnsupportedMediaType, fmt.Sprintf(
			"unsupported Content-Type %q: use application/json or application/proto, or application/connect+json or application/connect+proto for streaming methods", r.Header.Get("Content-Type")))
		return
	}
	fail := func(se *status.Error) { writeUnaryError(w, 0, se, nil, nil) }
	if isClosed(s.closed) {
		w.Header()["Connection"] = hdrClose
		fail(status.New(status.Unavailable, "server is shutting down"))
		return
	}
	if v := r.Header["Connect-Protocol-Version"]; len(v) > 0 && v[0] != "1" {
		fail(status.Errorf(status.InvalidArgument, "Connect-Protocol-Version %q is not supported (want 1)", v[0]))
		return
	}
	timeout, hasTimeout, err := parseTimeout(r.Header["Connect-Timeout-Ms"])
	if err != nil {
		fail(status.Errorf(status.InvalidArgument, "Connect-Timeout-Ms: %v", err))
		return
	}
	if hd.kind != kindUnary {
		writeUnaryError(w, http.StatusUnsupportedMediaType, status.Errorf(status.InvalidArgument,
			"%s is a %s method: call it with Content-Type application/connect+json or application/connect+proto and enveloped messages", hd.name, hd.kind), nil, nil)
		return
	}
	cd, code, msg := h.sc.admit(hd, enc.codec)
	if code != status.OK {
		fail(status.New(code, msg))
		return
	}
	c := &serverCall{conn: h.sc, h: hd, codec: cd, parent: r.Context()}
	if hasTimeout {
		c.deadline = time.Now().Add(timeout)
	}
	c.md = appendRequestMetadata(r.Header)
	c.state.Store(callStarted)
	h.unary(w, r, c, enc, body)
}

// maxMessage is the largest request message the server accepts.
func (s *Server) maxMessage() uint32 { return s.opts.Settings.WithDefaults().MaxMessageSize }

// unary runs an admitted unary call and writes its reply.
func (h *httpConn) unary(w http.ResponseWriter, r *http.Request, c *serverCall, enc httpEncoding, body []byte) {
	s := h.srv
	var in *pool.Buf
	req := body
	var se *status.Error
	unread := false // the body was not read whole
	if req == nil {
		var held int64
		in, held, se = readBodyBudgeted(w, r, s.maxMessage())
		defer bodyBytes.Add(-held) // after pool.Put(in) below
		unread = se != nil
		if in != nil {
			req = in.B
		}
		if len(req) == 0 && enc.codec == codec.IDJSON {
			req = emptyJSON // an empty body is an empty message, as in protobuf
		}
	}
	var out []byte
	var scratch *pool.Buf
	if se == nil {
		scratch = pool.Get(512)
		var herr error
		out, herr = c.invoke(req, scratch.B[:0])
		se = status.FromError(herr)
	}
	c.mdMu.Lock()
	header, trailer := c.header.pairs(), c.trailer.pairs()
	c.mdMu.Unlock()
	// The call stops counting before its reply can reach the client, as
	// a warren call does (mux.Config.OnEnd), so that a client that calls
	// again the moment it has the reply, on this connection or another,
	// is not refused within the limits.
	c.replyHTTP()
	defer c.repliedHTTP() // even if writing panicked
	hdr := w.Header()
	if unread || isClosed(s.closed) {
		// The body was left unread, or the server is shutting down: no
		// keep-alive.
		hdr["Connection"] = hdrClose
	}
	if se != nil {
		writeUnaryError(w, 0, se, header, trailer)
	} else {
		setMetadataHeaders(hdr, header, "")
		setMetadataHeaders(hdr, trailer, "Trailer-")
		hdr["Content-Type"] = enc.contentType()
		hdr["Content-Length"] = contentLength(len(out))
		w.WriteHeader(http.StatusOK)
		w.Write(out)
	}
	w.(http.Flusher).Flush()
	c.cancel(context.Canceled)
	pool.Put(in) // after the reply: a raw reply may alias the request
	pool.Put(scratch)
}

// bodyError turns an error reading the request into a status.
func bodyError(r *http.Request, err error) *status.Error {
	if r.Context().Err() != nil {
		return &status.Error{Code: status.Canceled, Message: "the client went away", Cause: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &status.Error{Code: status.InvalidArgument, Message: "request body ended early", Cause: err}
	}
	return &status.Error{Code: status.Unavailable, Message: "reading the request: " + err.Error(), Cause: err}
}

// parseTimeout reads Connect-Timeout-Ms: at most 10 digits of milliseconds.
func parseTimeout(v []string) (time.Duration, bool, error) {
	if len(v) == 0 {
		return 0, false, nil
	}
	if len(v[0]) == 0 || len(v[0]) > 10 {
		return 0, false, fmt.Errorf("%q is not 1 to 10 digits", v[0])
	}
	ms, err := strconv.ParseUint(v[0], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%q is not a number of milliseconds", v[0])
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// forwarded reports whether a request header (canonical key) becomes
// call metadata: all but the hop-by-hop headers and those of the Connect
// and gRPC protocols and of the body.
func forwarded(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect", "Accept-Encoding", "Host":
		return false
	}
	return !strings.HasPrefix(k, "Content-") && !strings.HasPrefix(k, "Connect-") && !strings.HasPrefix(k, "Grpc-")
}

// appendRequestMetadata returns the metadata block of a request's headers,
// keys in lower case (as warren metadata is by convention); nil for none.
func appendRequestMetadata(h http.Header) []byte {
	n, size := 0, 0
	for k, vs := range h {
		if forwarded(k) {
			for _, v := range vs {
				n++
				size += 2*binary.MaxVarintLen32 + len(k) + len(v)
			}
		}
	}
	if n == 0 {
		return nil
	}
	b := make([]byte, 0, binary.MaxVarintLen32+size)
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		if !forwarded(k) {
			continue
		}
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(k)))
			for i := range len(k) {
				c := k[i]
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				b = append(b, c)
			}
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// setMetadataHeaders adds metadata pairs to h as headers, their names
// prefixed with prefix ("Trailer-" for the trailers of a unary call).
// Names that are not valid header names or that belong to the protocol are
// left out.
func setMetadataHeaders(h http.Header, pairs []string, prefix string) {
	for i := 0; i+1 < len(pairs); i += 2 {
		k := http.CanonicalHeaderKey(pairs[i])
		if !validHeaderName(k) || !forwarded(k) || strings.HasPrefix(k, "Trailer-") {
			continue
		}
		h[prefix+k] = append(h[prefix+k], pairs[i+1])
	}
}

// validHeaderName reports whether k is an HTTP token (RFC 9110).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// contentLengths holds the Content-Length header values of bodies up to
// 4 KiB, made once each: net/http does not modify a header value, so
// replies share them.
var contentLengths [4<<10 + 1]atomic.Pointer[[]string]

// contentLength returns the Content-Length header value for n bytes.
func contentLength(n int) []string {
	if n >= len(contentLengths) {
		return []string{strconv.Itoa(n)}
	}
	if v := contentLengths[n].Load(); v != nil {
		return *v
	}
	v := []string{strconv.Itoa(n)}
	contentLengths[n].Store(&v)
	return v
}

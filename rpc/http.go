package rpc

import (
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/console"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/internal/tokenauth"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
)

// The HTTP bridge. A connection whose first bytes are an HTTP request
// (HTTP/1.x, or the HTTP/2 preface) is handed by mux.Server
// (Config.KeepHTTP) and by serveSession to serveHTTPConn, which serves it
// with a net/http server of its own: keep-alive, chunked bodies, Expect:
// 100-continue, HTTP/2 and the rest are net/http's. A request is checked
// (Host, CORS, cross-origin, token) and then served: a unary call in the
// Connect protocol by http_unary.go, the method list and WebSocket upgrades
// here, and every other protocol by ServerOptions.Bridge (bridge.go), or
// answered that it is not served. The connection was authorized and counted
// by ServeConn; a call is admitted by serverConn.admit (method policy,
// concurrency limits, rate limit) and runs through serverCall.invoke
// (interceptors, panics) as a warren call does. See ARCHITECTURE.md, "HTTP
// bridge", and PROTOCOL.md, "HTTP (Connect)".

// httpIdleTimeout closes a keep-alive connection idle for this long. It is
// longer than net/http's client default (90 s), so that a client, not the
// server, normally ends an idle connection.
const httpIdleTimeout = 2 * time.Minute

// serveHTTPConn serves the HTTP requests of one connection, on the calling
// goroutine (ServeConn's), and returns when the connection has ended and
// every handler it ran has returned. refuse, if set, is why the connection
// was refused: each request is then answered with that error and the
// connection closed.
func (s *Server) serveHTTPConn(sc *serverConn, conn net.Conn, refuse string) {
	tap := s.http2.Track(conn)
	defer s.http2.Untrack(tap)
	l := bridgecore.NewConnListener(&httpbody.Guard{Conn: tap})
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
	protocols.SetUnencryptedHTTP2(true) // prior knowledge
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeader,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    int(s.opts.Settings.WithDefaults().MaxFrameSize),
		Protocols:         protocols,
		BaseContext:       func(net.Listener) context.Context { return sc.ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				l.End()
			}
		},
		ErrorLog: s.httpErrorLog(),
	}
	tap.Server = hs
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
		w.Header()["Connection"] = bridgecore.HdrClose
		bridgecore.WriteUnaryError(w, 0, status.New(h.refuseCode, h.refuseMsg), nil, nil)
		return
	}
	if len(r.TransferEncoding) > 0 {
		// No request after a chunked one: see httpbody.Guard.
		w.Header()["Connection"] = bridgecore.HdrClose
	}
	if se := bridgecore.CheckHost(h.sc.conn.LocalAddr(), h.srv.opts.AllowedHosts, r); se != nil {
		bridgecore.WriteUnaryError(w, 0, se, nil, nil)
		return
	}
	if h.srv.opts.CORS != nil && h.srv.serveCORS(w, r) {
		return // a preflight request, answered
	}
	if err := h.srv.crossOriginCheck(r); err != nil {
		bridgecore.WriteUnaryError(w, 0, status.Errorf(status.PermissionDenied, "%v", err), nil, nil)
		return
	}
	if r = h.srv.authorizeHTTP(w, r, h.sc.peer); r == nil {
		return
	}
	if h.srv.console != nil && console.Match(r.URL.Path) && !transport.IsWebSocketUpgrade(r) {
		h.srv.console.Serve(w, r, (*bridgeConn)(h.sc))
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r)
	case http.MethodGet, http.MethodHead:
		if transport.IsWebSocketUpgrade(r) {
			h.srv.serveWebSocket(h.sc, w, r)
			return
		}
		if h.srv.opts.Metrics && r.URL.Path == "/metrics" {
			h.srv.met.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && r.URL.RawQuery != "" && r.URL.Path != "/" {
			// A unary call in Connect's GET form.
			if b := h.srv.httpBridge(); b != nil {
				b.Serve(w, r, (*bridgeConn)(h.sc))
				return
			}
			if hd, _ := h.srv.lookupPath(r.URL.Path); hd != nil {
				bridgecore.NoBridge(w, r)
				return
			}
		}
		if r.URL.Path == "/" && (h.srv.opts.Page == nil || !tokenauth.WantsHTML(r)) {
			// The list of methods: a call of IntrospectionMethod.
			h.call(w, r, (*h.srv.handlers.Load())[IntrospectionMethod], bridgecore.Encoding{Codec: codec.IDJSON}, bridgecore.EmptyJSON)
			return
		}
		if h.srv.opts.Page != nil {
			h.srv.opts.Page.ServeHTTP(w, r)
			return
		}
		w.Header()["Allow"] = bridgecore.HdrAllowPost
		bridgecore.WriteUnaryError(w, http.StatusMethodNotAllowed, status.Errorf(status.Unimplemented,
			"%s %s: methods are called with POST (GET / lists them)", r.Method, r.URL.Path), nil, nil)
	default:
		w.Header()["Allow"] = bridgecore.HdrAllowPost
		bridgecore.WritePlainError(w, http.StatusMethodNotAllowed, r.Method+": methods are called with POST (GET / lists them)")
	}
}

// post serves a POST: a unary call in the Connect protocol here, any other
// protocol's request by the bridge.
func (h *httpConn) post(w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	enc, ok := bridgecore.ParseContentType(ct)
	b := h.srv.httpBridge()
	if ok {
		if hd, _ := h.srv.lookupPath(r.URL.Path); hd != nil && !enc.Stream {
			h.call(w, r, hd, enc, nil)
			return
		} else if hd != nil && hd.kind == kindUnary {
			// connect-go would answer an empty 415: say what to send.
			bridgecore.WriteUnaryError(w, http.StatusUnsupportedMediaType, status.Errorf(status.InvalidArgument,
				"%s is a unary method: call it with Content-Type application/json or application/proto, the message as the body", hd.name), nil, nil)
			return
		}
	}
	switch {
	case !ok && !bridgecore.IsGRPC(ct):
		bridgecore.UnsupportedType(w, ct, b != nil)
	case b != nil:
		// Other protocols, and paths that name no registered method
		// (reflection, health, unknown). A one-message request's body
		// (unary or server stream, or a name no method has) arrives within
		// httpbody.Deadline, as a Connect unary one does; client and bidi
		// streams and reflection are bounded by the call's deadline.
		if hd, _ := h.srv.lookupPath(r.URL.Path); hd == nil && !strings.HasPrefix(r.URL.Path, "/grpc.reflection.") ||
			hd != nil && (hd.kind == kindUnary || hd.kind == kindServerStream) {
			httpbody.SetDeadline(w, r)
		}
		b.Serve(w, r, (*bridgeConn)(h.sc))
	case ok && !enc.Stream:
		// An unknown method: 404, as an HTTP server without the route
		// answers.
		_, name := h.srv.lookupPath(r.URL.Path)
		bridgecore.WriteUnaryError(w, http.StatusNotFound, status.Errorf(status.Unimplemented, "unknown method %q", name), nil, nil)
	default:
		bridgecore.NoBridge(w, r)
	}
}

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
	if r.Context().Value(authedKey{}) != nil {
		sc.tokenOK.Store(true)
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

package rpc

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/warrenipc/warren/internal/acceptshed"
	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/console"
	"github.com/warrenipc/warren/internal/drain"
	"github.com/warrenipc/warren/internal/eventloop"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/internal/metrics"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/transport"
	"github.com/warrenipc/warren/wire"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("warren: server closed")

// ServerOptions configures a Server. The zero value gives the defaults
// named on each field; every limit is on by default.
type ServerOptions struct {
	// Settings are the wire limits the server accepts (frame and message
	// size, flow-control window). Zero fields take wire.Settings.WithDefaults,
	// except MaxFrameSize and InitialWindow: left zero, they follow what the
	// client announces, from the defaults up to 512 KiB and 2 MiB.
	Settings wire.Settings
	// Policy authorizes each connection's peer before any call is read.
	// nil accepts every connection the listener accepted (a
	// transport.Listener already applies its own policy).
	Policy peer.Policy
	// MaxConns bounds open connections; 0 means 4096, negative unlimited.
	MaxConns int
	// MaxConnsPerUID bounds open connections per peer uid (unix sockets);
	// 0 means 1024, negative unlimited.
	MaxConnsPerUID int
	// MaxConnsPerPID bounds open connections per peer process (unix
	// sockets, by the pid the kernel reports), so that one leaking process
	// cannot take its user's whole MaxConnsPerUID; 0 means a quarter of
	// MaxConnsPerUID but at least 16 (or MaxConnsPerUID if smaller; 256 by
	// default), negative unlimited. When either limit is reached, a
	// connection of that user (or process) without calls for a second (in
	// event-loop mode, a hibernating one) is shed, with a GOAWAY, before a
	// new one is refused. Both apply in goroutine and event-loop mode alike.
	MaxConnsPerPID int
	// MaxCallsPerConn bounds concurrent calls on one connection; 0 means
	// 1024, negative unlimited. A call counts from its arrival until the
	// end of its reply is queued for writing, or until it is cancelled
	// (its handler may run on, counted by MaxCalls), so a client that never
	// has more calls in flight is never refused.
	MaxCallsPerConn int
	// MaxCalls bounds concurrent calls on the whole server; 0 means 16384,
	// negative unlimited.
	MaxCalls int
	// CallRate bounds calls per second per peer (uid for unix sockets, IP
	// address otherwise); 0 means 1,000,000, negative unlimited. The
	// default is above what one client makes at full speed over one unix
	// socket on a small machine (about 250,000 calls/s on 2 cores), so that
	// it stops a runaway peer and not a busy one. CallBurst is the bucket
	// size; 0 means CallRate/10 (at least 1).
	CallRate  float64
	CallBurst int
	// Interceptors wrap every unary call, the first outermost (inside
	// Auth's check, if set).
	Interceptors []UnaryServerInterceptor
	// StreamInterceptors wrap every streaming call, the first outermost
	// (inside Auth's check, if set).
	StreamInterceptors []StreamServerInterceptor
	// NoInline makes every call run on a worker goroutine. By default a
	// unary call whose request is at most 16 KiB runs on the connection's
	// reader goroutine (in event-loop mode, on the loop), which saves two
	// goroutine switches per call; one that runs longer than about a
	// millisecond hands reading to a new goroutine. Streams always run on
	// workers.
	NoInline bool
	// RejectUnknownFields refuses, with InvalidArgument naming the field, a
	// JSON request (or stream message) to a method whose messages are
	// protobuf messages when it has a field the schema lacks, on every
	// protocol. By default such fields are discarded, as binary protobuf
	// and connect-go do, so that a client built from a newer schema (a
	// field added) still calls this server. Plain Go struct messages
	// follow encoding/json and ignore unknown fields either way.
	RejectUnknownFields bool
	// HandshakeTimeout bounds a new connection's preface; 0 means 10s.
	HandshakeTimeout time.Duration
	// SharedThreshold sends messages of at least this many bytes (16 KiB
	// at least) in sealed memfds instead of through the socket, on unix
	// sockets where both sides set Settings.MaxFiles, in goroutine and
	// event-loop mode (see PROTOCOL.md, "Descriptors and shared
	// messages"); 0 means 32 MiB, negative turns it off (a reply that is a
	// whole shared mapping still goes shared). A shared request
	// reaches a HandleRaw handler as a read-only mapping, valid until the
	// handler returns: a handler must not keep it. MaxSharedBytes
	// bounds the bytes of such messages received and held mapped at once
	// on one connection; 0 means 1 GiB.
	SharedThreshold int
	MaxSharedBytes  int64
	// EventLoop serves the connections of unix, tcp and ws listeners (and
	// WebSocket upgrades through the HTTP bridge) from an epoll event loop
	// (Linux): an idle connection then holds no goroutine and no buffer,
	// only a record of 136 bytes. Small unary calls run on the loop itself
	// (unless NoInline), and a call that runs longer than about a
	// millisecond hands the loop to a new goroutine; others run on worker
	// goroutines. The API, the policy and the connection limits are those
	// of goroutine mode (one admission core decides for both), except that
	// a refused peer's preface is read before it is told why. On other
	// platforms, and for listeners the loop cannot serve (tls, wss,
	// listener types other than *transport.Listener, *net.UnixListener and
	// *net.TCPListener), Serve falls back to a goroutine per connection.
	// On unix listeners it takes and sends descriptors and shared messages
	// (Settings.MaxFiles) as the goroutine mode does. See ARCHITECTURE.md,
	// "Event loop".
	EventLoop bool
	// ReadTimeout (event-loop mode) bounds how long a frame may take to
	// arrive once its first byte has: a peer that sends part of a frame and
	// stalls is disconnected. 0 means 30 s; negative means no limit.
	ReadTimeout time.Duration
	// IdleTimeout (event-loop mode) disconnects, after a GOAWAY, a
	// connection that has had no call in progress and has sent nothing for
	// this long. 0, the default, keeps idle connections open.
	IdleTimeout time.Duration
	// Logger receives handler panics, refused connections, shed idle
	// connections, the drain, calls refused by a limit or a method's
	// policy (with the peer's network, uid, gid, pid and address and the
	// reason as attributes; a peer's repeats within 10 s as one summary),
	// accept errors and net/http's errors; nil means slog.Default().
	Logger *slog.Logger
	// WebSocket configures the WebSocket upgrades the HTTP bridge serves: a
	// GET with "Upgrade: websocket" on any listener becomes a warren
	// connection over WebSocket (PROTOCOL.md, "WebSocket"), counted as the
	// connection it arrived on. nil means transport.SameHostOrigin as the
	// origin check, which refuses pages of other sites in browsers.
	WebSocket *transport.WebSocketOptions
	// NoHTTP turns off the HTTP bridge. By default a connection that starts
	// with an HTTP request (HTTP/1.1, or HTTP/2 with prior knowledge, or
	// negotiated with ALPN over tls) is served over HTTP: unary calls in the
	// Connect protocol (POST /Service/Method or /Service.Method, JSON or
	// protobuf, gzip accepted), the method list (GET /) and WebSocket
	// upgrades, with the same policies, limits and interceptors as warren
	// calls; with Bridge set, gRPC, gRPC-Web and the rest too (see
	// PROTOCOL.md, "HTTP (Connect)"). With NoHTTP it is answered with
	// HTTP 400 and closed.
	NoHTTP bool
	// Bridge, if set, also serves on the HTTP connections gRPC, gRPC-Web,
	// Connect streaming and Connect GET, and the gRPC server reflection and
	// health services: set it to grpcbridge.New(). Without it such requests
	// are answered, in their own protocol, that the server does not serve
	// them (gRPC: status Unimplemented). Connect unary calls are served
	// the same way with or without it. The type is internal: only
	// grpcbridge.New makes one.
	Bridge bridgecore.Bridge
	// AllowedHosts are the names the HTTP bridge accepts in the Host header
	// of requests (and WebSocket upgrades) on TCP connections, besides IP
	// literals, and besides "localhost", names under ".localhost" and
	// "warren" (the name HTTPClient uses) on a loopback address. Others are
	// refused with 403, so that a page whose name an attacker points at
	// 127.0.0.1 (DNS rebinding) cannot call. On a non-loopback address, an
	// empty list does not check the Host.
	AllowedHosts []string
	// Auth, if set, requires a token from every peer without kernel
	// credentials (tcp, tls, ws): on each call, HTTP request and WebSocket
	// upgrade. See TokenAuth.
	Auth *TokenAuth
	// Page, if set, serves the HTTP bridge's GET and HEAD requests other
	// than the method list and WebSocket upgrades: "GET /" from a browser
	// (Accept: text/html) and every other path. "GET /" asking for anything
	// else still answers the method list as JSON.
	Page http.Handler
	// CORS, if set, lets pages from the origins it allows call methods over
	// HTTP from a browser (cors.go). Off by default: cross-origin requests
	// that change state are refused.
	CORS *CORSOptions
	// Metrics counts calls, connections, refusals and sheds, and answers
	// "GET /metrics" on every listener (unless NoHTTP) in the Prometheus
	// text format, under the policies and token rules of calls (README).
	Metrics bool
	// Console, if set, serves a console page at /console/ on the HTTP
	// bridge: the methods, a form to call them, server streams followed,
	// live figures (counted as with Metrics); its requests are checked as
	// every other is.
	Console bool
}

func limit(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return int(^uint(0) >> 1)
	}
	return v
}

// ServerStats are counters of a server's activity.
type ServerStats struct {
	Conns         int    // open connections
	Calls         int    // calls in progress
	CallsTotal    uint64 // calls accepted
	Refused       uint64 // calls refused by a limit or policy
	ConnsRejected uint64 // connections rejected by a limit or policy
	ConnsShed     uint64 // idle connections closed to make room for new ones
	Panics        uint64 // handler panics
}

// Server serves registered methods on any number of listeners.
type Server struct {
	opts     ServerOptions
	logger   *slog.Logger
	handlers atomic.Pointer[map[string]*handler]
	regMu    sync.Mutex // serializes register
	work     chan *serverCall
	ctx      context.Context // parent of every connection's context
	cancel   context.CancelFunc

	// adm admits every connection, whichever engine serves it, and counts
	// them (admission.go).
	adm   *admit.Core
	goEng *admit.Engine // sheds the connections served by goroutines

	mu        sync.Mutex                 // protects following
	listeners map[*net.Listener]struct{} // by pointer: a listener value need not be hashable
	// conns are the connections with a session (or in their handshake, in
	// goroutine mode), by their admission: what Shutdown and Close end.
	conns map[*admit.Conn]*serverConn
	// loopPeak is the most entries conns had since event loops last
	// rebuilt it: a map never gives back the room it grew to, so once
	// most of their sessions have hibernated it is copied into a smaller
	// one (loopSession.Unregister).
	loopPeak int
	closing  bool
	closed   chan struct{} // closed by Shutdown/Close
	http2    drain.HTTP    // the HTTP connections' drain (Shutdown)

	calls      atomic.Int64
	replying   atomic.Int64 // HTTP replies still being written by calls that stopped counting
	callsTotal atomic.Uint64
	refused    atomic.Uint64
	panics     atomic.Uint64
	refusing   atomic.Int64       // refused peers being answered (refuseAtAccept)
	wg         sync.WaitGroup     // every goroutine the server started
	ev         eventloop.Counters // event-loop mode (eventloop.go)
	met        *metrics.Registry  // ServerOptions.Metrics; nil without

	httpLogOnce sync.Once
	httpLog     *log.Logger // net/http's own errors, to logger

	bridgeOnce sync.Once
	bridge     bridgecore.Handler // opts.Bridge's, bound (bridge.go)
	services   sync.Map           // name -> *handler: the bridge's own methods
	console    *console.Handler   // opts.Console's
}

// NewServer returns a server with the options (nil for defaults).
func NewServer(opts *ServerOptions) *Server {
	s := &Server{work: make(chan *serverCall), closed: make(chan struct{})}
	if opts != nil {
		s.opts = *opts
	}
	s.opts.MaxConns = limit(s.opts.MaxConns, 4096)
	s.opts.MaxConnsPerUID = limit(s.opts.MaxConnsPerUID, 1024)
	s.opts.MaxConnsPerPID = limit(s.opts.MaxConnsPerPID, max(min(16, s.opts.MaxConnsPerUID), s.opts.MaxConnsPerUID/4))
	s.opts.MaxCallsPerConn = limit(s.opts.MaxCallsPerConn, 1024)
	s.opts.MaxCalls = limit(s.opts.MaxCalls, 16384)
	switch {
	case s.opts.CallRate == 0:
		s.opts.CallRate = 1_000_000
	case s.opts.CallRate < 0:
		s.opts.CallRate = float64(rate.Inf)
	}
	if s.opts.CallBurst <= 0 {
		s.opts.CallBurst = max(1, int(min(s.opts.CallRate/10, 1<<30)))
	}
	applyAuth(&s.opts)
	s.logger = s.opts.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.opts.Metrics || s.opts.Console {
		s.met = metrics.New()
	}
	s.initAdmission()
	m := map[string]*handler{}
	s.handlers.Store(&m)
	s.register(introspectionHandler(s))
	if s.opts.Console {
		s.console = console.New((*bridgeServer)(s), s.met.Snapshot)
	}
	return s
}

func (s *Server) register(h *handler) {
	if err := validMethod(h.name); err != nil {
		panic(err)
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	old := *s.handlers.Load()
	names := []string{h.name}
	if full := schemaName(h); full != "" && full != h.name {
		names = append(names, full)
	}
	for _, n := range names {
		if _, dup := old[n]; dup {
			panic(fmt.Sprintf("warren: method %s registered twice", n))
		}
	}
	m := make(map[string]*handler, len(old)+len(names))
	for k, v := range old {
		m[k] = v
	}
	h.met = s.met.Method(h.name)
	for _, n := range names {
		m[n] = h // the full name of its schema too (schema.go)
	}
	s.handlers.Store(&m)
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	return ServerStats{
		Conns: s.adm.Conns(), Calls: int(s.calls.Load()), CallsTotal: s.callsTotal.Load(),
		Refused: s.refused.Load(), ConnsRejected: s.adm.Rejected(), Panics: s.panics.Load(),
		ConnsShed: s.adm.Shed(),
	}
}

// Serve accepts connections on l and serves each on its own goroutine until
// Shutdown or Close, then returns ErrServerClosed. Temporary accept errors
// back off from 5 ms to 1 s, logged at most once per 5 s; out of
// descriptors, a reserve one closes pending connections (internal/acceptshed).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	if s.listeners == nil {
		s.listeners = map[*net.Listener]struct{}{}
	}
	key := &l
	s.listeners[key] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, key)
		s.mu.Unlock()
	}()
	if s.opts.EventLoop {
		if handled, err := s.serveEventLoop(l); handled {
			return err
		}
	}
	shed := acceptshed.New()
	defer shed.Close()
	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return ErrServerClosed
			default:
			}
			if acceptshed.OutOfDescriptors(err) && shed.ShedListener(l) {
				s.adm.ShedPending()
				shed.Log(s.logger, err, 0) // a pending connection was closed
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary) || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				shed.Log(s.logger, err, backoff)
				select {
				case <-time.After(backoff):
				case <-s.closed:
					return ErrServerClosed
				}
				continue
			}
			return fmt.Errorf("warren: accept: %w", err)
		}
		backoff = 0
		conn = rawio.Wrap(conn)
		if p := peerOf(conn); !s.refuseAtAccept(conn, p) {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				s.serveConn(conn, p)
			}()
		}
	}
}

var errTemporary = errors.New("temporary")

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// serverConn is one served connection.
type serverConn struct {
	// ac is the connection's admission in goroutine mode; an event-loop
	// session's admission is in the loop's record of the connection,
	// which outlives the session.
	ac  admit.Conn
	adm *admit.Conn // the connection's admission: &ac, or the loop's
	// work counts the connection's calls (addCalls: admitted and not
	// ended, the low 32 bits) and their handlers still running
	// (addRunning, the high 32 bits): a call stops counting in calls when
	// its reply's end is queued, but its stream is dropped, and the
	// credit of messages it left unread given back, only after its
	// handler returned. The event loop hibernates a session, and a
	// connection is shed, only when work is zero. In goroutine mode
	// work.Conn is &ac, whose activity it keeps.
	work admit.Work
	lim  *admit.Limiter
	srv  *Server
	conn net.Conn
	sess *mux.Session    // set under srv.mu once the handshake is done
	ctx  context.Context // carries the peer
	peer *peer.Peer
	// handshake, until the warren handshake is done or the connection
	// has turned to HTTP, ends the count of its peer's connections in
	// their handshake; nil once called.
	handshake func()
	// tokenOK is set when the connection became a WebSocket session by
	// an upgrade that carried the token (TokenAuth): its calls need no
	// token of their own.
	tokenOK atomic.Bool
	// notWarren is set when the connection turned out not to speak warren
	// (HTTP, or a failed handshake): Shutdown waits for no session of it.
	notWarren atomic.Bool
}

// peerOf returns the identity of conn's peer.
func peerOf(conn net.Conn) *peer.Peer {
	if pc, ok := conn.(interface{ Peer() *peer.Peer }); ok {
		if p := pc.Peer(); p != nil {
			return p
		}
	}
	p := &peer.Peer{Network: conn.LocalAddr().Network(), LocalAddr: conn.LocalAddr(), RemoteAddr: conn.RemoteAddr()}
	peer.ReadCred(conn, p)
	return p
}

// ServeConn serves one connection and returns when it ends. A
// *net.UnixConn or *net.TCPConn reads and writes with raw system calls, as
// the connections of transport.Listen do.
//
// The server's policy and connection limits are applied before any byte is
// read; a refused peer gets the reason (admit.Core.Refuse) and its connection
// is closed at once. A peer may hold at most maxHandshakesPerPeer
// connections that have not completed their handshake.
func (s *Server) ServeConn(conn net.Conn) {
	conn = rawio.Wrap(conn)
	s.serveConn(conn, peerOf(conn))
}

// serveConn is ServeConn for conn, wrapped by rawio, whose peer is p.
func (s *Server) serveConn(conn net.Conn, p *peer.Peer) {
	key := admit.PeerKey(p)
	h := s.adm.StartHandshake(key, p, func(*admit.Handshake) { conn.Close() })
	if h == nil {
		conn.Close()
		return
	}
	endHandshake := func() { s.adm.EndHandshake(h) } // idempotent
	defer endHandshake()
	if hs, ok := conn.(interface{ Handshake(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(s.ctx, s.handshakeTimeout())
		err := hs.Handshake(ctx)
		cancel()
		if err != nil {
			s.adm.Reject()
			conn.Close()
			return
		}
		p = peerOf(conn) // with what the handshake learned
	}
	sc := &serverConn{srv: s, conn: conn, peer: p, handshake: endHandshake}
	sc.adm, sc.work.Conn = &sc.ac, &sc.ac
	sc.ac.Touch()
	sc.work.Started()
	sc.ctx = peer.NewContext(s.ctx, p)
	if refuse, code := s.addConn(sc, key); refuse != "" {
		s.refuseConn(conn, key, refuse, code) // counted in its handshake while answered
		return
	}
	if s.serveSession(sc, conn, "", !s.opts.NoHTTP) {
		s.removeConn(sc)
	}
}

// serveSession runs a warren session on conn for sc, which ServeConn has
// authorized and counted, or refused with the reason refuse: a refused
// session answers every call, and then a GOAWAY, with the reason. With
// serveHTTP, a connection that starts with an HTTP request goes to the HTTP
// bridge. It returns once the session or the HTTP connection has ended,
// reporting whether sc is still to be uncounted (false for a refused one).
func (s *Server) serveSession(sc *serverConn, conn net.Conn, refuse string, serveHTTP bool) bool {
	refuseCode := status.ResourceExhausted
	if refuse != "" && peer.Authorize(s.opts.Policy, sc.peer) != nil {
		refuseCode = status.PermissionDenied
	}
	if refuse == shuttingDown {
		refuseCode = status.Unavailable // a drain, not a limit: the client may retry elsewhere
	}
	cfg := &mux.Config{
		Settings:         s.opts.Settings,
		HandshakeTimeout: s.handshakeTimeout(),
		SharedMin:        s.opts.SharedThreshold,
		MaxShared:        s.opts.MaxSharedBytes,
		OnRequest:        sc.onRequest,
	}
	sc.callConfig(cfg)
	if refuse != "" {
		cfg.OnStream = func(st *mux.Stream, _ *wire.CallHeader) { st.Refuse(refuseCode, refuse) }
	}
	cfg.KeepHTTP = serveHTTP
	sess, err := mux.Server(conn, cfg)
	sc.handshakeDone()
	if err != nil {
		sc.notWarren.Store(true)
		var nw *wire.NotWarrenError
		if serveHTTP && errors.As(err, &nw) && nw.HTTP {
			// The peer speaks HTTP: the bridge serves the connection,
			// reading the bytes the preface reader took again.
			conn.SetDeadline(time.Time{})
			s.serveHTTPConn(sc, httpbody.NewReplayConn(conn, nw.Prefix), refuse)
		}
		return true
	}
	s.mu.Lock()
	sc.sess = sess
	closing := s.closing
	s.mu.Unlock()
	if refuse != "" {
		sess.GoAway(refuseCode, refuse)
		time.AfterFunc(100*time.Millisecond, func() { sess.Close() })
		<-sess.Done()
		sess.Close()
		return false
	}
	if closing {
		sess.GoAway(status.Unavailable, "server is shutting down")
	}
	<-sess.Done()
	sess.Close()
	return true
}

func (s *Server) handshakeTimeout() time.Duration {
	if s.opts.HandshakeTimeout > 0 {
		return s.opts.HandshakeTimeout
	}
	return 10 * time.Second
}

// shuttingDown is the refusal of a connection that arrives during Shutdown.
const shuttingDown = admit.ShuttingDown

// addConn admits sc (admission.go), or says why not and with which code.
func (s *Server) addConn(sc *serverConn, key string) (string, status.Code) {
	if why, code := s.adm.Admit(&sc.ac, sc.peer, s.goEng); why != "" {
		return why, code
	}
	s.mu.Lock()
	if s.closing {
		// Shutdown began after Admit: refused as Admit would refuse now.
		s.mu.Unlock()
		s.adm.Release(&sc.ac)
		s.adm.Refused(sc.peer, key, shuttingDown)
		return shuttingDown, status.Unavailable
	}
	if s.conns == nil {
		s.conns = map[*admit.Conn]*serverConn{}
	}
	sc.lim = sc.ac.Limiter()
	s.conns[&sc.ac] = sc
	s.mu.Unlock()
	return "", status.OK
}

// removeConn uncounts sc, which addConn admitted.
func (s *Server) removeConn(sc *serverConn) {
	s.mu.Lock()
	delete(s.conns, sc.adm)
	s.mu.Unlock()
	s.adm.Release(sc.adm)
}

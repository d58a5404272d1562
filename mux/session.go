package mux

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Config configures a session. The zero value is valid for a client.
type Config struct {
	// Settings are the limits this side accepts; zero fields take the
	// defaults of wire.DefaultSettings, except MaxFrameSize and
	// InitialWindow: a client then announces 512 KiB and 2 MiB, and a
	// server what the client announced, from the default up to those.
	Settings wire.Settings
	// HandshakeTimeout bounds the preface exchange; 0 means 10 seconds.
	HandshakeTimeout time.Duration
	// NewStream, if set, returns the memory for a stream the peer opens, so
	// that a layer above can embed Stream in its own per-call struct and
	// allocate once: a zero Stream that no other goroutine uses. It is
	// called on the session's reader goroutine, before the last checks: a
	// stream it made may then be refused (the session is going away, or
	// the peer broke the protocol), and is dropped without OnStream.
	NewStream func() *Stream
	// OnStream is called (server role) on the session's reader goroutine
	// when the peer opens a stream. h aliases the read buffer and is valid
	// only during the call. OnStream must not block; it typically hands the
	// stream to a worker, or finishes it at once to refuse it.
	OnStream func(st *Stream, h *wire.CallHeader)
	// OnRequest, if set, is called (server role) on the session's reader
	// goroutine once per stream the peer opened, when its first message is
	// complete or the peer half-closed without one. It may run the request
	// inline with Stream.RunInline.
	OnRequest func(st *Stream)
	// OnReset is called (server role) when a stream the peer opened is
	// canceled by the peer, ended because a message the peer sends on it
	// is over MaxMessageSize, or lost with the connection, so that the work
	// behind it can stop.
	OnReset func(st *Stream, err error)
	// OnEnd, if set, is called (server role) when the last frames of a
	// stream's reply, the trailers of Finish, are queued for writing:
	// before any of their bytes can reach the peer, so that what the
	// stream holds (a slot under a concurrency limit) is free by the time
	// the peer sees the end and sends its next request. It runs with the
	// connection's writer locked and must not block.
	OnEnd func(st *Stream)
	// OnHTTP, if set (server role), is handed the connection when the peer
	// sends an HTTP request (wire.ErrHTTPRequest) instead of the preface.
	// The connection it gets replays the bytes already read, so it reads as
	// the whole request, and has no deadline. OnHTTP runs on the goroutine
	// that called Server and owns the connection from then on; Server
	// returns once it does, with an error matching wire.ErrHTTPRequest.
	// When OnHTTP is nil, such a peer is answered with
	// wire.HTTPRejectResponse and the connection is closed.
	OnHTTP func(conn net.Conn)
}

// largeFrameSize is the MaxFrameSize a session announces when its Config
// leaves it unset: a client announces it, and a server announces what the
// client did, between the protocol's default and this. Large DATA frames
// move a large message in a few writes and reads instead of one per 64 KiB;
// a frame of 512 KiB is written in a fraction of a millisecond on a local
// socket, so small calls interleaved with it wait little (1 MiB frames
// doubled their wait for little more throughput).
const largeFrameSize = 512 << 10

// largeWindow is the InitialWindow a session announces when its Config
// leaves it unset, as largeFrameSize: a client announces it, a server what
// the client did, between the protocol's default and this. With a stream
// window of 1 MiB, a stream of 1 MiB messages stalled on credit: its
// sender could not send the next message before the receiver had taken
// the previous one. The connection's window is 16 times this.
const largeWindow = 2 << 20

// connWindowFactor sets the connection-level flow-control window: this many
// per-stream windows, so one stalled stream cannot exhaust it.
const connWindowFactor = 16

// Session is one end of a multiplexed warren connection.
type Session struct {
	conn      net.Conn
	client    bool
	cfg       Config
	local     wire.Settings // what we accept
	peer      wire.Settings // what the peer accepts
	frameSize uint32        // largest DATA payload we send
	r         *wire.Reader
	w         writer

	callHeader wire.CallHeader // reader goroutine only: the header being handed to OnStream

	mu         sync.Mutex // protects following
	streams    streamTable
	nextID     uint32 // next stream id this side opens
	lastPeerID uint32 // highest stream id the peer opened
	goAwayRecv bool   // the peer sent GOAWAY
	goAwayLast uint32 // last stream id the peer will process
	goAwayCode status.Code
	goAwayMsg  string
	goAwaySent bool
	sentLast   uint32
	pings      map[uint64]chan struct{}
	free       []*Stream       // released client streams, for reuse
	lastDone   <-chan struct{} // the Done channel of the last waiter that was not watching its context (see watching)
	pingSeq    uint64
	err        error // why the session ended

	ended      atomic.Bool // err is set (read without mu by Err)
	goAwayFlag atomic.Bool // goAwayRecv is set (read without mu by GoAwayReason)

	flowMu      sync.Mutex // protects following
	connSendWin int64
	flowWaiters []*Stream // streams waiting for connection credit

	connRecvWin atomic.Int64 // credit the peer may still use
	asmReserved atomic.Int64 // bytes of chunked messages being assembled at their declared size (see Stream.startAsmLocked)
	connUnacked atomic.Int64 // consumed bytes not yet granted back

	done    chan struct{}  // closed when the session ends
	readers sync.WaitGroup // reader goroutines: the server's, any that took over from it, a client's background reader

	readTok atomic.Bool  // client: a goroutine holds the reader role (see clientread.go)
	waiters atomic.Int64 // client: goroutines waiting for something the reader delivers

	// readerState is the reader generation (bumped by each takeover) shifted
	// left by one, with the low bit set while the reader runs a request
	// inline (see Stream.RunInline).
	readerState   atomic.Uint64
	inlineTimer   *time.Timer // the watch timer (see guarded)
	inlineRuns    atomic.Uint64
	watchArmed    atomic.Bool
	watchedRuns   uint64 // inlineRuns at the last tick; watch timer only
	watchedInline bool   // a request ran inline at the last tick; watch timer only
	closeOnce     sync.Once
	closing       atomic.Bool // closeWith has begun

	direct wire.Into // s.directDst, made once

	// interruptible is set (client role) when a read blocked in conn can
	// be interrupted with a past read deadline and resumed after: for
	// unix and tcp connections (see readInterruptible).
	interruptible bool
	intr          interruptState

	// lent is the stream whose caller's memory (Stream.RecvInto) the
	// reader is reading a payload into, if any; lendMu and lendCond let
	// Release wait for that read to end.
	lent     atomic.Pointer[Stream]
	lendMu   sync.Mutex
	lendCond sync.Cond

	ctxw atomic.Pointer[ctxWatch] // the watched context (see watching)
}

// Client performs the client side of the handshake on conn and starts the
// session. On error conn is closed.
func Client(conn net.Conn, cfg *Config) (*Session, error) {
	s, err := newSession(conn, true, cfg)
	if err != nil {
		return nil, err
	}
	if s.cfg.Settings.MaxFrameSize == 0 {
		s.local.MaxFrameSize = largeFrameSize
	}
	if s.cfg.Settings.InitialWindow == 0 {
		s.local.InitialWindow = largeWindow
	}
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout()))
	if _, err := conn.Write(wire.AppendPreface(nil, s.local)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("warren: sending preface: %w", err)
	}
	peer, err := wire.ReadPreface(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("warren: reading server preface: %w", err)
	}
	conn.SetDeadline(time.Time{})
	s.start(peer)
	return s, nil
}

// Server performs the server side of the handshake on conn and starts the
// session. A peer that is not warren gets an error within the handshake
// timeout; an HTTP client is handed to cfg.OnHTTP or, without one, answered
// with an HTTP 400 explaining what the socket speaks. On error conn is
// closed, unless OnHTTP took it.
func Server(conn net.Conn, cfg *Config) (*Session, error) {
	s, err := newSession(conn, false, cfg)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout()))
	peer, err := wire.ReadPreface(conn)
	if err != nil {
		var nw *wire.NotWarrenError
		if errors.As(err, &nw) && nw.HTTP {
			if s.cfg.OnHTTP != nil {
				conn.SetDeadline(time.Time{})
				s.cfg.OnHTTP(newReplayConn(conn, nw.Prefix))
				return nil, fmt.Errorf("warren: connection handed to the HTTP server: %w", err)
			}
			conn.Write(wire.HTTPRejectResponse)
		}
		conn.Close()
		return nil, fmt.Errorf("warren: reading client preface: %w", err)
	}
	if s.cfg.Settings.MaxFrameSize == 0 && peer.MaxFrameSize > s.local.MaxFrameSize {
		// Large frames for a client that asked for them, both ways; a
		// client that announced the default gets the default.
		s.local.MaxFrameSize = min(peer.MaxFrameSize, largeFrameSize)
	}
	if s.cfg.Settings.InitialWindow == 0 && peer.InitialWindow > s.local.InitialWindow {
		s.local.InitialWindow = min(peer.InitialWindow, largeWindow)
	}
	if _, err := conn.Write(wire.AppendPreface(nil, s.local)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("warren: sending preface: %w", err)
	}
	conn.SetDeadline(time.Time{})
	s.start(peer)
	return s, nil
}

// replayConn reads prefix, the bytes the preface reader consumed, before
// reading from the connection.
type replayConn struct {
	net.Conn
	prefix []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// NetConn returns the underlying connection.
func (c *replayConn) NetConn() net.Conn { return c.Conn }

// replayCloseWriteConn is a replayConn over a connection that can close its
// write side (TCP, unix), which net/http uses to end a response cleanly.
type replayCloseWriteConn struct{ replayConn }

func (c *replayCloseWriteConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

func newReplayConn(conn net.Conn, prefix []byte) net.Conn {
	if _, ok := conn.(interface{ CloseWrite() error }); ok {
		return &replayCloseWriteConn{replayConn{conn, prefix}}
	}
	return &replayConn{conn, prefix}
}

func newSession(conn net.Conn, client bool, cfg *Config) (*Session, error) {
	s := &Session{conn: conn, client: client}
	if cfg != nil {
		s.cfg = *cfg
	}
	s.local = s.cfg.Settings.WithDefaults()
	if err := s.local.Validate(); err != nil {
		conn.Close()
		return nil, err
	}
	if !client && s.cfg.OnStream == nil {
		conn.Close()
		return nil, errors.New("warren: server session needs Config.OnStream")
	}
	if client {
		s.nextID = 1
		s.interruptible = readsResume(conn)
		s.lendCond.L = &s.lendMu
	} else {
		s.nextID = 2
	}
	return s, nil
}

// readsResume reports whether a read on conn that a past read deadline
// interrupts leaves the byte stream intact, so that reading can go on once
// the deadline is cleared: true for unix and tcp sockets, and for
// connections that say so (transport.Conn for unix and tcp); false for TLS
// and WebSocket, which can stop inside a record or frame.
func readsResume(conn net.Conn) bool {
	switch c := conn.(type) {
	case *net.UnixConn, *net.TCPConn:
		return true
	case interface{ ReadsResume() bool }:
		return c.ReadsResume()
	}
	return false
}

func (s *Session) handshakeTimeout() time.Duration {
	if s.cfg.HandshakeTimeout > 0 {
		return s.cfg.HandshakeTimeout
	}
	return 10 * time.Second
}

func (s *Session) start(peer wire.Settings) {
	s.peer = peer
	// Half a window at most, so that a sender with part of its window
	// still unreturned (the receiver returns credit in halves) can always
	// make progress.
	s.frameSize = min(peer.MaxFrameSize, peer.InitialWindow/2)
	s.connSendWin = int64(peer.InitialWindow) * connWindowFactor
	s.connRecvWin.Store(int64(s.local.InitialWindow) * connWindowFactor)
	s.r = wire.NewReader(s.conn, s.local.MaxFrameSize)
	s.direct = s.directDst
	s.w.init(s.conn)
	s.w.onErr = func(err error) {
		if !s.closing.Load() { // a failed write while closing is expected
			s.closeWith(err)
		}
	}
	s.done = make(chan struct{})
	s.inlineTimer = time.AfterFunc(time.Hour, s.watch)
	s.inlineTimer.Stop()
	if !s.client {
		s.readers.Add(1)
		go s.readLoop()
	}
}

// GoAwayReason returns the code and message of the peer's GOAWAY, if it
// sent one.
func (s *Session) GoAwayReason() (code status.Code, msg string, ok bool) {
	if !s.goAwayFlag.Load() {
		return 0, "", false // every call asks: no lock for the common answer
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.goAwayCode, s.goAwayMsg, s.goAwayRecv
}

// Buffered returns how many bytes the reader has read from the connection
// but not yet handled. Call it only on the reader goroutine.
func (s *Session) Buffered() int { return s.r.Buffered() }

// PeerSettings returns the limits the peer announced.
func (s *Session) PeerSettings() wire.Settings { return s.peer }

// LocalSettings returns the limits this side announced.
func (s *Session) LocalSettings() wire.Settings { return s.local }

// Conn returns the session's connection.
func (s *Session) Conn() net.Conn { return s.conn }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, or nil while it is up.
func (s *Session) Err() error {
	if !s.ended.Load() {
		return nil // asked per call and per frame: no lock while the session is up
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// NumStreams returns the number of open streams.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams.count()
}

// Close closes the connection at once. Every open stream fails. Close waits
// for the session's reader goroutine and is safe to call more than once.
func (s *Session) Close() error {
	s.closeWith(ErrClosed)
	s.readers.Wait()
	s.w.async.Wait()
	return nil
}

// Flush waits until every frame written so far has been handed to the
// connection. Use it before Close to end a session without losing replies
// that concurrent writers queued.
func (s *Session) Flush() error { return s.w.drain() }

// closeWith ends the session with err (the first error wins).
func (s *Session) closeWith(err error) {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		var pe *ProtocolError
		if errors.As(err, &pe) {
			// Tell the peer why before hanging up.
			s.conn.SetWriteDeadline(time.Now().Add(time.Second))
			b, _ := s.w.lockNoWait()
			b = wire.AppendHeader(b, wire.Header{Type: wire.TypeGoAway})
			start := len(b)
			s.mu.Lock()
			last := s.lastPeerID
			s.mu.Unlock()
			b = wire.AppendGoAway(b, last, uint32(status.Internal), pe.Error())
			setLength(b, start)
			s.w.unlock(b)
		}
		s.mu.Lock()
		s.err = err
		s.ended.Store(true)
		streams := s.streams.closeLocked()
		pings := s.pings
		s.pings = nil
		s.mu.Unlock()
		s.conn.Close()
		s.intr.unregister()
		s.unwatch()
		s.w.fail(err)
		for _, st := range streams {
			if !s.client && s.cfg.OnReset != nil {
				s.cfg.OnReset(st, err)
			}
			st.fail(err)
		}
		for _, ch := range pings {
			close(ch)
		}
		s.flowMu.Lock()
		waiters := s.flowWaiters
		s.flowWaiters = nil
		s.flowMu.Unlock()
		for _, st := range waiters {
			st.wakeSender()
		}
		close(s.done)
	})
}

// GoAway tells the peer that no stream it opens after the ones already
// received will be processed. Streams already open go on.
func (s *Session) GoAway(code status.Code, msg string) error {
	// The writer first: a stream the reader refuses because it sees
	// goAwaySent must not have its refusal written ahead of the GOAWAY,
	// or the peer would take the refusal ("shutting down") for the reason.
	b, err := s.w.lockNoWait()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.w.unlock(b)
		return err
	}
	s.goAwaySent = true
	s.sentLast = s.lastPeerID
	last := s.sentLast
	s.mu.Unlock()
	b = wire.AppendHeader(b, wire.Header{Type: wire.TypeGoAway})
	start := len(b)
	b = wire.AppendGoAway(b, last, uint32(code), msg)
	setLength(b, start)
	if err != nil {
		s.w.unlock(b)
		return err
	}
	return s.w.unlock(b)
}

// setLength fixes the length field of the frame header just before start.
func setLength(b []byte, start int) {
	binary.BigEndian.PutUint32(b[start-wire.HeaderSize:], uint32(len(b)-start))
}

// Ping sends a PING and waits for its acknowledgement, returning the round
// trip time.
func (s *Session) Ping(ctx context.Context) (time.Duration, error) {
	ch := make(chan struct{})
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, err
	}
	s.pingSeq++
	seq := s.pingSeq
	if s.pings == nil {
		s.pings = make(map[uint64]chan struct{})
	}
	s.pings[seq] = ch
	s.mu.Unlock()
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], seq)
	start := time.Now()
	if err := s.writeFrame(0, wire.TypePing, 0, p[:]); err != nil {
		return 0, err
	}
	if s.client {
		s.waiters.Add(1)
		defer s.waiters.Add(-1)
		s.ensureReader()
	}
	select {
	case <-ch:
		if err := s.Err(); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pings, seq)
		s.mu.Unlock()
		return 0, ctx.Err()
	}
}

// writeFrame writes one small control frame without waiting for buffer
// space, so the reader goroutine never blocks on a busy writer.
func (s *Session) writeFrame(stream uint32, typ wire.Type, flags wire.Flags, payload []byte) error {
	b, err := s.w.lockNoWait()
	b = wire.AppendFrame(b, stream, typ, flags, payload)
	s.w.unlockAsync(b)
	return err
}

func (s *Session) readLoop() {
	defer s.readers.Done()
	corked := !s.client // a reader taking over may find the writer corked
	defer func() {
		if corked {
			s.w.uncork()
		}
	}()
	for {
		// A server stops reading from a peer that does not read its output
		// (backpressure.go).
		if !s.client && !s.throttle() {
			return
		}
		// A server corks its writer while whole frames are buffered, so the
		// replies to requests that arrived together leave in one write.
		if !s.client {
			if more := s.r.HasFrame(); more != corked {
				corked = more
				if more {
					s.w.cork()
				} else if s.guarded(s.w.uncork) {
					return // another goroutine took over reading while this one wrote
				}
			}
		}
		h, p, err := s.r.NextInto(s.direct)
		if err != nil {
			s.closeWith(readError(err))
			return
		}
		gen := s.readerState.Load() >> 1
		if err := s.handle(h, p); err != nil {
			s.closeWith(err)
			return
		}
		if s.readerState.Load()>>1 != gen {
			return // another goroutine took over reading while a request ran inline
		}
	}
}

func (s *Session) handle(h wire.Header, p []byte) error {
	switch h.Type {
	case wire.TypeData:
		return s.onData(h, p)
	case wire.TypeHeaders:
		if s.client {
			return s.onReplyHeaders(h, p)
		}
		return s.onOpen(h, p)
	case wire.TypeTrailers:
		return s.onTrailers(h, p)
	case wire.TypeCancel:
		if st := s.lookup(h.Stream); st != nil {
			// The work behind the stream learns first, so that a Recv
			// failing below finds its context already done.
			if !s.client && s.cfg.OnReset != nil {
				s.cfg.OnReset(st, ErrStreamCanceled)
			}
			st.drop(ErrStreamCanceled)
			s.remove(st)
		}
	case wire.TypeWindow:
		incr, err := wire.ParseWindow(p)
		if err != nil {
			return &ProtocolError{Reason: err.Error()}
		}
		s.onWindow(h.Stream, incr)
	case wire.TypePing:
		if h.Flags&wire.FlagAck != 0 {
			seq := binary.BigEndian.Uint64(p)
			s.mu.Lock()
			ch := s.pings[seq]
			delete(s.pings, seq)
			s.mu.Unlock()
			if ch != nil {
				close(ch)
			}
			return nil
		}
		s.answerPing(p)
	case wire.TypeGoAway:
		last, code, msg, err := wire.ParseGoAway(p)
		if err != nil {
			return &ProtocolError{Reason: err.Error()}
		}
		s.mu.Lock()
		s.goAwayRecv = true
		s.goAwayFlag.Store(true)
		s.goAwayLast = last
		s.goAwayCode = status.Code(code)
		s.goAwayMsg = string(msg)
		var refused []*Stream
		s.streams.each(func(id uint32, st *Stream) {
			if id > last && id%2 == s.nextID%2 && s.streams.removeLocked(id, st) {
				refused = append(refused, st)
				if s.client {
					s.w.open.Add(-1)
				}
			}
		})
		s.mu.Unlock()
		gerr := &GoAwayError{Code: status.Code(code), Message: string(msg)}
		for _, st := range refused {
			st.fail(gerr)
		}
	}
	return nil
}

// lookup returns the open stream with the given id, or nil. Most take no
// lock (see streamTable). As with any lookup, the stream may end just
// after: callers check its id again under its lock.
func (s *Session) lookup(id uint32) *Stream {
	if st := s.streams.fast(id); st != nil {
		return st
	}
	s.mu.Lock()
	st := s.streams.getLocked(id)
	s.mu.Unlock()
	return st
}

// removeEnding is remove for a stream whose last frames are being queued
// for writing, with the writer locked: see Config.OnEnd.
func (s *Session) removeEnding(st *Stream) {
	s.remove(st)
	if s.cfg.OnEnd != nil {
		s.cfg.OnEnd(st)
	}
}

func (s *Session) remove(st *Stream) {
	removed := s.streams.removeFast(st.ID(), st)
	if !removed {
		s.mu.Lock()
		removed = s.streams.removeLocked(st.ID(), st)
		s.mu.Unlock()
	}
	if removed && s.client {
		s.w.open.Add(-1)
	}
}

// onOpen handles a client's HEADERS frame opening a stream.
func (s *Session) onOpen(h wire.Header, p []byte) error {
	if h.Stream%2 != 1 {
		return &ProtocolError{Reason: fmt.Sprintf("client opened even stream %d", h.Stream)}
	}
	var perr error
	s.callHeader, perr = wire.ParseCallHeader(p)
	// The stream is made before the checks, so that one locked section
	// checks and records it; a refused one is garbage.
	var st *Stream
	if perr == nil && uint32(s.streams.count()) < s.local.MaxStreams { // (rechecked below)
		if s.cfg.NewStream != nil {
			st = s.cfg.NewStream()
		} else {
			st = new(Stream)
		}
		st.initFresh(s, h.Stream)
		if h.Flags&wire.FlagEnd != 0 {
			st.recvEnd = true
		}
	}
	s.mu.Lock()
	if h.Stream <= s.lastPeerID {
		s.mu.Unlock()
		return &ProtocolError{Reason: fmt.Sprintf("stream id %d not above %d", h.Stream, s.lastPeerID)}
	}
	s.lastPeerID = h.Stream
	refuse := ""
	code := status.Unavailable
	switch {
	case s.goAwaySent:
		refuse = "server is shutting down"
	case uint32(s.streams.count()) >= s.local.MaxStreams || st == nil && perr == nil:
		refuse, code = fmt.Sprintf("too many concurrent streams (limit %d)", s.local.MaxStreams), status.ResourceExhausted
	case perr != nil:
		refuse, code = "malformed call header: "+perr.Error(), status.InvalidArgument
	}
	if refuse == "" && !s.streams.addLocked(h.Stream, st) {
		s.mu.Unlock()
		return nil // closed meanwhile
	}
	s.mu.Unlock()
	if refuse != "" {
		s.refuse(h.Stream, code, refuse)
		return nil
	}
	s.cfg.OnStream(st, &s.callHeader)
	s.callHeader = wire.CallHeader{}
	if st.recvEnd && s.cfg.OnRequest != nil {
		st.requested = true // half-closed without a message
		s.cfg.OnRequest(st)
	}
	return nil
}

// refuse ends a stream the peer opened without processing it.
func (s *Session) refuse(id uint32, code status.Code, msg string) {
	b, _ := s.w.lockNoWait()
	b = wire.AppendHeader(b, wire.Header{Stream: id, Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(b)
	b = wire.AppendTrailer(b, uint32(code), msg, nil, nil)
	setLength(b, start)
	s.w.unlockAsync(b)
}

func (s *Session) onReplyHeaders(h wire.Header, p []byte) error {
	if err := wire.RangeMetadata(p, func(k, v []byte) bool { return true }); err != nil {
		return &ProtocolError{Reason: "malformed reply metadata: " + err.Error()}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	if st.ID() == h.Stream {
		st.header = append(st.header[:0], p...)
		st.hasHeader = true
	}
	st.mu.Unlock()
	return nil
}

func (s *Session) onTrailers(h wire.Header, p []byte) error {
	if s.client {
		if _, err := wire.ParseTrailer(p); err != nil {
			return &ProtocolError{Reason: "malformed trailers: " + err.Error()}
		}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	if st.ID() != h.Stream {
		st.mu.Unlock()
		return nil
	}
	if st.asm != nil {
		st.mu.Unlock()
		return &ProtocolError{Reason: "trailers in the middle of a chunked message"}
	}
	if !s.client {
		// A caller's TRAILERS|END half-closes its side without a message.
		st.recvEnd = true
		st.signalLocked()
		st.mu.Unlock()
		if !st.requested && s.cfg.OnRequest != nil {
			st.requested = true
			s.cfg.OnRequest(st)
		}
		return nil
	}
	st.trailer = append(st.trailer[:0], p...)
	st.hasTrailer = true
	st.recvEnd = true
	st.signalLocked()
	st.mu.Unlock()
	st.wakeSender() // the call is over: a sender waiting for credit stops
	return nil
}

func (s *Session) onData(h wire.Header, p []byte) error {
	n := int64(h.Length) // p may lack a length prefix the reader skipped (directDst)
	if s.connRecvWin.Add(-n) < 0 {
		return &ProtocolError{Reason: "connection flow-control window exceeded"}
	}
	st := s.lookup(h.Stream)
	if st == nil {
		s.grantConn(n) // a stream that ended meanwhile (a cancel crossed it)
		return nil
	}
	return st.onData(h, p)
}

// directDst gives the reader the memory a large DATA frame's payload goes
// to, so that the payload is read from the connection straight into place
// (see wire.Into); onData then finds it there. A frame that continues a
// chunked message goes into the message's buffer; one that starts a
// message (a whole message, or the first frame of a chunked one, whose
// length prefix is peeked at first) gets the message's buffer from the pool
// here, after the same checks onData makes, and becomes the stream's
// message in progress. The stream is marked (asmDirect) so that a
// concurrent drop does not give the buffer back to the pool while it is
// being read into.
func (s *Session) directDst(h wire.Header, head []byte) ([]byte, int) {
	if h.Type != wire.TypeData || h.Length < directMin {
		return nil, 0
	}
	st := s.lookup(h.Stream)
	if st == nil {
		return nil, 0
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ID() != h.Stream || st.rerr != nil || st.recvEnd {
		return nil, 0
	}
	if st.asm != nil {
		need := st.asmN + int(h.Length)
		if need > st.asmTotal {
			return nil, 0 // onData reports it
		}
		st.growAsmLocked(need)
		st.asmDirect = true
		st.lentLocked()
		return st.asm.B[st.asmN:need], 0
	}
	if h.Flags&wire.FlagMore == 0 {
		if h.Length > s.local.MaxMessageSize {
			return nil, 0
		}
		if !st.borrowLocked(int(h.Length)) {
			st.asm = pool.Get(int(h.Length))
		}
		st.asmN, st.asmTotal, st.asmDirect = 0, int(h.Length), true
		st.lentLocked()
		return st.asm.B, 0
	}
	if len(head) < 4 {
		return nil, 4 // the length prefix first
	}
	total := binary.BigEndian.Uint32(head)
	if total <= h.Length-4 || total > s.local.MaxMessageSize {
		return nil, 0 // onData reports it
	}
	st.startAsmLocked(int(total), int(h.Length-4))
	st.asmDirect = true
	st.lentLocked()
	return st.asm.B[:h.Length-4], 4
}

// asmBudget bounds the memory of chunked messages being assembled that a
// session takes at their declared sizes: its connection window, what the
// peer may have in flight.
func (s *Session) asmBudget() int64 { return int64(s.local.InitialWindow) * connWindowFactor }

// grantConn returns n bytes of connection credit to the peer, batching
// WINDOW frames until half the window is owed.
func (s *Session) grantConn(n int64) {
	if n == 0 {
		return
	}
	owed := s.connUnacked.Add(n)
	if owed < int64(s.local.InitialWindow)*connWindowFactor/2 {
		return
	}
	if !s.connUnacked.CompareAndSwap(owed, 0) {
		return // another goroutine is granting
	}
	s.connRecvWin.Add(owed)
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(owed))
	s.writeFrame(0, wire.TypeWindow, 0, p[:])
}

func (s *Session) onWindow(id uint32, incr uint32) {
	if id == 0 {
		s.flowMu.Lock()
		s.connSendWin += int64(incr)
		waiters := s.flowWaiters
		s.flowWaiters = nil
		s.flowMu.Unlock()
		for _, st := range waiters {
			st.wakeSender()
		}
		return
	}
	st := s.lookup(id)
	if st == nil {
		return
	}
	s.flowMu.Lock()
	if st.ID() == id {
		st.sendWin += int64(incr)
	}
	s.flowMu.Unlock()
	st.wakeSender()
}

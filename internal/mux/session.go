package mux

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/wire"
)

// Config configures a session. The zero value is valid for a client.
type Config struct {
	// Settings are the limits this side accepts; zero fields take the
	// defaults of wire.Settings.WithDefaults, except MaxFrameSize and
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
	// KeepHTTP (server role) leaves a peer that sends an HTTP request
	// (wire.ErrHTTPRequest) instead of the preface to the caller: Server
	// returns an error matching wire.ErrHTTPRequest, whose
	// *wire.NotWarrenError holds the bytes read (Prefix), without
	// answering or closing conn, and with the handshake deadline still set
	// on it. Without KeepHTTP such a peer is answered with
	// httpRejectResponse and the connection is closed.
	KeepHTTP bool
	// SharedMin sends messages of at least this many bytes (16 KiB at
	// least) in sealed memfds when both sides announced Settings.MaxFiles
	// on a unix socket; 0 means DefaultSharedMin, negative never (whole
	// shared buffers and views still go shared). MaxShared bounds the bytes of
	// such messages received and mapped at once; 0 means
	// DefaultMaxShared.
	SharedMin int
	MaxShared int64
	// FedFiles (fed sessions, NewFed) is where the event loop queues the
	// descriptors it receives on the connection (NewFileQueue), if it
	// announced Settings.MaxFiles in its preface; nil: it announced none.
	FedFiles *shm.Queue
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
	r         *frameio.Reader
	w         writer

	callHeader wire.CallHeader // reader goroutine only: the header being handed to OnStream

	mu         sync.Mutex // protects following
	streams    streamTable
	nextID     uint32 // next stream id this side opens
	lastPeerID uint32 // highest stream id the peer opened
	goAwayRecv bool   // the peer sent GOAWAY
	goAwayLast uint32 // last stream id the peer will process
	goAwayCode wire.Code
	goAwayMsg  string
	goAwaySent bool
	sentLast   uint32
	pings      map[uint64]chan struct{}
	free       []*Stream       // released client streams, for reuse
	lastDone   <-chan struct{} // the Done channel of the last waiter that was not watching its context (see watching)
	pingSeq    uint64
	err        error // why the session ended

	// lastRefusedID is, on a client, the highest stream id the server
	// opened; each was refused (onServerOpen).
	lastRefusedID uint32

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
	inlineRuns    atomic.Uint64
	watchArmed    atomic.Bool
	watchedRuns   uint64 // inlineRuns at the last tick; watchdog only
	watchedInline bool   // a request ran inline at the last tick; watchdog only
	closeOnce     sync.Once
	closing       atomic.Bool // closeWith has begun

	direct frameio.Into // s.directDst, made once

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

	fs fileState // descriptors and shared messages (files.go)
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

func (s *Session) start(peer wire.Settings) {
	s.peer = peer
	s.startFiles()
	// Half a window at most, so that a sender with part of its window
	// still unreturned (the receiver returns credit in halves) can always
	// make progress.
	s.frameSize = min(peer.MaxFrameSize, peer.InitialWindow/2)
	s.connSendWin = int64(peer.InitialWindow) * connWindowFactor
	s.connRecvWin.Store(int64(s.local.InitialWindow) * connWindowFactor)
	s.r = frameio.NewReader(s.conn, s.local.MaxFrameSize)
	s.direct = s.directDst
	s.w.init(s.conn)
	s.w.onErr = func(err error) {
		if !s.closing.Load() { // a failed write while closing is expected
			s.closeWith(err)
		}
	}
	s.done = make(chan struct{})
	if !s.client {
		s.readers.Add(1)
		go s.readLoop()
	}
}

// GoAwayReason returns the code and message of the peer's GOAWAY, if it
// sent one.
func (s *Session) GoAwayReason() (code wire.Code, msg string, ok bool) {
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
		var pe *wire.ProtocolError
		if errors.As(err, &pe) {
			// Tell the peer why before hanging up.
			s.conn.SetWriteDeadline(time.Now().Add(time.Second))
			b, _ := s.w.lockNoWait()
			b = wire.AppendHeader(b, wire.Header{Type: wire.TypeGoAway})
			start := len(b)
			s.mu.Lock()
			last := s.lastPeerID
			s.mu.Unlock()
			b = wire.AppendGoAway(b, last, uint32(codeInternal), pe.Error())
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
			if s.client {
				st.fail(err) // the caller receives what came, then Releases
				continue
			}
			if s.cfg.OnReset != nil {
				s.cfg.OnReset(st, err)
			}
			// No one can be answered: the messages a call has not taken
			// (a shared one holds a memfd and its mapping) are freed now,
			// as a call abandoned before it started never takes them.
			st.drop(err)
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
// received will be processed. Streams already open go on. Only the first
// call sends a GOAWAY.
func (s *Session) GoAway(code wire.Code, msg string) error {
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
	if s.goAwaySent {
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

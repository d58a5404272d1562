package mux

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// Stream is one call on a session: an ordered, flow-controlled sequence of
// messages in each direction, ended by the server's trailers.
type Stream struct {
	s   *Session
	idv atomic.Uint32 // the stream id; 0 while a pooled client stream is free

	// Owner is free for the layer above, typically its per-call state.
	Owner any

	mu         sync.Mutex // protects following
	qbuf       [2]queued
	queue      []queued // complete messages not yet received; queue[head:] are live
	head       int
	asm        *pool.Buf // chunked message being assembled
	asmN       int       // bytes of asm filled so far
	asmTotal   int       // the message's declared size; asm grows to it (see startAsmLocked)
	asmRes     int64     // bytes of the session's assembly budget asm holds
	asmDirect  bool      // the reader may be reading into asm (Session.directDst): drop must not pool it
	recvEnd    bool      // the peer half-closed
	hasHeader  bool
	hasTrailer bool
	requested  bool          // OnRequest was called (reader goroutine only)
	lend       *lendState    // RecvInto's offer; made on first use, kept while the stream is pooled
	rerr       error         // terminal error; set once
	header     []byte        // reply metadata block (client)
	trailer    []byte        // trailer payload (client)
	notify     chan struct{} // wakes a blocked Recv; created on first need
	recvWin    int64         // credit the peer may still use on this stream
	unacked    int64         // bytes consumed but not yet granted back
	held       int64         // credit for chunks withheld while messages wait in the queue

	// protected by s.flowMu
	sendWin  int64
	wnotify  chan struct{} // wakes a sender waiting for credit
	sendDone bool          // FlagEnd was sent

	hasWnotify atomic.Bool // wnotify is set: wakeSender reads it only then
}

type queued struct {
	b      *pool.Buf
	credit int32 // flow-control credit returned when b is received
}

// init readies a client stream for a call with stream id id: sent bytes
// of its credit are used by the message that goes with the call header,
// and done records that the call half-closes with it. The send state is
// set under s.flowMu, as a WINDOW frame from the peer (even one for a
// stream it has not seen yet) changes it.
func (st *Stream) init(s *Session, id uint32, sent int64, done bool) {
	if st.s == nil {
		st.s = s // pooled client streams keep their session
	}
	st.mu.Lock()
	st.idv.Store(id)
	st.queue = st.qbuf[:0]
	st.recvWin = int64(s.local.InitialWindow)
	st.mu.Unlock()
	s.flowMu.Lock()
	st.sendWin = int64(s.peer.InitialWindow) - sent
	st.sendDone = done
	s.flowMu.Unlock()
}

// initFresh is init for a new stream that no other goroutine can see yet
// (the peer opened it): it needs no locks.
func (st *Stream) initFresh(s *Session, id uint32) {
	st.s = s
	st.idv.Store(id)
	st.queue = st.qbuf[:0]
	st.recvWin = int64(s.local.InitialWindow)
	st.sendWin = int64(s.peer.InitialWindow)
}

// ID returns the stream's id.
func (st *Stream) ID() uint32 { return st.idv.Load() }

// Session returns the stream's session.
func (st *Stream) Session() *Session { return st.s }

// Open opens a stream for a call (client role). It sends the call header and,
// if msg is not nil, the first message, together in one write when they fit;
// end half-closes the send side after msg. The stream must be released with
// Release when the caller is done with it.
func (s *Session) Open(ctx context.Context, method string, codec uint8, timeout time.Duration, md []string, msg []byte, end bool) (*Stream, error) {
	return s.OpenInto(ctx, method, codec, timeout, md, msg, end, nil)
}

// OpenInto is Open with the memory of recv offered for the first message
// received, as RecvInto offers it, but before the call is sent: a reply
// that comes back while a large request is still being written can then
// be read into it too.
func (s *Session) OpenInto(ctx context.Context, method string, codec uint8, timeout time.Duration, md []string, msg []byte, end bool, recv []byte) (*Stream, error) {
	if msg != nil {
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return nil, err
		}
	}
	// A small message goes with the call header, in the same write; a
	// large one is written in place by Send (writer.writeDirect), and the
	// call header, left in the writer's buffer, goes in the same write.
	large := msg != nil && (uint32(len(msg)) > s.frameSize || len(msg) >= directMin)
	inline := msg != nil && !large && s.tryConnCredit(len(msg))
	var sent int64 // credit used by the message that goes with the call header
	if inline {
		sent = int64(len(msg))
	}
	done := end && (msg == nil || inline) // the call header's write half-closes
	b, err := s.w.lock()
	var st *Stream
	if err == nil {
		st, err = s.registerLocked(sent, done)
	}
	if err != nil {
		s.w.unlock(b)
		if inline {
			s.returnConnCredit(len(msg))
		}
		return nil, err
	}
	if recv != nil {
		// Before the call is sent, so before any reply can come.
		st.RecvInto(recv)
	}
	var flags wire.Flags
	if end && msg == nil {
		flags = wire.FlagEnd
	}
	b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders, Flags: flags})
	start := len(b)
	b = wire.AppendCallHeader(b, method, codec, timeout, md)
	setLength(b, start)
	if inline {
		flags = 0
		if end {
			flags = wire.FlagEnd
		}
		b = wire.AppendFrame(b, st.ID(), wire.TypeData, flags, msg)
	}
	if large {
		s.w.unlockLater(b)
	} else if err := s.w.unlock(b); err != nil {
		st.Release()
		return nil, err
	}
	if msg != nil && !inline {
		if err := st.Send(ctx, msg, end); err != nil {
			st.Cancel()
			s.w.kick() // the call header, if it is still buffered
			st.Release()
			return nil, err
		}
	}
	return st, nil
}

// registerLocked takes a stream from the session's pool of client streams
// (or makes one), readies it (init, with sent and done) with the next
// stream id and records it, in one locked section. The writer lock is
// held, so stream ids reach the wire in increasing order. Streams are
// pooled per session, so a stale reference to a released stream still
// points at the right session, and its id tells it apart.
func (s *Session) registerLocked(sent int64, done bool) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
		return nil, s.err
	case s.goAwayRecv:
		return nil, &GoAwayError{Code: s.goAwayCode, Message: s.goAwayMsg}
	case uint32(s.streams.count()) >= s.peer.MaxStreams:
		return nil, ErrTooManyStreams
	}
	var st *Stream
	if n := len(s.free); n > 0 {
		st = s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
	} else {
		st = &Stream{s: s}
	}
	st.init(s, s.nextID, sent, done)
	s.nextID += 2
	s.streams.addLocked(st.ID(), st)
	s.w.open.Add(1)
	return st, nil
}

func (s *Session) tryConnCredit(n int) bool {
	s.flowMu.Lock()
	ok := s.connSendWin >= int64(n)
	if ok {
		s.connSendWin -= int64(n)
	}
	s.flowMu.Unlock()
	return ok
}

func (s *Session) returnConnCredit(n int) { s.onWindow(0, uint32(n)) }

// Send sends one message on the stream, waiting for flow-control credit as
// needed; end half-closes the send side after it. A message larger than the
// peer's frame size is sent in chunks that other streams' frames may
// interleave with.
func (st *Stream) Send(ctx context.Context, msg []byte, end bool) error {
	return st.send(ctx, msg, end, nil)
}

// send is Send. tail, if not nil, holds frames of the stream written right
// after the message's last frame, in the same write (the trailers, from
// Finish, which removes the stream from the session just before that
// write).
func (st *Stream) send(ctx context.Context, msg []byte, end bool, tail []byte) error {
	s := st.s
	if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
		return err
	}
	if uint32(len(msg)) <= s.frameSize && len(msg) < directMin {
		if err := st.acquire(ctx, len(msg), end); err != nil {
			return err
		}
		var flags wire.Flags
		if end {
			flags = wire.FlagEnd
		}
		b, err := s.w.lockFor(st)
		if err == nil {
			b = wire.AppendFrame(b, st.ID(), wire.TypeData, flags, msg)
			if tail != nil {
				s.removeEnding(st)
				b = append(b, tail...)
			}
		} else {
			s.returnConnCredit(len(msg)) // never sent
		}
		if uerr := s.w.unlock(b); err == nil {
			err = uerr
		}
		return err
	}
	if s.client {
		// A large message may need credit, and the peer may block writing
		// it if no one reads: keep a reader going while it is sent.
		s.waiters.Add(1)
		defer s.waiters.Add(-1)
		s.ensureReader()
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(len(msg)))
	var hdrBuf [wire.HeaderSize + 4]byte
	rest := msg
	first := true
	chunked := uint32(len(msg)) > s.frameSize // else one frame, without the length prefix
	per := len(msg)                           // frame payload size
	if chunked {
		// As few frames as the frame size allows, of equal size: a 1 MiB
		// message in 512 KiB frames is three frames of about 341 KiB, not
		// two full ones and a third of the 4 bytes the length prefix
		// pushed out.
		total := len(msg) + 4
		frames := (total + int(s.frameSize) - 1) / int(s.frameSize)
		per = (total + frames - 1) / frames
	}
	for len(rest) > 0 {
		n := per
		if first && chunked {
			n -= 4
		}
		n = min(n, len(rest))
		flags := wire.FlagMore
		last := n == len(rest)
		if last {
			flags = 0
			if end {
				flags = wire.FlagEnd
			}
		}
		size := n
		if first && chunked {
			size += 4
		}
		if err := st.acquire(ctx, size, last && end); err != nil {
			return err
		}
		hdr := wire.AppendHeader(hdrBuf[:0], wire.Header{Length: uint32(size), Stream: st.ID(), Type: wire.TypeData, Flags: flags})
		if first && chunked {
			hdr = append(hdr, prefix[:]...)
		}
		var after []byte
		if last {
			after = tail
		}
		var err error
		if n >= directMin {
			err = s.w.writeDirect(st, hdr, rest[:n], after)
		} else {
			var b []byte
			if b, err = s.w.lockFor(st); err == nil {
				if after != nil {
					s.removeEnding(st) // see writeDirect
				}
				b = append(append(append(b, hdr...), rest[:n]...), after...)
			}
			if uerr := s.w.unlock(b); err == nil {
				err = uerr
			}
		}
		if err != nil {
			// The chunk was not sent (the stream failed while waiting for
			// the writer) or the connection is lost: give the connection
			// credit back, since the peer will never see those bytes.
			s.returnConnCredit(size)
			return err
		}
		rest = rest[n:]
		first = false
	}
	return nil
}

// directMin is the smallest chunk written straight from the caller's
// message (writer.writeDirect) instead of being copied into the writer's
// buffer.
const directMin = 16 << 10

// acquire takes n bytes of stream and connection credit, waiting for WINDOW
// frames if needed. end marks the stream's send side closed.
func (st *Stream) acquire(ctx context.Context, n int, end bool) error {
	s := st.s
	for {
		if err := st.err(); err != nil {
			return err
		}
		s.flowMu.Lock()
		if st.sendDone {
			s.flowMu.Unlock()
			return ErrStreamClosed
		}
		if st.sendWin >= int64(n) && s.connSendWin >= int64(n) {
			st.sendWin -= int64(n)
			s.connSendWin -= int64(n)
			st.sendDone = end
			s.flowMu.Unlock()
			return nil
		}
		if s.connSendWin < int64(n) {
			s.flowWaiters = append(s.flowWaiters, st)
		}
		if st.wnotify == nil {
			st.wnotify = make(chan struct{}, 1)
			st.hasWnotify.Store(true)
		}
		ch := st.wnotify
		s.flowMu.Unlock()
		// fail sets the error, then looks at hasWnotify: looking at the
		// error again after setting hasWnotify, the one or the other sees
		// the other's change, so a stream that fails now is not missed.
		if err := st.err(); err != nil {
			return err
		}
		if s.client {
			s.waiters.Add(1)
			s.ensureReader()
		}
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		case <-s.done:
			err = s.Err()
		}
		if s.client {
			s.waiters.Add(-1)
		}
		if err != nil {
			return err
		}
	}
}

func (st *Stream) wakeSender() {
	if !st.hasWnotify.Load() {
		return // no sender ever waited on st
	}
	st.s.flowMu.Lock()
	ch := st.wnotify
	st.s.flowMu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (st *Stream) err() error {
	st.mu.Lock()
	err := st.rerr
	if err == nil && st.hasTrailer {
		err = ErrStreamEnded
	}
	st.mu.Unlock()
	return err
}

// Recv returns the next message. It returns io.EOF after the peer
// half-closed and every message was received. The returned buffer belongs
// to the caller, who should give it back with pool.Put when done.
func (st *Stream) Recv(ctx context.Context) (*pool.Buf, error) {
	for {
		st.mu.Lock()
		if st.head < len(st.queue) {
			q := st.queue[st.head]
			st.queue[st.head] = queued{}
			st.head++
			credit := int64(q.credit)
			if st.head == len(st.queue) {
				st.queue = st.queue[:0]
				st.head = 0
				credit += st.held // the queue is empty: chunks may flow again
				st.held = 0
			}
			owed := st.ackLocked(credit)
			id := st.ID()
			st.mu.Unlock()
			st.s.grantConn(credit)
			if owed > 0 {
				st.s.sendWindow(id, owed)
			}
			return q.b, nil
		}
		if st.recvEnd && st.asm == nil {
			st.mu.Unlock()
			return nil, io.EOF
		}
		if st.rerr != nil {
			err := st.rerr
			st.mu.Unlock()
			return nil, err
		}
		if st.notify == nil {
			st.notify = make(chan struct{}, 1)
		}
		ch := st.notify
		st.mu.Unlock()
		if s := st.s; s.client {
			if err := s.waitRead(ctx, st, ch); err != nil {
				return nil, err
			}
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// consumedID returns n bytes of credit for messages the application took,
// on the stream with the given id: if st was released
// and reused meanwhile, only the connection credit is returned.
func (st *Stream) consumedID(id uint32, n int64) {
	s := st.s
	s.grantConn(n)
	st.mu.Lock()
	if st.ID() != id {
		st.mu.Unlock()
		return
	}
	owed := st.ackLocked(n)
	st.mu.Unlock()
	if owed > 0 {
		s.sendWindow(id, owed)
	}
}

// ackLocked records n bytes of the stream's credit as consumed and returns
// how much to grant the peer now with a WINDOW frame: nothing until half
// the window is owed, and nothing once the peer has finished sending.
func (st *Stream) ackLocked(n int64) int64 {
	st.unacked += n
	owed := st.unacked
	if owed < int64(st.s.local.InitialWindow)/2 || st.recvEnd || st.rerr != nil {
		return 0
	}
	st.unacked = 0
	st.recvWin += owed
	return owed
}

// sendWindow grants the peer n more bytes of credit on stream id.
func (s *Session) sendWindow(id uint32, n int64) {
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(n))
	s.writeFrame(id, wire.TypeWindow, 0, p[:])
}

func (st *Stream) signalLocked() {
	if st.notify != nil {
		select {
		case st.notify <- struct{}{}:
		default:
		}
	}
}

// onData handles a DATA frame for the stream on the reader goroutine.
// startAsmLocked starts assembling a chunked message of total bytes whose
// first chunk holds first bytes. Its buffer is taken at the declared size
// while the session's assembly budget (its connection window) allows;
// beyond, the buffer starts small and grows as chunks arrive, so that
// streams declaring large messages cannot make the receiver hold much more
// memory than it was sent.
func (st *Stream) startAsmLocked(total, first int) {
	s := st.s
	st.asmTotal, st.asmN = total, 0
	if st.borrowLocked(total) {
		return
	}
	if s.asmReserved.Add(int64(total)) <= s.asmBudget() {
		st.asmRes = int64(total)
		st.asm = pool.Get(total)
		return
	}
	s.asmReserved.Add(-int64(total))
	st.asmRes = 0
	st.asm = pool.Get(min(total, max(2*first, asmStart)))
}

// asmStart is the smallest buffer a message assembled beyond the budget
// starts with.
const asmStart = 64 << 10

// growAsmLocked makes asm hold at least need bytes (at most asmTotal),
// doubling it. asm is not being read into (asmDirect is false).
func (st *Stream) growAsmLocked(need int) {
	if need <= len(st.asm.B) {
		return
	}
	nb := pool.Get(min(st.asmTotal, max(need, 2*len(st.asm.B))))
	copy(nb.B, st.asm.B[:st.asmN])
	pool.Put(st.asm)
	st.asm = nb
}

// releaseAsmLocked gives back the budget the finished or dropped message
// held.
func (st *Stream) releaseAsmLocked() {
	if st.asmRes != 0 {
		st.s.asmReserved.Add(-st.asmRes)
		st.asmRes = 0
	}
}

func (st *Stream) onData(h wire.Header, p []byte) error {
	s := st.s
	n := int64(h.Length) // p may lack a length prefix the reader skipped (directDst)
	st.mu.Lock()
	if st.ID() != h.Stream || st.rerr != nil {
		st.mu.Unlock()
		s.grantConn(n)
		return nil
	}
	if st.recvEnd {
		st.mu.Unlock()
		return &ProtocolError{Reason: fmt.Sprintf("DATA after end of stream %d", h.Stream)}
	}
	st.recvWin -= n
	if st.recvWin < 0 {
		st.mu.Unlock()
		return &ProtocolError{Reason: fmt.Sprintf("stream %d flow-control window exceeded", h.Stream)}
	}
	var early int64 // credit returned at once, for a chunk of an unfinished message
	switch {
	case st.asm == nil && h.Flags&wire.FlagMore == 0:
		if uint32(len(p)) > s.local.MaxMessageSize {
			st.mu.Unlock()
			s.grantConn(n)
			st.tooLarge(&wire.MessageTooLargeError{Size: int64(len(p)), Limit: int64(s.local.MaxMessageSize)})
			return nil
		}
		b := st.takeOfferLocked(len(p)) // copied there, not read in place
		if b == nil {
			b = pool.Get(len(p))
		}
		copy(b.B, p)
		st.queue = append(st.queue, queued{b, int32(n)})
	case st.asm == nil:
		if len(p) < 4 {
			st.mu.Unlock()
			return &ProtocolError{Reason: "chunked message without its length"}
		}
		total := binary.BigEndian.Uint32(p)
		if total <= uint32(len(p)-4) {
			st.mu.Unlock()
			return &ProtocolError{Reason: fmt.Sprintf("chunked message of %d bytes fits one frame", total)}
		}
		if total > s.local.MaxMessageSize {
			st.mu.Unlock()
			s.grantConn(n)
			st.tooLarge(&wire.MessageTooLargeError{Size: int64(total), Limit: int64(s.local.MaxMessageSize)})
			return nil
		}
		st.startAsmLocked(int(total), len(p)-4)
		st.asmN = copy(st.asm.B, p[4:])
		early = st.earlyCreditLocked(n)
	default:
		if st.asmN+len(p) > st.asmTotal {
			st.mu.Unlock()
			return &ProtocolError{Reason: "chunked message longer than declared"}
		}
		st.growAsmLocked(st.asmN + len(p))
		if len(p) > 0 && &p[0] == &st.asm.B[st.asmN] {
			st.asmN += len(p) // read in place (Session.directDst)
		} else {
			st.asmN += copy(st.asm.B[st.asmN:], p)
		}
		st.asmDirect = false
		if h.Flags&wire.FlagMore != 0 {
			early = st.earlyCreditLocked(n)
			break
		}
		if st.asmN != st.asmTotal {
			st.mu.Unlock()
			return &ProtocolError{Reason: "chunked message shorter than declared"}
		}
		st.queue = append(st.queue, queued{st.asm, int32(n)})
		st.asm = nil
		st.releaseAsmLocked()
	}
	if h.Flags&wire.FlagEnd != 0 {
		if st.asm != nil {
			st.mu.Unlock()
			return &ProtocolError{Reason: "end of stream inside a chunked message"}
		}
		st.recvEnd = true
	}
	if st.asm == nil {
		st.signalLocked() // a message, or the end: not for a mere chunk
	}
	ready := !st.requested && (len(st.queue) > st.head || st.recvEnd)
	st.mu.Unlock()
	if early > 0 {
		st.consumedID(h.Stream, early)
	}
	if ready && s.cfg.OnRequest != nil {
		st.requested = true
		s.cfg.OnRequest(st) // last: p may be overwritten once it returns
	}
	return nil
}

// PendingSize returns the size of the next message Recv would return, or -1
// if none is queued.
func (st *Stream) PendingSize() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.head < len(st.queue) {
		return len(st.queue[st.head].b.B)
	}
	return -1
}

// earlyCreditLocked decides the credit returned at once for a chunk of n
// bytes of an unfinished message. A message larger than the window could
// never complete if its chunks waited for Recv, so they are credited as they
// arrive, but only while no finished message waits in the queue: a receiver
// that stops reading thus holds at most one message and one window.
func (st *Stream) earlyCreditLocked(n int64) int64 {
	if st.head < len(st.queue) {
		st.held += n
		return 0
	}
	return n
}

// takeoverDelay is how long a request may run inline on the reader goroutine
// before another goroutine takes over reading the connection.
const takeoverDelay = time.Millisecond

// RunInline runs fn(st) on the calling goroutine, which must be the
// session's reader goroutine inside Config.OnRequest. Running a short
// request where its bytes were read saves two goroutine switches; if fn runs
// longer than a short delay, a new goroutine takes over reading the
// connection so other streams are not held up, and the current one leaves
// the reader loop when fn returns.
func (st *Stream) RunInline(fn func(*Stream)) {
	st.s.guarded(func() { fn(st) }) // the reader loop sees a takeover itself
}

// guarded runs fn, which may block writing, on the reader goroutine under
// the same takeover rule as RunInline. It reports whether another goroutine
// took over reading meanwhile, in which case the caller must stop reading.
//
// Arming a timer for every request would cost more than the goroutine
// switches inline running saves (resetting a timer can wake the runtime's
// network poller). Instead a watch timer ticks every takeoverDelay while the
// session runs requests inline, and stops after a quiet tick.
func (s *Session) guarded(fn func()) (replaced bool) {
	g := s.readerState.Load() &^ 1
	s.inlineRuns.Add(1) // before the bit: see watch
	s.readerState.Store(g | 1)
	if !s.watchArmed.Load() && s.watchArmed.CompareAndSwap(false, true) {
		s.inlineTimer.Reset(takeoverDelay)
	}
	fn()
	return !s.readerState.CompareAndSwap(g|1, g) // false: taken over
}

// watch runs on the watch timer: it starts a new reader goroutine if the
// request running inline now is the one that ran at the previous tick, a
// takeoverDelay ago or more (inlineRuns counts the runs, so no clock is
// read per request), and keeps ticking while the session is busy.
func (s *Session) watch() {
	// The bit first, then the count, which guarded raises before it sets
	// the bit: a count read with a bit belongs to that run or a later one,
	// so a run that has just begun is not taken for the one seen at the
	// previous tick.
	inline := s.readerState.Load()&1 != 0
	runs := s.inlineRuns.Load()
	if inline && s.watchedInline && runs == s.watchedRuns {
		s.takeover()
		inline = false // the new reader's runs count from here
	}
	if runs != s.watchedRuns || inline {
		s.watchedRuns, s.watchedInline = runs, inline
		s.inlineTimer.Reset(takeoverDelay)
		return
	}
	s.watchedInline = false
	s.watchArmed.Store(false)
	// A run that began just before the store above saw the timer armed and
	// did not arm it: look again.
	if s.readerState.Load()&1 != 0 && s.watchArmed.CompareAndSwap(false, true) {
		s.inlineTimer.Reset(takeoverDelay)
	}
}

// takeover starts a new reader goroutine if a request is still running
// inline.
func (s *Session) takeover() {
	cur := s.readerState.Load()
	if cur&1 == 0 || !s.readerState.CompareAndSwap(cur, (cur&^1)+2) {
		return // the inline request finished meanwhile
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.readers.Add(1)
	go s.readLoop()
}

// tooLarge abandons a stream whose incoming message is over the limit: the
// local side sees err, and the peer a ResourceExhausted status (server role)
// or a CANCEL (client role). A server's OnReset is told too: the work
// behind the stream may be waiting for that message, and the stream leaves
// the session here, so nothing else would tell it. It is told after the
// stream has failed, so that a Recv reports err rather than the end of its
// context.
func (st *Stream) tooLarge(err *wire.MessageTooLargeError) {
	st.drop(err)
	if s := st.s; !s.client && s.cfg.OnReset != nil {
		s.cfg.OnReset(st, err)
	}
	st.s.remove(st)
	if st.s.client {
		st.s.writeFrame(st.ID(), wire.TypeCancel, 0, nil)
	} else {
		st.s.refuse(st.ID(), status.ResourceExhausted, err.Error())
	}
}

// fail ends the stream with err (the first error wins) and wakes its
// receiver and sender. Messages already received stay deliverable, ahead of
// the error.
func (st *Stream) fail(err error) {
	st.mu.Lock()
	st.failLocked(err)
	st.mu.Unlock()
	st.wakeSenders()
}

// failLocked is fail's part under st.mu: the error, and the receiver's
// wake-up. The caller wakes the senders after unlocking (wakeSenders).
func (st *Stream) failLocked(err error) {
	if st.rerr == nil {
		st.rerr = err
	}
	st.signalLocked()
}

// wakeSenders wakes the goroutines that may wait to send on st, which has
// just failed: a sender waiting for credit, writers waiting for buffer
// space.
func (st *Stream) wakeSenders() {
	st.wakeSender()
	if w := &st.s.w; w.waiting.Load() > 0 {
		w.wake()
	}
}

// drop fails the stream with err and frees what it holds: queued messages
// and a partly assembled one, returning their connection credit.
func (st *Stream) drop(err error) {
	st.mu.Lock()
	st.failLocked(err)
	credit := st.freeLocked()
	st.mu.Unlock()
	st.wakeSenders()
	st.s.grantConn(credit)
}

// freeLocked gives back the messages st holds and returns their
// flow-control credit.
func (st *Stream) freeLocked() int64 {
	var credit int64
	for i := st.head; i < len(st.queue); i++ {
		pool.Put(st.queue[i].b)
		credit += int64(st.queue[i].credit)
		st.queue[i] = queued{}
	}
	st.queue = st.queue[:0]
	st.head = 0
	if st.asm != nil {
		if !st.asmDirect {
			pool.Put(st.asm)
		}
		st.asm = nil
		st.releaseAsmLocked()
	}
	credit += st.held
	st.held = 0
	return credit
}

// Header returns the reply metadata block the server sent, if any (client
// role). It is valid until Release.
func (st *Stream) Header() ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.header, st.hasHeader
}

// Trailer returns the trailer payload (client role) once Recv has returned
// io.EOF. It is valid until Release.
func (st *Stream) Trailer() ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.trailer, st.hasTrailer
}

// Cancel abandons the stream: the peer is sent a CANCEL frame and the stream
// fails locally with context.Canceled. The session stays up.
func (st *Stream) Cancel() {
	st.mu.Lock()
	done := st.rerr != nil || st.hasTrailer
	st.mu.Unlock()
	st.drop(context.Canceled)
	st.s.remove(st)
	if !done {
		st.s.writeFrame(st.ID(), wire.TypeCancel, 0, nil)
	}
}

// CloseSend half-closes the client's send side without a message: the
// server reads the end of the request stream. It is a no-op if the send side
// is already closed.
func (st *Stream) CloseSend() error {
	s := st.s
	s.flowMu.Lock()
	if st.sendDone {
		s.flowMu.Unlock()
		return nil
	}
	st.sendDone = true
	s.flowMu.Unlock()
	b, err := s.w.lockFor(st)
	if err == nil {
		b = wire.AppendFrame(b, st.ID(), wire.TypeTrailers, wire.FlagEnd, nil)
	}
	if uerr := s.w.unlock(b); err == nil {
		err = uerr
	}
	return err
}

// SendHeader sends reply metadata (server role) ahead of the first message.
func (st *Stream) SendHeader(md []string) error {
	s := st.s
	if err := st.err(); err != nil {
		return err
	}
	b, err := s.w.lockFor(st)
	if err == nil {
		b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders})
		start := len(b)
		b = wire.AppendMetadata(b, md)
		setLength(b, start)
	}
	if uerr := s.w.unlock(b); err == nil {
		err = uerr
	}
	return err
}

// Close ends a client stream without returning it to the pool: use it
// instead of Release when other goroutines (a context watcher) may still
// refer to the stream. A stream not yet finished is canceled.
func (st *Stream) Close() {
	st.Cancel()
	st.unlend()
}

// Release returns a client stream to the session's pool. The caller must not
// use st afterwards.
func (st *Stream) Release() {
	if st.ID() == 0 {
		return // released already
	}
	s := st.s
	// Out of the table first, so that the reader finds it no more; one
	// that found it just before sees its id change below.
	s.remove(st)
	// Then, in one locked section, what drop, unlend and a reset would
	// each do: free what it holds, withdraw the offer of the caller's
	// memory, and clear it for reuse. (No one else receives on it: the
	// caller is done with it.)
	st.mu.Lock()
	credit := st.freeLocked()
	st.withdrawLocked()
	st.idv.Store(0)
	st.Owner = nil
	st.rerr, st.recvEnd = nil, false
	st.header, st.hasHeader = st.header[:0], false
	st.trailer, st.hasTrailer = st.trailer[:0], false
	st.unacked, st.recvWin = 0, 0
	st.requested = false
	if st.notify != nil {
		select {
		case <-st.notify:
		default:
		}
	}
	st.mu.Unlock()
	s.grantConn(credit)
	// The reader may be reading a payload into the caller's memory: wait
	// until it has stopped (see unlend).
	if s.lent.Load() == st {
		st.waitLent()
	}
	// No one sends on st now (the caller is done with it), so no sender
	// waits for credit: the flow state is cleared for the next call, and a
	// wake-up left by this one is drained.
	s.flowMu.Lock()
	st.sendDone = false
	st.sendWin = 0
	if st.wnotify != nil {
		select {
		case <-st.wnotify:
		default:
		}
	}
	s.flowMu.Unlock()
	if w := &s.w; w.waiting.Load() > 0 {
		w.wake() // a writer of st waiting for buffer space stops
	}
	s.freeClientStream(st)
}

// maxFreeStreams bounds a session's pool of client streams.
const maxFreeStreams = 256

// freeClientStream gives a released client stream back to the session's
// pool, from which registerLocked takes it.
func (s *Session) freeClientStream(st *Stream) {
	s.mu.Lock()
	if len(s.free) < maxFreeStreams {
		s.free = append(s.free, st)
	}
	s.mu.Unlock()
}

// Finish ends a stream the peer opened (server role): it sends the reply
// metadata (if header is not nil), the message msg (if hasMsg), and the
// trailers with the status, in one write when they fit. The stream is then
// closed.
func (st *Stream) Finish(ctx context.Context, header []string, msg []byte, hasMsg bool, code status.Code, message string, details [][]byte, trailer []string) error {
	s := st.s
	if hasMsg && (uint32(len(msg)) > s.frameSize || len(msg) >= directMin) {
		defer st.finished()
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return err
		}
		return st.finishLarge(ctx, header, msg, code, message, details, trailer)
	}
	removed := false
	defer func() {
		st.drop(ErrStreamClosed)
		if !removed {
			s.remove(st)
		}
	}()
	if hasMsg {
		if err := wire.CheckMessageSize(len(msg), s.peer.MaxMessageSize); err != nil {
			return err
		}
	}
	var err error
	if hasMsg {
		err = st.acquire(ctx, len(msg), false) // it looks at st's error first
		if err != nil {
			return err
		}
	} else {
		err = st.err()
	}
	var b []byte
	if err == nil {
		b, err = s.w.lockFor(st)
		if err != nil {
			s.w.unlock(b)
		}
	}
	if err != nil {
		if hasMsg {
			s.returnConnCredit(len(msg)) // never sent
		}
		return err
	}
	if header != nil {
		b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeHeaders})
		start := len(b)
		b = wire.AppendMetadata(b, header)
		setLength(b, start)
	}
	if hasMsg {
		b = wire.AppendFrame(b, st.ID(), wire.TypeData, 0, msg)
	}
	b = wire.AppendHeader(b, wire.Header{Stream: st.ID(), Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(b)
	b = wire.AppendTrailer(b, uint32(code), message, details, trailer)
	setLength(b, start)
	// The stream stops counting against MaxStreams before the peer can
	// see it end and open the next one.
	s.removeEnding(st)
	removed = true
	return s.w.unlock(b)
}

// finishLarge is Finish for a message written in place (see
// writer.writeDirect): the reply metadata first, then the message with the
// trailers in the write of its last frame.
func (st *Stream) finishLarge(ctx context.Context, header []string, msg []byte, code status.Code, message string, details [][]byte, trailer []string) error {
	if header != nil {
		if err := st.SendHeader(header); err != nil {
			return err
		}
	}
	tb := pool.Get(512)
	t := wire.AppendHeader(tb.B[:0], wire.Header{Stream: st.ID(), Type: wire.TypeTrailers, Flags: wire.FlagEnd})
	start := len(t)
	t = wire.AppendTrailer(t, uint32(code), message, details, trailer)
	setLength(t, start)
	err := st.send(ctx, msg, false, t) // t is written or copied when it returns
	pool.Put(tb)
	return err
}

func (st *Stream) finished() {
	st.drop(ErrStreamClosed)
	st.s.remove(st)
}

// Refuse ends a stream the peer opened with a non-OK status and no reply,
// without waiting for buffer space: it is safe on the reader goroutine.
func (st *Stream) Refuse(code status.Code, msg string) {
	st.s.remove(st)
	st.s.refuse(st.ID(), code, msg)
	st.finished()
}

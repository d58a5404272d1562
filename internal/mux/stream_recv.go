package mux

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/wire"
)

// Receiving on a stream: queued and assembled messages, and the credit
// given back for them.

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
		return &wire.ProtocolError{Reason: fmt.Sprintf("DATA after end of stream %d", h.Stream)}
	}
	st.recvWin -= n
	if st.recvWin < 0 {
		st.mu.Unlock()
		return &wire.ProtocolError{Reason: fmt.Sprintf("stream %d flow-control window exceeded", h.Stream)}
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
			return &wire.ProtocolError{Reason: "chunked message without its length"}
		}
		total := binary.BigEndian.Uint32(p)
		if total <= uint32(len(p)-4) {
			st.mu.Unlock()
			return &wire.ProtocolError{Reason: fmt.Sprintf("chunked message of %d bytes fits one frame", total)}
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
			return &wire.ProtocolError{Reason: "chunked message longer than declared"}
		}
		st.growAsmLocked(st.asmN + len(p))
		if len(p) > 0 && &p[0] == &st.asm.B[st.asmN] {
			st.asmN += len(p) // read in place (Session.directDst)
		} else {
			st.asmN += copy(st.asm.B[st.asmN:], p)
		}
		st.asmDirect = false
		if h.Flags&wire.FlagMore != 0 {
			if len(p) == 0 || st.asmN == st.asmTotal {
				st.mu.Unlock()
				return &wire.ProtocolError{Reason: "chunked message: empty continuation frame, or FlagMore on its last frame"}
			}
			early = st.earlyCreditLocked(n)
			break
		}
		if st.asmN != st.asmTotal {
			st.mu.Unlock()
			return &wire.ProtocolError{Reason: "chunked message shorter than declared"}
		}
		st.queue = append(st.queue, queued{st.asm, int32(n)})
		st.asm = nil
		st.releaseAsmLocked()
	}
	if h.Flags&wire.FlagEnd != 0 {
		if st.asm != nil {
			st.mu.Unlock()
			return &wire.ProtocolError{Reason: "end of stream inside a chunked message"}
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

package mux

import (
	"context"
	"encoding/binary"

	"github.com/warrenipc/warren/wire"
)

// Sending on a stream: flow-control credit, per stream and per connection.

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
	if sent, err := st.sendShared(ctx, msg, end, tail); sent {
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

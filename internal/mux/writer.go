package mux

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/warrenipc/warren/internal/rawio"
	"github.com/warrenipc/warren/wire"
)

// writer is the single writer of a connection. It has no goroutine of its
// own: the first caller to find the connection idle becomes the flusher and
// keeps writing, in one syscall per round, whatever other callers appended
// while it was busy. Concurrent callers' frames are thereby coalesced into as
// few writes as possible, and a lone caller writes its frames at once.
type writer struct {
	conn net.Conn

	mu         sync.Mutex     // protects following
	cond       sync.Cond      // signalled when a flush round ends
	buf        []byte         // frames waiting to be written
	spare      []byte         // the other half of the double buffer
	flushing   bool           // a caller is inside conn.Write
	waiting    atomic.Int32   // callers in waitRoomLocked or writeDirect's wait, which a failing stream wakes
	corked     bool           // hold frames back (see cork)
	err        error          // first write error; sticky
	onErr      func(error)    // called once, without the lock, when a write fails
	async      sync.WaitGroup // goroutines started by unlockAsync
	asyncFn    func()         // w.asyncFlush, made once
	asyncClaim bool           // flushing is claimed for an unlockAsync goroutine not yet running
	fed        FedConn        // set in fed mode (fed.go): writes never block
	fw         fedWriter      // fed mode state

	open atomic.Int32 // client: streams open, mirrored from Session.streams

	// Output accepted but not yet written, for readers' backpressure
	// (see overLocked). Protected by mu.
	inflight      int // bytes being written by the flusher
	pingsBuf      int // PING replies in buf
	pingsInflight int // PING replies being written

	iov  [3][]byte   // writeDirect's buffers; only the flusher touches them
	bufs net.Buffers // a field, so that passing its address allocates nothing
}

// highWater bounds how much a writer buffers while a flush is in progress.
// Callers that find more pending wait for the flusher instead of growing the
// buffer without bound.
const highWater = 256 << 10

// yieldMin is the least a flusher must have to write before it yields to
// other callers to gather their frames (see flushLocked).
const yieldMin = 4 << 10

func (w *writer) init(conn net.Conn) {
	w.conn = conn
	w.cond.L = &w.mu
	w.asyncFn = w.asyncFlush
	w.buf = make([]byte, 0, 16<<10)
	w.spare = make([]byte, 0, 16<<10)
}

// lock acquires the writer and returns the buffer to append frames to. The
// caller must call unlock with the appended buffer, even on error.
func (w *writer) lock() ([]byte, error) {
	w.mu.Lock()
	for w.err == nil && w.flushing && len(w.buf) >= highWater {
		w.cond.Wait()
	}
	w.takeBuf()
	return w.buf, w.err
}

// lockFor is lock for frames of st: if st fails (the peer canceled it, or
// the call ended) while it waits for buffer space, it stops waiting and
// returns st's error, so that a peer that stops reading cannot hold a
// call it canceled. The caller must call unlock, as with lock.
func (w *writer) lockFor(st *Stream) ([]byte, error) {
	w.mu.Lock()
	if err := w.waitRoomLocked(st); err != nil {
		w.takeBuf()
		return w.buf, err
	}
	w.takeBuf()
	return w.buf, w.err
}

// waitRoomLocked waits, w.mu held, until the buffer has room (see
// highWater), the writer failed, or st failed (its error is returned).
func (w *writer) waitRoomLocked(st *Stream) error {
	for w.err == nil && w.flushing && len(w.buf) >= highWater {
		// Counted before looking at st, so that fail, which sets st's
		// error before it looks at the count, cannot miss this waiter.
		w.waiting.Add(1)
		if err := st.err(); err != nil {
			w.waiting.Add(-1)
			return err
		}
		w.cond.Wait()
		w.waiting.Add(-1)
	}
	return nil
}

// wake wakes the callers waiting for the writer, so that those waiting for
// a stream that just failed see it.
func (w *writer) wake() {
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
}

// lockNoWait is lock for small control frames: it never waits for buffer
// space, so the reader goroutine cannot deadlock against a peer that is
// itself blocked writing.
func (w *writer) lockNoWait() ([]byte, error) {
	w.mu.Lock()
	w.takeBuf()
	return w.buf, w.err
}

// unlock stores b as the pending buffer and, unless another caller is already
// flushing or the writer is corked, writes it out. It returns the sticky
// write error, if any.
func (w *writer) unlock(b []byte) error {
	w.buf = b
	if w.err != nil {
		w.buf = w.buf[:0]
		err := w.err
		w.mu.Unlock()
		return err
	}
	if w.flushing || w.corked && len(w.buf) < highWater {
		w.mu.Unlock()
		return nil
	}
	return w.flushLocked()
}

// unlockLater is unlock without writing: b stays buffered for a write that
// the caller is about to make (writeDirect, which writes what is buffered
// first) or for the next writer. The caller must make sure it is written:
// by writing, or with kick.
func (w *writer) unlockLater(b []byte) {
	w.buf = b
	w.mu.Unlock()
}

// kick writes what is buffered if no one is writing.
func (w *writer) kick() {
	w.mu.Lock()
	if w.flushing || w.corked || len(w.buf) == 0 || w.err != nil {
		w.mu.Unlock()
		return
	}
	w.flushLocked()
}

// flushLocked writes the pending buffer, and whatever is appended meanwhile,
// until none is left. w.mu is held on entry and released on return.
func (w *writer) flushLocked() error {
	if w.fed != nil {
		return w.flushFedLocked()
	}
	w.flushing = true
	if w.open.Load() > 1 && len(w.buf) >= yieldMin && len(w.buf) < highWater/4 {
		// Other callers have calls in flight and may be about to append
		// frames: let them run first, so that one write carries theirs too.
		// Not for less than yieldMin: small requests go out at once, and
		// the frames appended during the write go in the next one. The
		// peer starts on the first while the rest are being made; with 16
		// callers of 1 KiB that was 10-15% more calls per second, and at
		// 10 KiB the wait still paid (fewer writes, the same rate).
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	for len(w.buf) > 0 && w.err == nil && (!w.corked || len(w.buf) >= highWater) {
		out := w.buf
		w.buf = w.spare[:0]
		w.inflight, w.pingsInflight, w.pingsBuf = len(out), w.pingsBuf, 0
		w.mu.Unlock()
		_, err := w.conn.Write(out)
		w.mu.Lock()
		w.inflight, w.pingsInflight = 0, 0
		if cap(out) > 4*highWater {
			out = make([]byte, 0, 16<<10) // drop a buffer grown by a burst
		}
		w.spare = out[:0]
		if err != nil && w.err == nil {
			w.err = &wire.ConnError{Err: err}
			if w.onErr != nil {
				defer w.onErr(w.err) // runs after the unlock below
			}
		}
		w.cond.Broadcast()
	}
	w.flushing = false
	w.cond.Broadcast()
	err := w.err
	w.mu.Unlock()
	return err
}

// buffersWriter is a connection that can write several buffers in one
// system call (rawio.Ext, such as a transport.Conn's rawio.View;
// *net.UnixConn and *net.TCPConn through net.Buffers).
type buffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

// writeDirect writes the frames pending in the buffer, then hdr and
// payload (a frame of st), then tail (st's trailers, or nil), without
// copying payload into the buffer: the caller waits for the flusher role
// and writes them itself, with writev where the connection has it. Frames
// appended by others meanwhile are flushed after. It is for large DATA
// payloads, for which the copy costs more than the wait. The wait ends if
// st fails. With a tail, st is removed from its session just before the
// write, so that it stops counting against MaxStreams before the peer can
// see it end, yet a CANCEL still reaches it while it waits.
func (w *writer) writeDirect(st *Stream, hdr, payload, tail []byte) error {
	if w.fed != nil {
		if ok, err := w.writeFedDirect(st, hdr, payload, tail); ok {
			return err
		}
		// The loop's own writes never block: copy (appendFed), once there
		// is room.
		w.mu.Lock()
		err := w.waitRoomLocked(st)
		w.mu.Unlock()
		if err == nil {
			err = w.appendFed(hdr, payload)
		}
		if err == nil && tail != nil {
			b, _ := w.lockNoWait()
			st.s.removeEnding(st)
			err = w.unlock(append(b, tail...))
		}
		return err
	}
	w.mu.Lock()
	// Wait for the writer: st's own write costs the same wait, and a copy
	// (of up to a frame) would cost more.
	if err := w.claimLocked(st); err != nil {
		return err
	}
	if tail != nil {
		st.s.removeEnding(st)
	}
	out := append(w.buf, hdr...)
	w.buf = w.spare[:0]
	w.inflight, w.pingsInflight, w.pingsBuf = len(out)+len(payload), w.pingsBuf, 0
	w.mu.Unlock()
	var err error
	w.iov = [3][]byte{out, payload, tail}
	w.bufs = w.iov[:]
	if tail == nil {
		w.bufs = w.iov[:2]
	}
	switch c := rawio.View(w.conn).(type) {
	case buffersWriter:
		_, err = c.WriteBuffers(&w.bufs)
	case *net.UnixConn, *net.TCPConn:
		_, err = w.bufs.WriteTo(c)
	default:
		if _, err = c.Write(out); err == nil {
			_, err = c.Write(payload)
		}
		if err == nil && tail != nil {
			_, err = c.Write(tail)
		}
	}
	w.iov, w.bufs = [3][]byte{}, nil // keep no reference to the caller's payload
	w.mu.Lock()
	return w.wroteLocked(out, err)
}

// claimLocked waits, with w.mu held, until st may write as the flusher:
// the connection idle, or the role claimed for a goroutine of unlockAsync
// that has not started yet (its frames then go in st's write, and the
// goroutine does nothing). If the peer stops reading, the wait ends when
// st fails (it cancels the call, or the connection goes), so it cannot
// hold a call the peer gave up on. On error it returns with w.mu unlocked.
func (w *writer) claimLocked(st *Stream) error {
	for w.err == nil && w.flushing {
		if w.asyncClaim {
			w.asyncClaim = false
			break
		}
		w.waiting.Add(1) // before looking at st, as in waitRoomLocked
		if err := st.err(); err != nil {
			w.waiting.Add(-1)
			w.mu.Unlock()
			return err
		}
		w.cond.Wait()
		w.waiting.Add(-1)
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.flushing = true
	return nil
}

// wroteLocked ends, with w.mu held, a write of out that the flusher made
// outside the lock: it records a write error and writes what others
// appended meanwhile, if not corked.
func (w *writer) wroteLocked(out []byte, err error) error {
	w.inflight, w.pingsInflight = 0, 0
	w.spare = out[:0]
	if err != nil && w.err == nil {
		w.err = &wire.ConnError{Err: err}
		if w.onErr != nil {
			defer w.onErr(w.err) // runs after the unlock in flushLocked
		}
	}
	return w.flushLocked()
}

// cork holds frames back instead of writing them at once, so that the
// replies to a batch of requests read together leave in one write.
func (w *writer) cork() {
	w.mu.Lock()
	w.corked = true
	w.mu.Unlock()
}

// uncork writes what was held back.
func (w *writer) uncork() {
	w.mu.Lock()
	w.corked = false
	if w.flushing || len(w.buf) == 0 || w.err != nil {
		w.mu.Unlock()
		return
	}
	w.flushLocked()
}

// unlockAsync is unlock for control frames written by a reader goroutine:
// if the frames must be written now, a new goroutine writes them, so that the
// reader never blocks in conn.Write on a peer that is itself blocked writing
// and not reading.
func (w *writer) unlockAsync(b []byte) {
	if w.fed != nil {
		w.unlock(b) // fed writes never block
		return
	}
	w.buf = b
	if w.err != nil || w.flushing || w.corked && len(w.buf) < highWater || len(w.buf) == 0 {
		w.mu.Unlock()
		return
	}
	w.flushing = true // claimed for the goroutine below
	w.asyncClaim = true
	// Counted under w.mu: Close waits for async after fail, which takes
	// w.mu, so the count is never raised while Close waits.
	w.async.Add(1)
	w.mu.Unlock()
	go w.asyncFn() // a func value made once: starting it allocates nothing
}

// asyncFlush is the goroutine unlockAsync starts.
func (w *writer) asyncFlush() {
	defer w.async.Done()
	w.mu.Lock()
	if !w.asyncClaim {
		w.mu.Unlock() // a writeDirect took the role over (and the frames)
		return
	}
	w.asyncClaim = false
	w.flushing = false
	w.flushLocked()
}

// drain waits until every appended frame was written (or writing failed).
func (w *writer) drain() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.err == nil && (w.flushing || len(w.buf) > 0) {
		w.cond.Wait()
	}
	return w.err
}

// fail makes every later write fail with err and wakes blocked writers.
func (w *writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.failFedFiles()
	w.cond.Broadcast()
	w.mu.Unlock()
}

package mux

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
)

// writer is the single writer of a connection. It has no goroutine of its
// own: the first caller to find the connection idle becomes the flusher and
// keeps writing, in one syscall per round, whatever other callers appended
// while it was busy. Concurrent callers' frames are thereby coalesced into as
// few writes as possible, and a lone caller writes its frames at once.
type writer struct {
	conn net.Conn

	mu       sync.Mutex     // protects following
	cond     sync.Cond      // signalled when a flush round ends
	buf      []byte         // frames waiting to be written
	spare    []byte         // the other half of the double buffer
	flushing bool           // a caller is inside conn.Write
	corked   bool           // hold frames back (see cork)
	err      error          // first write error; sticky
	onErr    func(error)    // called once, without the lock, when a write fails
	async    sync.WaitGroup // goroutines started by unlockAsync
	fed      FedConn        // set in fed mode (fed.go): writes never block
	fw       fedWriter      // fed mode state

	open atomic.Int32 // client: streams open, mirrored from Session.streams

	iov  [2][]byte   // writeDirect's buffers; only the flusher touches them
	bufs net.Buffers // a field, so that passing its address allocates nothing
}

// highWater bounds how much a writer buffers while a flush is in progress.
// Callers that find more pending wait for the flusher instead of growing the
// buffer without bound.
const highWater = 256 << 10

func (w *writer) init(conn net.Conn) {
	w.conn = conn
	w.cond.L = &w.mu
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

// flushLocked writes the pending buffer, and whatever is appended meanwhile,
// until none is left. w.mu is held on entry and released on return.
func (w *writer) flushLocked() error {
	if w.fed != nil {
		return w.flushFedLocked()
	}
	w.flushing = true
	if w.open.Load() > 1 && len(w.buf) < highWater/4 {
		// Other callers have calls in flight and may be about to append
		// frames: let them run first, so that one write carries theirs too.
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	for len(w.buf) > 0 && w.err == nil && (!w.corked || len(w.buf) >= highWater) {
		out := w.buf
		w.buf = w.spare[:0]
		w.mu.Unlock()
		_, err := w.conn.Write(out)
		w.mu.Lock()
		if cap(out) > 4*highWater {
			out = make([]byte, 0, 16<<10) // drop a buffer grown by a burst
		}
		w.spare = out[:0]
		if err != nil && w.err == nil {
			w.err = &ConnError{Err: err}
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
// system call (transport.Conn; *net.UnixConn and *net.TCPConn through
// net.Buffers).
type buffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

// writeDirect writes the frames pending in the buffer, then hdr and payload,
// without copying payload into the buffer: the caller waits for the flusher
// role and writes them itself, with writev where the connection has it.
// Frames appended by others meanwhile are flushed after. It is for large
// DATA payloads, for which the copy costs more than the wait.
func (w *writer) writeDirect(hdr, payload []byte) error {
	if w.fed != nil {
		return w.appendFed(hdr, payload) // fed writes never block: copy
	}
	w.mu.Lock()
	if w.err == nil && w.flushing {
		// Another caller is writing: append a copy as lock and unlock do,
		// rather than wait behind a write that a peer not reading could
		// hold up indefinitely.
		for w.err == nil && w.flushing && len(w.buf) >= highWater {
			w.cond.Wait()
		}
		w.takeBuf()
		return w.unlock(append(append(w.buf, hdr...), payload...))
	}
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.flushing = true
	out := append(w.buf, hdr...)
	w.buf = w.spare[:0]
	w.mu.Unlock()
	var err error
	w.iov = [2][]byte{out, payload}
	w.bufs = w.iov[:]
	switch c := w.conn.(type) {
	case buffersWriter:
		_, err = c.WriteBuffers(&w.bufs)
	case *net.UnixConn, *net.TCPConn:
		_, err = w.bufs.WriteTo(c)
	default:
		if _, err = c.Write(out); err == nil {
			_, err = c.Write(payload)
		}
	}
	w.iov, w.bufs = [2][]byte{}, nil // keep no reference to the caller's payload
	w.mu.Lock()
	w.spare = out[:0]
	if err != nil && w.err == nil {
		w.err = &ConnError{Err: err}
		if w.onErr != nil {
			defer w.onErr(w.err) // runs after the unlock in flushLocked
		}
	}
	return w.flushLocked() // what others appended meanwhile, if not corked
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
	w.mu.Unlock()
	w.async.Add(1)
	go func() {
		defer w.async.Done()
		w.mu.Lock()
		w.flushing = false
		w.flushLocked()
	}()
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
	w.cond.Broadcast()
	w.mu.Unlock()
}

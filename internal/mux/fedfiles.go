package mux

import (
	"fmt"

	"github.com/warrenipc/warren/internal/shm"
)

// Descriptors on a fed session (an event loop's unix socket). The loop
// reads with recvmsg and queues the descriptors that arrive in the
// Config.FedFiles queue, from which onFiles takes them as on any
// session. Writes never block, so the descriptors of a frame cannot go
// out with a write the caller makes and waits for (writeFiles): the
// frame is appended to the buffer like any other, and the descriptors,
// duplicated, wait beside it (fedWriter.files) for the write that
// reaches the frame's first byte. That write is a sendmsg carrying them
// and ends before the next frame with descriptors, so that each sendmsg
// carries one frame's descriptors (the peer reads one control message
// per read: see shm.Conn) and they arrive no later than the frame naming
// them.

// FedFilesConn is a FedConn that can send descriptors: WriteFiles is
// Write with fds attached to b's first byte (one sendmsg). Like Write it
// never blocks: it writes what the socket takes and reports the rest
// with ErrWouldBlock; the descriptors were sent if it wrote anything.
type FedFilesConn interface {
	FedConn
	WriteFiles(b []byte, fds []int) (int, error)
}

// fedFiles are the descriptors of a frame waiting to be written.
type fedFiles struct {
	off int64 // the frame's first byte, counted from the session's first byte written
	fds []int // duplicates, closed once sent (or dropped)
}

// startFedFiles makes a fed session take descriptors from q, if the event
// loop announced MaxFiles (q non-nil); otherwise it announced none.
func (s *Session) startFedFiles(q *shm.Queue) {
	if q == nil || s.local.MaxFiles == 0 {
		s.local.MaxFiles = 0
		return
	}
	s.setFiles(q)
	s.startFiles()
}

// writeFedFiles is writeFiles for a fed writer: frame and tail are
// appended to the buffer, and duplicates of fds wait for the write that
// reaches frame. The caller keeps fds.
func (w *writer) writeFedFiles(st *Stream, frame, tail []byte, fds []int) error {
	if _, ok := w.fed.(FedFilesConn); !ok {
		return ErrNoFiles
	}
	dup := make([]int, 0, len(fds))
	for _, fd := range fds {
		d, err := shm.Dup(fd)
		if err != nil {
			shm.CloseAll(dup)
			return fmt.Errorf("warren: duplicating a descriptor to send: %w", err)
		}
		dup = append(dup, d)
	}
	w.mu.Lock()
	err := w.waitRoomLocked(st)
	w.mu.Unlock()
	if err != nil {
		shm.CloseAll(dup)
		return err
	}
	b, err := w.lockNoWait()
	if err != nil {
		shm.CloseAll(dup)
		return w.unlock(b)
	}
	if tail != nil {
		st.s.removeEnding(st)
	}
	off := w.fw.sent + int64(len(w.fw.pend)+len(w.fw.ext)+len(b)) // pend, a payload written in place (fed_direct.go), then buf
	w.fw.files = append(w.fw.files, fedFiles{off: off, fds: dup})
	b = w.fedRoom(b, len(frame)+len(tail))
	return w.unlock(append(append(b, frame...), tail...))
}

// fedChunk returns what of out (the start of the unwritten bytes) the
// next write takes, and the descriptors it carries: those of the first
// waiting frame if out reaches it, in which case out ends before the
// next one's frame. w.mu is held.
func (w *writer) fedChunk(out []byte) ([]byte, []int) {
	if len(w.fw.files) == 0 {
		return out, nil
	}
	end := w.fw.sent + int64(len(out))
	if w.fw.files[0].off >= end {
		return out, nil
	}
	if len(w.fw.files) > 1 && w.fw.files[1].off < end {
		out = out[:w.fw.files[1].off-w.fw.sent]
	}
	return out, w.fw.files[0].fds
}

// fedWrite writes out, with fds if there are any.
func (w *writer) fedWrite(out []byte, fds []int) (int, error) {
	if fds == nil {
		return w.fed.Write(out)
	}
	return w.fed.(FedFilesConn).WriteFiles(out, fds)
}

// fedWrote counts n bytes written (n > 0) by a write that carried fds,
// if not nil: they are sent, and closed. w.mu is held.
func (w *writer) fedWrote(n int, fds []int) {
	w.fw.sent += int64(n)
	if fds != nil {
		shm.CloseAll(fds)
		w.fw.files[0] = fedFiles{}
		w.fw.files = w.fw.files[1:]
		if len(w.fw.files) == 0 {
			w.fw.files = nil
		}
	}
}

// dropFedFiles closes the descriptors of frames that will not be
// written. w.mu is held and no write is in progress.
func (w *writer) dropFedFiles() {
	for _, f := range w.fw.files {
		shm.CloseAll(f.fds)
	}
	w.fw.files = nil
}

// failFedFiles is dropFedFiles for a writer that just failed, unless a
// write is in progress: that write's flusher drops them when it returns
// (releaseFedBufs). w.mu is held.
func (w *writer) failFedFiles() {
	if w.fed != nil && (!w.flushing || w.fw.waitOut) {
		w.dropFedFiles()
	}
}

package frameio

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"

	"github.com/warrenipc/warren/wire"
)

// DefaultBufferSize is the buffer size of a Reader for the default
// MaxFrameSize, and of a Writer created with size 0: one full frame.
const DefaultBufferSize = wire.HeaderSize + wire.DefaultMaxFrameSize

const minBufferSize = 4 << 10

// shrinkAfter is how many frames in a row that fit in a Reader's initial
// buffer make it drop a buffer that grew for a larger frame.
const shrinkAfter = 64

// maxEmptyReads is how many reads in a row may return nothing before a
// Reader gives up with io.ErrNoProgress (as bufio does).
const maxEmptyReads = 100

// Reader reads frames from a connection through a buffer it keeps for its
// whole life. It is not safe for concurrent use.
type Reader struct {
	rd      io.Reader
	buf     []byte
	r, w    int    // buf[r:w] is read but not yet returned
	max     uint32 // largest payload accepted
	pending error  // read error to return once the buffered frames are used
	size    int    // initial buffer size, to which a grown buffer shrinks back
	small   int    // frames in a row that fit in size, while the buffer is larger
	direct  int    // frames still to read exactly, after a payload read in place (NextInto)

	// A payload being read in place when a read failed: the next call
	// resumes it (see NextInto).
	rest    []byte // the part not read yet
	restDst []byte // the whole payload
	restH   wire.Header
}

// NewReader returns a Reader of frames from rd with payloads of at most
// maxPayload bytes, this side's MaxFrameSize. Its buffer holds one full
// frame of up to 64 KiB payload (and is at least 4 KiB). If a larger frame
// arrives, the buffer grows, by doubling as the frame's bytes arrive, up to
// HeaderSize+maxPayload; after a run of smaller frames it shrinks back.
func NewReader(rd io.Reader, maxPayload uint32) *Reader {
	size := int(max(min(uint64(wire.HeaderSize)+uint64(maxPayload), DefaultBufferSize), minBufferSize))
	return &Reader{rd: rd, buf: make([]byte, size), max: maxPayload, size: size}
}

// Reset discards any buffered bytes and makes r read from rd, keeping its
// buffer.
func (r *Reader) Reset(rd io.Reader) {
	r.rd, r.r, r.w, r.pending = rd, 0, 0, nil
	r.rest, r.restDst = nil, nil
}

// Buffered returns the number of bytes read from the connection but not yet
// returned as frames.
func (r *Reader) Buffered() int { return r.w - r.r }

// Next reads the next frame. The header is validated with Header.Check
// before its payload is read; a failing header is returned with the error and
// the Reader stays at that frame (every later call returns the same error).
// The payload aliases the Reader's buffer and is valid until the next call to
// Next or Reset.
//
// Next returns io.EOF when the connection ends at a frame boundary, and
// io.ErrUnexpectedEOF when it ends inside a frame.
func (r *Reader) Next() (wire.Header, []byte, error) { return r.NextInto(nil) }

// Into tells Reader.NextInto where a frame's payload goes. It is called
// after the frame's header was checked, when the payload is not all
// buffered yet, with head, the start of the payload that is (possibly
// empty). It returns one of:
//
//   - dst of exactly h.Length-skip bytes, with 0 <= skip <= len(head): the
//     payload's first skip bytes are taken from head (the caller has seen
//     them and wants them nowhere), and the rest is read from the
//     connection straight into dst, with no copy through the buffer;
//   - nil and a need larger than len(head), at most min(h.Length,
//     MaxIntoPeek): Into is called again once need bytes of the payload are
//     buffered (so that it can read, say, a length prefix first);
//   - nil and 0: the payload goes through the buffer, as with Next.
type Into func(h wire.Header, head []byte) (dst []byte, skip int)

// directRun is how many small frames after a payload read in place a
// Reader reads exactly, each with just the next frame's header, before it
// goes back to filling its buffer.
const directRun = 4

// MaxIntoPeek is the most payload bytes an Into may ask to see before it
// chooses.
const MaxIntoPeek = 64

// NextInto is Next, except that when a frame's payload is not all buffered
// yet, into (if not nil) may choose memory for it to be read into (see
// Into). The payload returned is then that memory, dst, which holds the
// payload without its first skip bytes.
//
// A read error leaves the Reader where it was, so that a read interrupted
// by a deadline can be retried: the next call continues the same frame,
// including a payload that was being read in place (it is then returned in
// the memory into gave for it, without asking again).
func (r *Reader) NextInto(into Into) (wire.Header, []byte, error) {
	if r.restDst != nil {
		h, dst := r.restH, r.restDst
		if err := r.readRest(); err != nil {
			return h, nil, err
		}
		r.direct = directRun
		return h, dst, nil
	}
	if r.small >= shrinkAfter && len(r.buf) > r.size && r.w-r.r <= r.size {
		nb := make([]byte, r.size)
		r.w = copy(nb, r.buf[r.r:r.w])
		r.r, r.buf, r.small = 0, nb, 0
	}
	if r.w-r.r < wire.HeaderSize {
		// After a payload read in place, the next frame is likely another
		// large one: read just its header, so that its payload too goes in
		// place instead of through the buffer.
		limit := 0
		if r.direct > 0 {
			limit = wire.HeaderSize
		}
		if err := r.fill(wire.HeaderSize, limit); err != nil {
			return wire.Header{}, nil, err
		}
	}
	h, _ := wire.ParseHeader(r.buf[r.r:r.w])
	if err := h.Check(r.max); err != nil {
		return h, nil, err
	}
	need := wire.HeaderSize + int(h.Length)
	for peeked := false; r.w-r.r < need && into != nil && h.Length > 0; peeked = true {
		head := r.buf[r.r+wire.HeaderSize : r.w]
		dst, skip := into(h, head)
		if dst == nil {
			if peeked || skip <= len(head) || skip > int(min(h.Length, MaxIntoPeek)) {
				break
			}
			// Read exactly the bytes asked for: the frame is known to hold
			// them, and reading no further keeps what follows in place.
			if err := r.fill(wire.HeaderSize+skip, wire.HeaderSize+skip); err != nil {
				return h, nil, err
			}
			continue
		}
		if skip < 0 || skip > len(head) || len(dst) != int(h.Length)-skip {
			break
		}
		k := copy(dst, head[skip:])
		r.r, r.w = 0, 0
		r.restH, r.restDst, r.rest = h, dst, dst[k:]
		if err := r.readRest(); err != nil {
			return h, nil, err
		}
		r.small = 0
		r.direct = directRun
		return h, dst, nil
	}
	if r.w-r.r < need {
		// Between large frames read in place come small ones (trailers,
		// call headers, credit): read such a frame with just the next
		// header, so that a large payload after it is not read into the
		// buffer and copied. A run of small frames ends this.
		limit := 0
		if r.direct > 0 {
			r.direct--
			limit = need + wire.HeaderSize
		}
		if err := r.fill(need, limit); err != nil {
			return h, nil, err
		}
	}
	p := r.buf[r.r+wire.HeaderSize : r.r+need : r.r+need]
	if need <= r.size {
		r.small++
	} else {
		r.small = 0
	}
	r.r += need
	if r.r == r.w {
		r.r, r.w = 0, 0
	}
	return h, p, nil
}

// Redirect moves a payload whose read in place was interrupted (see
// NextInto) to other memory: if one is pending, Redirect copies the part
// already read into dst, which must be as long as the whole payload, and the
// rest is read there; the next NextInto then returns dst. It reports
// whether a payload was pending. Use it when the memory Into gave may no
// longer be written.
func (r *Reader) Redirect(dst []byte) bool {
	if r.restDst == nil {
		return false
	}
	if len(dst) != len(r.restDst) {
		panic("wire: Redirect to memory of another length")
	}
	n := copy(dst, r.restDst[:len(r.restDst)-len(r.rest)])
	r.restDst, r.rest = dst, dst[n:]
	return true
}

// Pending returns the length of a payload whose read in place was
// interrupted, or 0.
func (r *Reader) Pending() int { return len(r.restDst) }

// fill reads until buf[r:w] holds at least need bytes, which Check has
// bounded by HeaderSize+max, reading no further than buf[r:r+limit] if
// limit > 0. It returns io.EOF only when the connection ends with nothing
// buffered.
func (r *Reader) fill(need, limit int) error {
	if len(r.buf)-r.r < need && r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	for empty := 0; r.w-r.r < need; {
		if err := r.pending; err != nil {
			r.pending = nil
			if err == io.EOF && r.w > r.r {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if r.w == len(r.buf) {
			// A frame larger than the buffer. Grow by doubling as its bytes
			// arrive rather than at once, so a peer cannot make the Reader
			// allocate for a frame it does not send.
			limit := wire.HeaderSize + int(min(uint64(r.max), math.MaxInt32))
			nb := make([]byte, min(2*len(r.buf), limit))
			r.w = copy(nb, r.buf[r.r:r.w])
			r.r, r.buf = 0, nb
		}
		end := len(r.buf)
		if limit > 0 {
			end = min(end, r.r+limit)
		}
		n, err := r.rd.Read(r.buf[r.w:end])
		if n < 0 {
			return errors.New("warren: reader returned a negative count")
		}
		r.w += n
		if err != nil {
			r.pending = err // returned once the bytes read with it are used
			continue
		}
		if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		} else {
			empty = 0
		}
	}
	return nil
}

// readRest reads the rest of a payload being read in place, r.rest, from
// the connection, past the buffer; the connection ending first is
// io.ErrUnexpectedEOF. On an error, r.rest is what is still to be read.
func (r *Reader) readRest() error {
	for empty := 0; len(r.rest) > 0; {
		if err := r.pending; err != nil {
			r.pending = nil
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n, err := r.rd.Read(r.rest)
		if n < 0 || n > len(r.rest) {
			return errors.New("warren: reader returned an impossible count")
		}
		r.rest = r.rest[n:]
		if err != nil {
			r.pending = err // returned at the next read, once the payload is in
			continue
		}
		if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		} else {
			empty = 0
		}
	}
	r.rest, r.restDst = nil, nil
	return nil
}

// Writer writes frames to a connection through a buffer. Call Flush to send
// what is buffered. After a write error every method returns that error. It
// is not safe for concurrent use.
type Writer struct {
	wr     io.Writer
	buf    []byte
	err    error
	vec    net.Buffers // reused for vectored writes
	vecArr [2][]byte
	pre    [lengthPrefix]byte
}

// NewWriter returns a Writer to wr with a buffer of size bytes, or
// DefaultBufferSize when size <= 0 (and at least 4 KiB). Payloads of at
// least half the buffer are written straight from the caller's memory, in
// one vectored write with what is buffered (writev on a socket).
func NewWriter(wr io.Writer, size int) *Writer {
	if size <= 0 {
		size = DefaultBufferSize
	}
	return &Writer{wr: wr, buf: make([]byte, 0, max(size, minBufferSize))}
}

// Reset discards any buffered bytes and error and makes w write to wr,
// keeping its buffer.
func (w *Writer) Reset(wr io.Writer) {
	w.wr, w.buf, w.err = wr, w.buf[:0], nil
}

// Buffered returns the number of bytes written to w but not yet flushed.
func (w *Writer) Buffered() int { return len(w.buf) }

// Flush writes every buffered byte to the connection.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.wr.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	w.buf = w.buf[:0]
	w.err = err
	return err
}

// WriteFrame writes one frame. It may write to the connection (when the
// buffer fills or the payload is large) but does not flush what remains.
func (w *Writer) WriteFrame(stream uint32, typ wire.Type, flags wire.Flags, payload []byte) error {
	if uint64(len(payload)) > math.MaxUint32 {
		return &wire.FrameTooLargeError{Size: math.MaxUint32, Limit: math.MaxUint32}
	}
	return w.write(wire.Header{Length: uint32(len(payload)), Stream: stream, Type: typ, Flags: flags}, nil, payload)
}

// WriteMessage writes msg as AppendMessage lays it out: one frame, or a
// chunked message in frames of at most maxFrame payload bytes. It panics as
// AppendMessage does.
func (w *Writer) WriteMessage(stream uint32, typ wire.Type, flags wire.Flags, msg []byte, maxFrame uint32) error {
	var c Chunker
	c.Reset(stream, typ, flags, msg)
	for !c.Done() {
		n, err := w.WriteChunk(&c, maxFrame)
		if err != nil {
			return err
		}
		if n < 0 {
			panic("wire: WriteMessage: maxFrame too small to chunk a message")
		}
	}
	return nil
}

// WriteChunk writes the next frame of c, with a payload of at most max bytes,
// and returns its payload length, as Chunker.AppendNext does: -1 when max is
// too small to make progress, and then nothing is written.
func (w *Writer) WriteChunk(c *Chunker, max uint32) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	h, prefix, chunk, ok := c.next(max)
	if !ok {
		return -1, nil
	}
	var pre []byte
	if prefix {
		binary.BigEndian.PutUint32(w.pre[:], c.total)
		pre = w.pre[:]
	}
	if err := w.write(h, pre, chunk); err != nil {
		return 0, err
	}
	c.advance(chunk)
	return int(h.Length), nil
}

// write writes the header h, pre (the total-length prefix of a chunked
// message's first frame, or nil) and chunk.
func (w *Writer) write(h wire.Header, pre, chunk []byte) error {
	if w.err != nil {
		return w.err
	}
	head := wire.HeaderSize + len(pre)
	if len(w.buf)+head+len(chunk) <= cap(w.buf) {
		w.buf = wire.AppendHeader(w.buf, h)
		w.buf = append(w.buf, pre...)
		w.buf = append(w.buf, chunk...)
		return nil
	}
	if len(chunk) < cap(w.buf)/2 {
		// Small: make room, then buffer it.
		if err := w.Flush(); err != nil {
			return err
		}
		w.buf = wire.AppendHeader(w.buf, h)
		w.buf = append(w.buf, pre...)
		w.buf = append(w.buf, chunk...)
		return nil
	}
	// Large: send what is buffered, the header and the payload in one
	// vectored write, without copying the payload.
	if len(w.buf)+head > cap(w.buf) {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	w.buf = wire.AppendHeader(w.buf, h)
	w.buf = append(w.buf, pre...)
	want := int64(len(w.buf) + len(chunk))
	w.vecArr = [2][]byte{w.buf, chunk}
	w.vec = w.vecArr[:]
	n, err := w.vec.WriteTo(w.wr)
	w.vecArr, w.vec = [2][]byte{}, nil // drop the reference to chunk
	w.buf = w.buf[:0]
	if err == nil && n < want {
		err = io.ErrShortWrite
	}
	w.err = err
	return err
}

// HasFrame reports whether a whole frame is already buffered, so that the
// next call to Next returns without reading from the connection.
func (r *Reader) HasFrame() bool {
	h, ok := wire.ParseHeader(r.buf[r.r:r.w])
	return ok && uint64(r.w-r.r) >= uint64(wire.HeaderSize)+uint64(h.Length)
}

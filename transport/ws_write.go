package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	mrand "math/rand/v2"
	"net"
	"time"

	"github.com/gobwas/ws"
)

// Writing WebSocket frames, and the close frame.

// Write sends p as one binary message, in one frame, and returns len(p) if
// it was sent whole. A write that fails or times out in the middle of a
// frame breaks the stream: every later Write returns the same error.
func (c *wsConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	n, err := c.writeFrameLocked(ws.OpBinary, p)
	c.writeMu.Unlock()
	if c.pongPending.Load() {
		c.flushPong()
	}
	return n, err
}

// writeBuffers sends the buffers as one binary message, in one frame, and
// consumes them as net.Buffers.WriteTo does.
func (c *wsConn) writeBuffers(v *net.Buffers) (int64, error) {
	var total int64
	for _, b := range *v {
		total += int64(len(b))
	}
	c.writeMu.Lock()
	n, err := c.writeVLocked(ws.OpBinary, *v, total)
	c.writeMu.Unlock()
	if c.pongPending.Load() {
		c.flushPong()
	}
	if err == nil {
		*v = (*v)[len(*v):]
	}
	return n, err
}

// writeFrameLocked writes one final frame with opcode op and payload p. The
// caller holds writeMu.
func (c *wsConn) writeFrameLocked(op ws.OpCode, p []byte) (int, error) {
	c.one[0] = p
	n, err := c.writeVLocked(op, c.one[:], int64(len(p)))
	c.one[0] = nil
	return int(n), err
}

// writeVLocked writes one final frame with opcode op whose payload is the
// concatenation of bufs, total bytes long. The header goes out with the
// start of the payload, copied after it in wbuf; the rest of the payload
// is written from bufs (server) or masked in wbuf chunk by chunk (client).
// The caller holds writeMu.
func (c *wsConn) writeVLocked(op ws.OpCode, bufs [][]byte, total int64) (int64, error) {
	switch {
	case c.writeErr != nil:
		return 0, c.writeErr
	case c.closeSent:
		return 0, errWSClosed
	case !c.ready.Load():
		return 0, errors.New("warren: websocket: write before the opening handshake")
	}
	if c.wbuf == nil {
		if c.client {
			var seed [32]byte
			rand.Read(seed[:])
			c.rng = mrand.NewChaCha8(seed)
			c.wbuf = make([]byte, wsClientWriteBufSize)
		} else {
			c.wbuf = make([]byte, wsServerWriteBufSize)
		}
	}
	h := ws.Header{Fin: true, OpCode: op, Length: total, Masked: c.client}
	if c.client {
		binary.LittleEndian.PutUint32(h.Mask[:], uint32(c.rng.Uint64()))
	}
	// The header is encoded in place at the start of wbuf.
	if err := ws.WriteHeaderBuffer(&c.hlen, h, c.wbuf); err != nil {
		return 0, err
	}
	hlen := int(c.hlen)
	off, i, j := hlen, 0, 0 // bufs[i][j:] is the payload still to send
	for i < len(bufs) && off < len(c.wbuf) {
		m := copy(c.wbuf[off:], bufs[i][j:])
		off, j = off+m, j+m
		if j == len(bufs[i]) {
			i, j = i+1, 0
		}
	}
	if c.client {
		ws.Cipher(c.wbuf[hlen:off], h.Mask, 0)
	}
	if n, err := c.conn.Write(c.wbuf[:off]); err != nil {
		if n == 0 && isTimeout(err) {
			return 0, err // nothing went out: the stream is intact
		}
		c.writeErr = err
		return int64(max(0, n-hlen)), err
	}
	sent := int64(off - hlen)
	for i < len(bufs) {
		chunk := bufs[i][j:]
		if c.client {
			m := copy(c.wbuf, chunk)
			ws.Cipher(c.wbuf[:m], h.Mask, int(sent&3))
			chunk = c.wbuf[:m]
		}
		n, err := c.conn.Write(chunk)
		sent += int64(n)
		if err != nil {
			c.writeErr = err
			return sent, err
		}
		if j += n; j == len(bufs[i]) {
			i, j = i+1, 0
		}
	}
	return sent, nil
}

// byteCount is an io.Writer that records the length of the last write: the
// header ws.WriteHeaderBuffer encodes in place.
type byteCount int

func (b *byteCount) Write(p []byte) (int, error) {
	*b = byteCount(len(p))
	return len(p), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lockWriter takes writeMu for a close frame. A writer that holds it has
// wsCloseTimeout to finish its frame.
func (c *wsConn) lockWriter() {
	if c.writeMu.TryLock() {
		return
	}
	c.conn.SetWriteDeadline(time.Now().Add(wsCloseTimeout))
	c.writeMu.Lock()
}

// sendClose sends a close frame with payload, unless this side has sent one
// already or the stream is broken.
func (c *wsConn) sendClose(payload []byte) {
	c.lockWriter()
	defer c.writeMu.Unlock()
	if c.closeSent || c.writeErr != nil {
		return
	}
	c.conn.SetWriteDeadline(time.Now().Add(wsCloseTimeout))
	c.closeLocked(payload)
}

// closeLocked writes a close frame. The caller holds writeMu.
func (c *wsConn) closeLocked(payload []byte) error {
	_, err := c.writeFrameLocked(ws.OpClose, payload)
	if err != nil && c.writeErr == nil {
		c.writeErr = err
	}
	c.closeSent = true
	return err
}

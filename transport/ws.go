package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"github.com/warrenipc/warren/internal/wsframe"
)

// WebSocket close codes (RFC 6455, section 7.4.1) that this package sends or
// reports in a [*WebSocketError]'s Code.
const (
	wsCloseNormal          = 1000 // sent by Close and CloseWrite
	wsCloseGoingAway       = 1001 // received from a peer that goes away, such as a browser tab
	wsCloseProtocolError   = 1002 // sent on a frame that breaks RFC 6455
	wsCloseUnsupportedData = 1003 // sent on a text message: warren carries binary messages only
	wsCloseNoStatus        = 1005 // never sent: reported for a close frame without a code
	wsCloseAbnormal        = 1006 // never sent: reported when the connection ends without a close frame
	wsCloseInvalidData     = 1007 // sent on a close frame whose reason is not UTF-8
)

// WebSocketError reports a WebSocket connection that ended other than by a
// normal close handshake: a frame that breaks RFC 6455 (this side then sent
// the peer a close frame with Code), a close frame from the peer with a code
// other than 1000 (normal), 1001 (going away) or none, or the connection
// ending without a close frame (Code 1006).
type WebSocketError struct {
	// Code is the close code (RFC 6455, section 7.4.1): 1000 normal, 1001
	// going away, 1002 protocol error, 1003 unsupported data (a text
	// message), 1005 no status, 1006 abnormal (no close frame), 1007
	// invalid data.
	Code   int
	Reason string // what happened, or the peer's reason when Remote
	// Remote reports that the peer sent Code in its close frame. Otherwise
	// this side detected the problem (and sent Code to the peer, unless it
	// is 1006).
	Remote bool
	Err    error // the underlying error, such as io.ErrUnexpectedEOF; may be nil
}

func (e *WebSocketError) Error() string {
	var s string
	switch {
	case e.Remote:
		s = fmt.Sprintf("warren: websocket: peer closed the connection with code %d", e.Code)
		if e.Reason != "" {
			s += fmt.Sprintf(" (%q)", e.Reason)
		}
	case e.Code == wsCloseAbnormal:
		s = "warren: websocket: " + e.Reason
	default:
		s = fmt.Sprintf("warren: websocket: %s (closed with code %d)", e.Reason, e.Code)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *WebSocketError) Unwrap() error { return e.Err }

// errWSClosed is returned by Write after this side sent its close frame.
var errWSClosed = fmt.Errorf("warren: websocket: close frame sent: %w", net.ErrClosed)

// wsCloseTimeout bounds each step of a close handshake: writing a close
// frame, and waiting for the peer's close frame or for it to close the
// connection.
var wsCloseTimeout = 5 * time.Second

// Buffer sizes. The read buffer holds frame headers and small payloads;
// larger payloads are read straight into the caller's slice. A server's
// write buffer holds a frame header and the start of its payload, so small
// messages leave in one write; a client copies every payload there to mask
// it, so its buffer is larger.
const (
	wsReadBufSize        = 4096
	wsServerWriteBufSize = 4096
	wsClientWriteBufSize = 32 << 10
)

// wsConn carries a byte stream in binary WebSocket messages over conn, after
// the opening handshake: each Write sends one message, and Read returns the
// payloads of the messages received, in order, as a stream. It answers pings,
// refuses what RFC 6455 forbids and runs the close handshake.
//
// A wsConn exists before the handshake so that a *Conn can point at it from
// the start; until ready is set it only closes.
type wsConn struct {
	conn   net.Conn // the connection frames travel on: TCP, TLS or a hijacked one
	client bool     // this side is the client: it masks frames and expects them unmasked
	ready  atomic.Bool

	readMu  sync.Mutex // protects the fields down to readErr; held for a whole Read
	rb      wsReadBuf
	hdr     [ws.MaxHeaderSize]byte // for ws.ReadHeaderBuffer
	remain  int64                  // payload bytes left in the current data frame
	mask    [4]byte                // of the current data frame
	maskPos int                    // payload bytes of the current frame unmasked so far, mod 4
	masked  bool
	inMsg   bool  // within a fragmented message: a continuation frame comes next
	readErr error // sticky: set when the read side has ended

	writeMu   sync.Mutex // protects the fields down to pongOut; held for a whole frame
	wbuf      []byte     // allocated by the first write
	hlen      byteCount  // for ws.WriteHeaderBuffer
	rng       *mrand.ChaCha8
	closeSent bool
	writeErr  error     // sticky: a frame was cut short, the stream is broken
	one       [1][]byte // the payload of writeFrameLocked, for writeVLocked
	pongOut   [ws.MaxControlFramePayloadSize]byte

	pongMu      sync.Mutex // protects pong and pongLen
	pong        [ws.MaxControlFramePayloadSize]byte
	pongLen     int
	pongPending atomic.Bool // a pong waits in pong for the writer

	readDone     chan struct{} // closed when the read side has ended
	readDoneOnce sync.Once
	closing      atomic.Bool // Close was called
	closeOnce    sync.Once   // protects closeErr
	closeErr     error
	connOnce     sync.Once // closes conn; protects connErr
	connErr      error
}

var _ net.Conn = (*wsConn)(nil)

// newWSConn returns a wsConn over conn that is not ready yet.
func newWSConn(conn net.Conn, client bool) *wsConn {
	return &wsConn{conn: conn, client: client, readDone: make(chan struct{})}
}

// start makes c ready once the opening handshake has completed. buffered
// holds bytes that arrived after the handshake and were read with it.
func (c *wsConn) start(buffered []byte) {
	c.rb.src = c.conn
	c.rb.buf = make([]byte, max(wsReadBufSize, len(buffered)))
	c.rb.w = copy(c.rb.buf, buffered)
	c.ready.Store(true)
}

// Read reads the payload bytes of the binary messages received, as one
// stream; it never returns bytes of two frames at once. It returns io.EOF
// after a normal close handshake; a *WebSocketError when the peer broke the
// protocol, closed with another code or let the connection end without a
// close frame; and the network's error when the connection fails.
func (c *wsConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if !c.ready.Load() {
		return 0, errors.New("warren: websocket: read before the opening handshake")
	}
	for {
		if c.readErr != nil {
			return 0, c.readErr
		}
		if len(p) == 0 {
			return 0, nil
		}
		if c.remain > 0 {
			n, err := c.readPayload(p)
			if n > 0 {
				return n, nil // an error comes back on the next call
			}
			if err != nil {
				return 0, c.readFailed(err)
			}
			continue
		}
		if err := c.nextFrame(); err != nil {
			return 0, err
		}
	}
}

// readPayload reads the current frame's payload into p.
func (c *wsConn) readPayload(p []byte) (int, error) {
	if int64(len(p)) > c.remain {
		p = p[:c.remain]
	}
	n, err := c.rb.Read(p)
	if n > 0 {
		if c.masked {
			ws.Cipher(p[:n], c.mask, c.maskPos)
		}
		c.maskPos = (c.maskPos + n) & 3
		c.remain -= int64(n)
	}
	return n, err
}

// nextFrame reads the next frame header and, for a control frame, its
// payload, which it acts on. It returns an error only when the read side
// has ended or, for a timeout, the caller must return.
func (c *wsConn) nextFrame() error {
	if err := c.rb.fill(2); err != nil {
		return c.readFailed(err)
	}
	b0, b1 := c.rb.buf[c.rb.r], c.rb.buf[c.rb.r+1]
	size := 2
	if b1&0x80 != 0 {
		size += 4
	}
	switch b1 & 0x7f {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	op := ws.OpCode(b0 & 0x0f)
	if op.IsControl() && b1&0x7f <= ws.MaxControlFramePayloadSize {
		size += int(b1 & 0x7f) // keep a control frame whole in the buffer
	}
	if err := c.rb.fill(size); err != nil {
		return c.readFailed(err)
	}
	h, err := ws.ReadHeaderBuffer(&c.rb, c.hdr[:])
	if err != nil { // only ws.ErrHeaderLengthMSB: the bytes are buffered
		return c.fail(wsCloseProtocolError, "frame length has its most significant bit set")
	}
	if code, reason := c.checkHeader(h, b1&0x7f); reason != "" {
		return c.fail(code, reason)
	}
	if h.OpCode.IsControl() {
		payload := c.rb.next(int(h.Length))
		if h.Masked {
			ws.Cipher(payload, h.Mask, 0)
		}
		switch h.OpCode {
		case ws.OpPing:
			c.queuePong(payload)
		case ws.OpClose:
			return c.closeReceived(payload)
		}
		return nil // a pong needs nothing
	}
	c.inMsg = !h.Fin
	c.remain, c.mask, c.masked, c.maskPos = h.Length, h.Mask, h.Masked, 0
	return nil
}

// checkHeader returns the close code and why h breaks RFC 6455 for this
// side, or "". lenBits are the 7 length bits of the header's second byte.
func (c *wsConn) checkHeader(h ws.Header, lenBits byte) (int, string) {
	return wsframe.CheckHeader(h, lenBits, c.client, c.inMsg)
}

// queuePong has the writer answer a ping with payload. Only the latest
// ping is answered if several arrive while the writer is busy, as RFC 6455
// allows.
func (c *wsConn) queuePong(payload []byte) {
	c.pongMu.Lock()
	c.pongLen = copy(c.pong[:], payload)
	c.pongPending.Store(true)
	c.pongMu.Unlock()
	c.flushPong()
}

// flushPong sends a queued pong unless a writer holds the lock, in which
// case that writer sends it when it is done: the reader never waits for
// the writer to answer a ping.
func (c *wsConn) flushPong() {
	for c.pongPending.Load() && c.writeMu.TryLock() {
		c.pongMu.Lock()
		n := copy(c.pongOut[:], c.pong[:c.pongLen])
		send := c.pongPending.Swap(false)
		c.pongMu.Unlock()
		if send {
			c.writeFrameLocked(ws.OpPong, c.pongOut[:n])
		}
		c.writeMu.Unlock()
	}
}

// closeReceived handles the peer's close frame: it answers it, if this side
// has not sent one yet, and closes the connection.
func (c *wsConn) closeReceived(payload []byte) error {
	code, reason, failCode, why := wsframe.ParseClose(payload)
	if failCode != 0 {
		return c.fail(failCode, why)
	}
	var echo [2]byte
	n := 0
	if code != wsCloseNoStatus {
		binary.BigEndian.PutUint16(echo[:], uint16(code))
		n = 2
	}
	c.sendClose(echo[:n])
	var err error = io.EOF
	if code != wsCloseNormal && code != wsCloseGoingAway && code != wsCloseNoStatus {
		err = &WebSocketError{Code: code, Reason: reason, Remote: true}
	}
	c.endRead(err)
	// Both close frames have been sent. The server closes the TCP
	// connection at once; the client waits a little for the server to
	// close it first, so that the server's end does not linger in
	// TIME_WAIT (RFC 6455, section 7.1.1).
	if c.client {
		c.drainRaw()
	}
	c.closeConn()
	return err
}

// fail ends the read side because the peer broke the protocol: it sends a
// close frame with code, and closes the connection once the peer has had a
// chance to read it.
func (c *wsConn) fail(code int, reason string) error {
	err := &WebSocketError{Code: code, Reason: reason}
	var body [2]byte
	binary.BigEndian.PutUint16(body[:], uint16(code))
	c.sendClose(body[:])
	c.endRead(err)
	// Close our side for writing and read until the peer closes, so that
	// unread bytes do not make the kernel reset the connection, which
	// could destroy the close frame before the peer reads it.
	if cw, ok := c.conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.drainRaw()
	c.closeConn()
	return err
}

// readFailed handles an error from the connection. A timeout is returned
// as it is and leaves the stream intact; any other error ends the read
// side.
func (c *wsConn) readFailed(err error) error {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return err
	}
	switch {
	case c.closing.Load() && errors.Is(err, net.ErrClosed):
		// Close gave up waiting for the peer's close frame.
	case err == io.EOF && c.remain == 0 && c.rb.buffered() == 0:
		err = &WebSocketError{Code: wsCloseAbnormal, Reason: "connection closed without a close frame", Err: io.ErrUnexpectedEOF}
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		err = &WebSocketError{Code: wsCloseAbnormal, Reason: "connection closed in the middle of a frame", Err: io.ErrUnexpectedEOF}
	}
	c.endRead(err)
	return err
}

// endRead records why the read side ended. The caller holds readMu.
func (c *wsConn) endRead(err error) {
	c.readErr = err
	c.readDoneOnce.Do(func() { close(c.readDone) })
}

// drainRaw reads and drops bytes from the connection until the peer closes
// it, for at most wsCloseTimeout. The caller holds readMu.
func (c *wsConn) drainRaw() {
	c.conn.SetReadDeadline(time.Now().Add(wsCloseTimeout))
	c.rb.r, c.rb.w = 0, 0
	for {
		if _, err := c.conn.Read(c.rb.buf); err != nil {
			return
		}
	}
}

// CloseWrite sends a close frame (code 1000): the peer reads io.EOF once it
// has read everything sent before. It may still send data until it answers
// with its own close frame, which ends this side's Read with io.EOF and
// closes the connection.
func (c *wsConn) CloseWrite() error {
	if !c.ready.Load() {
		return errors.New("warren: websocket: CloseWrite before the handshake")
	}
	var body [2]byte
	binary.BigEndian.PutUint16(body[:], wsCloseNormal)
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	switch {
	case c.writeErr != nil:
		return c.writeErr
	case c.closeSent:
		return errWSClosed
	}
	return c.closeLocked(body[:])
}

// Close runs the close handshake, if the peer has not started it: it sends
// a close frame (code 1000) and waits for the peer's, for at most
// wsCloseTimeout, reading and dropping any data that comes first. Then it
// closes the connection. A Read blocked meanwhile returns io.EOF once the
// peer's close frame arrives.
func (c *wsConn) Close() error {
	if !c.ready.Load() {
		return c.closeConn()
	}
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		var body [2]byte
		binary.BigEndian.PutUint16(body[:], wsCloseNormal)
		c.sendClose(body[:])
		select {
		case <-c.readDone:
		default:
			if !c.closeFrameOut() {
				break // the stream is broken: there is no handshake to wait for
			}
			deadline := time.Now().Add(wsCloseTimeout)
			if c.readMu.TryLock() {
				// No Read is running: wait for the peer's close frame here.
				c.conn.SetReadDeadline(deadline)
				c.drainFrames()
				c.readMu.Unlock()
				break
			}
			// A Read is running and will see the peer's close frame,
			// unless it returns with data and its caller reads no more:
			// then wait here.
			t := time.NewTimer(wsCloseTimeout)
			poll := time.NewTicker(10 * time.Millisecond)
		wait:
			for {
				select {
				case <-c.readDone:
					break wait
				case <-t.C:
					break wait
				case <-poll.C:
					if c.readMu.TryLock() {
						c.conn.SetReadDeadline(deadline)
						c.drainFrames()
						c.readMu.Unlock()
						break wait
					}
				}
			}
			poll.Stop()
			t.Stop()
		}
		c.closeErr = c.closeConn()
	})
	return c.closeErr
}

// closeFrameOut reports whether this side has sent its close frame whole.
func (c *wsConn) closeFrameOut() bool {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	return c.closeSent && c.writeErr == nil
}

// drainFrames reads and drops frames until the read side ends. The caller
// holds readMu.
func (c *wsConn) drainFrames() {
	for c.readErr == nil {
		if c.remain > 0 {
			n := int(min(c.remain, int64(len(c.rb.buf))))
			if c.rb.buffered() > 0 {
				n = min(n, c.rb.buffered())
				c.rb.next(n)
				c.remain -= int64(n)
				continue
			}
			m, err := c.conn.Read(c.rb.buf[:n])
			c.remain -= int64(m)
			if err != nil {
				c.endRead(err)
			}
			continue
		}
		if err := c.nextFrame(); err != nil && c.readErr == nil {
			c.endRead(err) // a timeout
		}
	}
}

// closeConn closes the underlying connection once.
func (c *wsConn) closeConn() error {
	c.connOnce.Do(func() { c.connErr = c.conn.Close() })
	return c.connErr
}

func (c *wsConn) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

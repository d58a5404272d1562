// Package wsframe holds the WebSocket (RFC 6455) framing rules warren
// enforces, shared by package transport's connections (one goroutine reads
// each) and by rpc's event loop, which parses frames incrementally from the
// bytes it reads (Decoder, an evloop.Framing): the checks of a frame header,
// of a close frame's payload, and the encoding of the frames a server sends.
package wsframe

import (
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// Close codes (RFC 6455, section 7.4.1); package transport exports them as
// its WebSocketClose constants.
const (
	CloseNormal          = 1000
	CloseGoingAway       = 1001
	CloseProtocolError   = 1002
	CloseUnsupportedData = 1003
	CloseNoStatus        = 1005
	CloseAbnormal        = 1006
	CloseInvalidData     = 1007
)

// MaxControl is the longest payload of a control frame.
const MaxControl = ws.MaxControlFramePayloadSize

// MaxHold is the most bytes Decode leaves unconsumed at the end of its
// input: the header of a frame (at most 14 bytes) and, for a control frame,
// its payload, which is handled whole.
const MaxHold = ws.MaxHeaderSize + MaxControl

// TextRefused is why a text message is refused (with CloseUnsupportedData).
const TextRefused = "text message refused: warren carries binary messages only"

// CheckHeader returns why h breaks RFC 6455, or "" if it does not, and the
// close code to send. client is the side reading h (a client expects
// unmasked frames, a server masked ones); lenBits are the 7 length bits of
// the header's second byte; inMsg tells whether a fragmented message is
// under way.
func CheckHeader(h ws.Header, lenBits byte, client, inMsg bool) (code int, reason string) {
	switch {
	case h.Rsv != 0:
		reason = "reserved bits set without a negotiated extension"
	case h.OpCode.IsReserved():
		reason = fmt.Sprintf("reserved opcode %#x", byte(h.OpCode))
	case client && h.Masked:
		reason = "masked frame from the server"
	case !client && !h.Masked:
		reason = "unmasked frame from the client"
	case lenBits == 126 && h.Length < 126, lenBits == 127 && h.Length <= 0xffff:
		reason = "frame length not in its shortest encoding"
	case h.OpCode.IsControl() && h.Length > MaxControl:
		reason = "control frame longer than 125 bytes"
	case h.OpCode.IsControl() && !h.Fin:
		reason = "fragmented control frame"
	case h.OpCode == ws.OpContinuation && !inMsg:
		reason = "continuation frame outside a fragmented message"
	case h.OpCode.IsData() && h.OpCode != ws.OpContinuation && inMsg:
		reason = "new message before the end of a fragmented one"
	case h.OpCode == ws.OpText:
		return CloseUnsupportedData, TextRefused
	default:
		return 0, ""
	}
	return CloseProtocolError, reason
}

// ParseClose reads the (unmasked) payload of a close frame. It returns the
// code (CloseNoStatus if there is none) and the reason; or, if the payload
// breaks RFC 6455, failCode (the code to close with) and why.
func ParseClose(payload []byte) (code int, reason string, failCode int, why string) {
	switch {
	case len(payload) == 0:
		return CloseNoStatus, "", 0, ""
	case len(payload) == 1:
		return 0, "", CloseProtocolError, "close frame with a 1-byte payload"
	}
	code = int(binary.BigEndian.Uint16(payload))
	if !ValidCloseCode(code) {
		return 0, "", CloseProtocolError, fmt.Sprintf("close frame with code %d, which may not be sent", code)
	}
	if !utf8.Valid(payload[2:]) {
		return 0, "", CloseInvalidData, "close frame whose reason is not UTF-8"
	}
	return code, string(payload[2:]), 0, ""
}

// ValidCloseCode reports whether an endpoint may send code in a close frame:
// the codes RFC 6455 defines for that, those registered with IANA since
// (1012 to 1014), and the ranges for libraries and applications.
func ValidCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// Error is a WebSocket connection ending other than by a normal close
// handshake, as Decode reports it: a frame that breaks RFC 6455 (the reply
// is then a close frame with Code), or a close frame from the peer with a
// code other than 1000, 1001 or none (Remote).
type Error struct {
	Code   int
	Reason string
	Remote bool
}

func (e *Error) Error() string {
	if e.Remote {
		s := fmt.Sprintf("warren: websocket: peer closed the connection with code %d", e.Code)
		if e.Reason != "" {
			s += fmt.Sprintf(" (%q)", e.Reason)
		}
		return s
	}
	return fmt.Sprintf("warren: websocket: %s (closed with code %d)", e.Reason, e.Code)
}

// AppendHeader appends the header of a final, unmasked binary frame with an
// n-byte payload: what a server sends.
func AppendHeader(dst []byte, n int) []byte {
	return appendHeader(dst, 0x80|byte(ws.OpBinary), n)
}

func appendHeader(dst []byte, b0 byte, n int) []byte {
	switch {
	case n < 126:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		return append(dst, b0, 126, byte(n>>8), byte(n))
	}
	dst = append(dst, b0, 127)
	return binary.BigEndian.AppendUint64(dst, uint64(n))
}

// AppendClose appends a close frame with code (none if it is 0), unmasked.
func AppendClose(dst []byte, code int) []byte {
	if code == 0 {
		return append(dst, 0x80|byte(ws.OpClose), 0)
	}
	return append(dst, 0x80|byte(ws.OpClose), 2, byte(code>>8), byte(code))
}

// Decoder parses the frames a client sends to a server incrementally, from
// whatever bytes have arrived: it implements evloop.Framing. The payload of a
// data frame is handed on as it arrives (a frame may be larger than any
// buffer); a header, and a control frame with its payload, are handled once
// whole. Its zero value is ready to decode a connection's first frame.
type Decoder struct {
	remain  int64   // payload bytes left in the current data frame
	mask    [4]byte // of the current data frame
	maskPos uint8   // payload bytes of the current frame unmasked so far, mod 4
	inMsg   bool    // within a fragmented message
	ctl     [2 + MaxControl]byte
}

// NewDecoder returns a Decoder between frames; inMsg tells whether a
// fragmented message is under way (see Idle).
func NewDecoder(inMsg bool) *Decoder { return &Decoder{inMsg: inMsg} }

// Idle reports whether the decoder is between frames, and so can be dropped
// and replaced by NewDecoder(inMsg) when more bytes arrive.
func (d *Decoder) Idle() (inMsg, ok bool) { return d.inMsg, d.remain == 0 }

// Decode parses the frames at the start of src and appends the payload
// bytes of the binary messages to dst, which may be src[:0] (decoding in
// place: the output never overtakes the input). It returns dst, the number
// of bytes of src consumed (what is left is the start of a header or of a
// control frame, at most MaxHold bytes, to be passed again with what
// follows), and a reply to send: a pong for a ping, the echo of a close
// frame, or a close frame with the code of a protocol error. Decode returns
// after each reply, which is valid until the next call. err is io.EOF after
// a close frame with code 1000, 1001 or none, an *Error after a protocol
// error or another code; src is then not consumed further and the
// connection is over.
func (d *Decoder) Decode(dst, src []byte) (out []byte, n int, reply []byte, err error) {
	for {
		if d.remain > 0 {
			k := int(min(int64(len(src)-n), d.remain))
			if k == 0 {
				return dst, n, nil, nil
			}
			start := len(dst)
			dst = append(dst, src[n:n+k]...)
			ws.Cipher(dst[start:], d.mask, int(d.maskPos))
			d.maskPos = uint8((int(d.maskPos) + k) & 3)
			d.remain -= int64(k)
			n += k
			continue
		}
		b := src[n:]
		if len(b) < 2 {
			return dst, n, nil, nil
		}
		b0, b1 := b[0], b[1]
		lenBits := b1 & 0x7f
		size := 2
		if b1&0x80 != 0 {
			size += 4
		}
		switch lenBits {
		case 126:
			size += 2
		case 127:
			size += 8
		}
		h := ws.Header{
			Fin:    b0&0x80 != 0,
			Rsv:    (b0 >> 4) & 7,
			OpCode: ws.OpCode(b0 & 0x0f),
			Masked: b1&0x80 != 0,
		}
		if h.OpCode.IsControl() && lenBits <= MaxControl {
			if len(b) < size+int(lenBits) {
				return dst, n, nil, nil // a control frame is handled whole
			}
		} else if len(b) < size {
			return dst, n, nil, nil
		}
		switch lenBits {
		case 126:
			h.Length = int64(binary.BigEndian.Uint16(b[2:]))
		case 127:
			u := binary.BigEndian.Uint64(b[2:])
			if u>>63 != 0 {
				r, err := d.fail(CloseProtocolError, "frame length has its most significant bit set")
				return dst, n, r, err
			}
			h.Length = int64(u)
		default:
			h.Length = int64(lenBits)
		}
		if h.Masked {
			copy(h.Mask[:], b[size-4:size])
		}
		if code, reason := CheckHeader(h, lenBits, false, d.inMsg); reason != "" {
			r, err := d.fail(code, reason)
			return dst, n, r, err
		}
		if !h.OpCode.IsControl() {
			n += size
			d.inMsg = !h.Fin
			d.remain, d.mask, d.maskPos = h.Length, h.Mask, 0
			continue
		}
		payload := b[size : size+int(h.Length)]
		ws.Cipher(payload, h.Mask, 0)
		n += size + int(h.Length)
		switch h.OpCode {
		case ws.OpPing:
			r := appendHeader(d.ctl[:0], 0x80|byte(ws.OpPong), len(payload))
			return dst, n, append(r, payload...), nil
		case ws.OpClose:
			code, reason, failCode, why := ParseClose(payload)
			if failCode != 0 {
				r, err := d.fail(failCode, why)
				return dst, n, r, err
			}
			echo := code
			if code == CloseNoStatus {
				echo = 0
			}
			err = io.EOF
			if code != CloseNormal && code != CloseGoingAway && code != CloseNoStatus {
				err = &Error{Code: code, Reason: reason, Remote: true}
			}
			return dst, n, AppendClose(d.ctl[:0], echo), err
		}
		// a pong needs nothing
	}
}

// fail returns the close frame that reports a protocol error, and the error.
func (d *Decoder) fail(code int, reason string) ([]byte, error) {
	return AppendClose(d.ctl[:0], code), &Error{Code: code, Reason: reason}
}

// AppendHeader is the package's AppendHeader.
func (d *Decoder) AppendHeader(dst []byte, n int) []byte { return AppendHeader(dst, n) }

// AppendClose is the package's AppendClose.
func (d *Decoder) AppendClose(dst []byte, code int) []byte { return AppendClose(dst, code) }

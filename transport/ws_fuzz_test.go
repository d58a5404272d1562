package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// fuzzConn is a net.Conn whose reads return in, at most chunk bytes at a
// time (0: any), then io.EOF, and whose writes are recorded.
type fuzzConn struct {
	in    []byte
	chunk int
	out   bytes.Buffer
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	if c.chunk > 0 && len(p) > c.chunk {
		p = p[:c.chunk]
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *fuzzConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) CloseWrite() error                { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// wsExpect is what a side receiving a byte stream should do with it,
// according to refDecode.
type wsExpect struct {
	data   []byte   // the payload bytes Read returns
	pongs  [][]byte // the payloads of the pongs it sends
	code   int      // how the read side ends: a close code, or 1006
	remote bool     // code came in the peer's close frame
}

// refDecode is a naive reading of RFC 6455, frame by frame from a byte
// slice, by the side that is a client if client is set. It is the reference
// the frame reader is checked against.
func refDecode(in []byte, client bool) wsExpect {
	var e wsExpect
	inMsg := false
	for {
		if len(in) < 2 {
			e.code = wsCloseAbnormal
			return e
		}
		fin, rsv, op := in[0]&0x80 != 0, in[0]>>4&7, in[0]&0x0f
		masked, lenBits := in[1]&0x80 != 0, in[1]&0x7f
		control := op&8 != 0
		hlen := 2
		switch lenBits {
		case 126:
			hlen += 2
		case 127:
			hlen += 8
		}
		if masked {
			hlen += 4
		}
		whole := hlen // bytes that must have arrived before the frame is judged
		if control && lenBits <= 125 {
			whole += int(lenBits)
		}
		if len(in) < whole {
			e.code = wsCloseAbnormal
			return e
		}
		var length uint64
		switch lenBits {
		case 126:
			length = uint64(binary.BigEndian.Uint16(in[2:]))
		case 127:
			length = binary.BigEndian.Uint64(in[2:])
		default:
			length = uint64(lenBits)
		}
		var mask [4]byte
		if masked {
			copy(mask[:], in[hlen-4:hlen])
		}
		violation := length>>63 != 0 || rsv != 0 ||
			op >= 3 && op <= 7 || op >= 0xb ||
			masked == client ||
			lenBits == 126 && length < 126 || lenBits == 127 && length < 1<<16 ||
			control && (length > 125 || !fin) ||
			op == 0 && !inMsg || (op == 1 || op == 2) && inMsg
		switch {
		case violation:
			e.code = wsCloseProtocolError
			return e
		case op == 1:
			e.code = wsCloseUnsupportedData
			return e
		}
		in = in[hlen:]
		n := min(length, uint64(len(in)))
		payload := bytes.Clone(in[:n])
		in = in[n:]
		for i := range payload {
			payload[i] ^= mask[i%4]
		}
		switch op {
		case 0, 2:
			e.data = append(e.data, payload...)
			if n < length {
				e.code = wsCloseAbnormal
				return e
			}
			inMsg = !fin
		case 9:
			e.pongs = append(e.pongs, payload)
		case 8:
			switch {
			case len(payload) == 0:
				e.code, e.remote = wsCloseNoStatus, true
			case len(payload) == 1:
				e.code = wsCloseProtocolError
			default:
				code := int(binary.BigEndian.Uint16(payload))
				switch {
				case !(code >= 1000 && code <= 1003 || code >= 1007 && code <= 1014 || code >= 3000 && code <= 4999):
					e.code = wsCloseProtocolError
				case !utf8.Valid(payload[2:]):
					e.code = wsCloseInvalidData
				default:
					e.code, e.remote = code, true
				}
			}
			return e
		}
	}
}

// FuzzWebSocketRead feeds arbitrary bytes to the frame reader, as what the
// peer sent, and checks what Read returns and what the reader writes back
// against refDecode.
func FuzzWebSocketRead(f *testing.F) {
	mask := [4]byte{1, 2, 3, 4}
	fr := func(fin bool, rsv byte, op ws.OpCode, p []byte, masked bool) []byte {
		h := ws.Header{Fin: fin, Rsv: rsv, OpCode: op, Length: int64(len(p)), Masked: masked}
		if masked {
			h.Mask = mask
		}
		var b bytes.Buffer
		ws.WriteHeader(&b, h)
		p = bytes.Clone(p)
		if masked {
			ws.Cipher(p, mask, 0)
		}
		b.Write(p)
		return b.Bytes()
	}
	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	closeFrame := func(code uint16, reason string, masked bool) []byte {
		return fr(true, 0, ws.OpClose, append(binary.BigEndian.AppendUint16(nil, code), reason...), masked)
	}
	for _, client := range []bool{false, true} {
		m := !client // what the peer of this side sends
		for _, in := range [][]byte{
			nil,
			fr(true, 0, ws.OpBinary, []byte("hello"), m),
			cat(fr(true, 0, ws.OpBinary, []byte("hello"), m), closeFrame(1000, "bye", m)),
			cat(fr(false, 0, ws.OpBinary, []byte("hel"), m), fr(true, 0, ws.OpPing, []byte("p"), m),
				fr(true, 0, ws.OpContinuation, []byte("lo"), m), fr(true, 0, ws.OpPong, nil, m), closeFrame(1001, "", m)),
			cat(fr(true, 0, ws.OpBinary, bytes.Repeat([]byte("x"), 200), m), fr(true, 0, ws.OpClose, nil, m)),
			cat(fr(true, 0, ws.OpBinary, bytes.Repeat([]byte("y"), 300), m), closeFrame(4000, "app", m)),
			fr(true, 0, ws.OpBinary, bytes.Repeat([]byte("z"), 70000), m)[:40], // 64-bit length, cut short
			fr(true, 0, ws.OpBinary, []byte("x"), !m),
			fr(true, 0, ws.OpText, []byte("x"), m),
			fr(true, 4, ws.OpBinary, []byte("x"), m),
			fr(true, 0, 0xb, nil, m),
			fr(false, 0, ws.OpPing, nil, m),
			fr(true, 0, ws.OpPing, make([]byte, 126), m),
			fr(true, 0, ws.OpContinuation, []byte("x"), m),
			fr(true, 0, ws.OpClose, []byte{1}, m),
			closeFrame(1005, "", m),
			closeFrame(1000, "\xff", m),
			{0x82, 0xfe, 0, 5, 1, 2, 3, 4, 9, 9, 9, 9, 9},
			{0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4},
			fr(true, 0, ws.OpBinary, []byte("cut short"), m)[:8],
		} {
			f.Add(in, client, uint8(0), uint8(0), uint16(0))
			f.Add(in, client, uint8(3), uint8(1), uint16(3))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, client bool, buffered, chunk uint8, readSize uint16) {
		want := refDecode(in, client)
		// The fuzzer has no time limit per input: a hang would only stall
		// it. Crash instead, so that the input is reported and saved.
		hang := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("the frame reader hangs on %x (client %t, buffered %d, chunk %d, readSize %d)", in, client, buffered, chunk, readSize))
		})
		defer hang.Stop()
		conn := &fuzzConn{in: in, chunk: int(chunk)}
		c := newWSConn(conn, client)
		k := min(int(buffered), len(in))
		c.start(in[:k]) // bytes that came with the opening handshake
		conn.in = in[k:]

		p := make([]byte, int(readSize)+1)
		if readSize == 0 {
			p = make([]byte, 1<<16)
		}
		var got []byte
		var err error
		for err == nil {
			var n int
			n, err = c.Read(p)
			if n < 0 || n > len(p) {
				t.Fatalf("Read returned %d for a %d-byte slice", n, len(p))
			}
			got = append(got, p[:n]...)
			if len(got) > len(in) {
				t.Fatalf("Read returned %d bytes of %d received", len(got), len(in))
			}
		}
		if !bytes.Equal(got, want.data) {
			t.Fatalf("Read returned %q, want %q", got, want.data)
		}
		var we *WebSocketError
		switch {
		case want.remote && (want.code == 1000 || want.code == 1001 || want.code == 1005):
			if err != io.EOF {
				t.Fatalf("Read ended with %v, want io.EOF (peer's close code %d)", err, want.code)
			}
		case !errors.As(err, &we):
			t.Fatalf("Read ended with %v (%T), want a *WebSocketError with code %d", err, err, want.code)
		case we.Code != want.code || we.Remote != want.remote:
			t.Fatalf("Read ended with %+v, want code %d, remote %t", we, want.code, want.remote)
		}
		if _, err2 := c.Read(p); err2 != err {
			t.Fatalf("Read after the end: %v, want %v again", err2, err)
		}
		c.Close()

		// What went back: the pongs, then one close frame.
		out := bytes.NewReader(conn.out.Bytes())
		var pongs [][]byte
		var closing []byte
		for out.Len() > 0 {
			h, err := ws.ReadHeader(out)
			if err != nil || h.Length > int64(out.Len()) {
				t.Fatalf("reading what was written: %+v, %v", h, err)
			}
			if h.Masked != client || !h.Fin || h.Rsv != 0 {
				t.Fatalf("wrote a frame with header %+v", h)
			}
			if closing != nil {
				t.Fatalf("wrote a %v frame after the close frame", h.OpCode)
			}
			payload := make([]byte, h.Length)
			out.Read(payload)
			ws.Cipher(payload, h.Mask, 0)
			switch h.OpCode {
			case ws.OpPong:
				pongs = append(pongs, payload)
			case ws.OpClose:
				closing = payload
			default:
				t.Fatalf("wrote a %v frame", h.OpCode)
			}
		}
		if len(pongs) != len(want.pongs) {
			t.Fatalf("wrote %d pongs, want %d", len(pongs), len(want.pongs))
		}
		for i := range pongs {
			if !bytes.Equal(pongs[i], want.pongs[i]) {
				t.Fatalf("pong %d is %q, want %q", i, pongs[i], want.pongs[i])
			}
		}
		wantClose := binary.BigEndian.AppendUint16(nil, uint16(want.code))
		switch want.code {
		case wsCloseNoStatus:
			wantClose = []byte{}
		case wsCloseAbnormal:
			wantClose = binary.BigEndian.AppendUint16(nil, wsCloseNormal) // sent by Close
		}
		if !bytes.Equal(closing, wantClose) {
			t.Fatalf("close frame %x, want %x", closing, wantClose)
		}
	})
}

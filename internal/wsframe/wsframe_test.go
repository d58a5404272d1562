package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/gobwas/ws"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clientFrame returns a frame as a client sends it: masked.
func clientFrame(fin bool, op ws.OpCode, payload []byte, mask [4]byte) []byte {
	h := ws.Header{Fin: fin, OpCode: op, Masked: true, Mask: mask, Length: int64(len(payload))}
	var b bytes.Buffer
	ws.WriteHeader(&b, h)
	p := bytes.Clone(payload)
	ws.Cipher(p, mask, 0)
	b.Write(p)
	return b.Bytes()
}

// decodeResult is what decoding a stream produced.
type decodeResult struct {
	out     []byte
	replies [][]byte
	err     error
}

// decodeChunks decodes stream as the event loop does: the bytes arrive in
// chunks of the given sizes (the last repeated), each appended to what the
// previous call left unconsumed, and decoded in place.
func decodeChunks(t testing.TB, stream []byte, sizes ...int) decodeResult {
	t.Helper()
	d := NewDecoder(false)
	var res decodeResult
	var hold []byte
	buf := make([]byte, len(stream)+MaxHold)
	for i, off := 0, 0; off < len(stream) || len(hold) > 0; i++ {
		size := sizes[min(i, len(sizes)-1)]
		size = min(size, len(stream)-off)
		k := copy(buf, hold)
		n := copy(buf[k:], stream[off:off+size])
		off += n
		src := buf[:k+n]
		out := src[:0]
		used := 0
		for {
			var m int
			var reply []byte
			var err error
			out, m, reply, err = d.Decode(out, src[used:])
			if m < 0 || used+m > len(src) {
				t.Fatalf("Decode consumed %d of %d bytes", m, len(src)-used)
			}
			used += m
			if reply != nil {
				res.replies = append(res.replies, bytes.Clone(reply))
			}
			if err != nil {
				res.out = append(res.out, out...)
				res.err = err
				return res
			}
			if reply == nil {
				break
			}
		}
		res.out = append(res.out, out...)
		if len(src)-used > MaxHold {
			t.Fatalf("Decode left %d bytes unconsumed, more than MaxHold", len(src)-used)
		}
		hold = append(hold[:0], src[used:]...)
		if n == 0 {
			break // the stream ends in the middle of a frame
		}
	}
	return res
}

func sameResult(a, b decodeResult) bool {
	if !bytes.Equal(a.out, b.out) || len(a.replies) != len(b.replies) {
		return false
	}
	for i := range a.replies {
		if !bytes.Equal(a.replies[i], b.replies[i]) {
			return false
		}
	}
	if (a.err == nil) != (b.err == nil) {
		return false
	}
	return a.err == nil || a.err.Error() == b.err.Error()
}

// TestDecodeSplits decodes a stream of fragmented messages with pings
// between fragments, split at every byte boundary and byte by byte: the
// result is the same as decoding it whole.
func TestDecodeSplits(t *testing.T) {
	m := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	var stream []byte
	stream = append(stream, clientFrame(true, ws.OpBinary, []byte("hello"), m)...)
	stream = append(stream, clientFrame(false, ws.OpBinary, []byte("frag"), m)...)
	stream = append(stream, clientFrame(true, ws.OpPing, []byte("ping!"), m)...)
	stream = append(stream, clientFrame(false, ws.OpContinuation, bytes.Repeat([]byte("x"), 300), m)...)
	stream = append(stream, clientFrame(true, ws.OpPong, nil, m)...)
	stream = append(stream, clientFrame(true, ws.OpContinuation, bytes.Repeat([]byte("y"), 66000), m)...)
	stream = append(stream, clientFrame(true, ws.OpBinary, nil, m)...)
	stream = append(stream, clientFrame(true, ws.OpPing, bytes.Repeat([]byte("z"), 125), m)...)
	stream = append(stream, clientFrame(true, ws.OpClose, []byte{0x03, 0xe8, 'o', 'k'}, m)...)

	want := decodeChunks(t, stream, len(stream))
	wantOut := "hello" + "frag" + string(bytes.Repeat([]byte("x"), 300)) + string(bytes.Repeat([]byte("y"), 66000))
	if string(want.out) != wantOut {
		t.Fatalf("decoded %d bytes, want %d", len(want.out), len(wantOut))
	}
	if len(want.replies) != 3 || string(want.replies[0]) != "\x8a\x05ping!" || !bytes.Equal(want.replies[2], []byte{0x88, 2, 0x03, 0xe8}) {
		t.Fatalf("replies %q", want.replies)
	}
	if want.err != io.EOF {
		t.Fatalf("err %v, want io.EOF", want.err)
	}
	for i := 1; i < len(stream); i += 1 + i/1024 { // every boundary in the first frames

		if got := decodeChunks(t, stream, i, len(stream)); !sameResult(got, want) {
			t.Fatalf("split at %d: got %d bytes, %q, %v", i, len(got.out), got.replies, got.err)
		}
	}
	for i := len(stream) - 300; i < len(stream); i++ { // and in the last ones
		if got := decodeChunks(t, stream, i, len(stream)); !sameResult(got, want) {
			t.Fatalf("split at %d: got %d bytes, %q, %v", i, len(got.out), got.replies, got.err)
		}
	}
	if got := decodeChunks(t, stream, 1); !sameResult(got, want) {
		t.Fatalf("byte by byte: got %d bytes, %q, %v", len(got.out), got.replies, got.err)
	}
	for _, size := range []int{2, 3, 7, 13, 127, 1000} {
		if got := decodeChunks(t, stream, size); !sameResult(got, want) {
			t.Fatalf("chunks of %d: got %d bytes, %q, %v", size, len(got.out), got.replies, got.err)
		}
	}
}

// TestDecodeErrors checks the close code of each protocol error.
func TestDecodeErrors(t *testing.T) {
	m := [4]byte{1, 2, 3, 4}
	cases := []struct {
		name   string
		stream []byte
		code   int
		remote bool
	}{
		{"rsv", []byte{0xc2, 0x80, 1, 2, 3, 4}, CloseProtocolError, false},
		{"opcode", []byte{0x83, 0x80, 1, 2, 3, 4}, CloseProtocolError, false},
		{"text", clientFrame(true, ws.OpText, []byte("t"), m), CloseUnsupportedData, false},
		{"unmasked", []byte{0x82, 0x01, 'x'}, CloseProtocolError, false},
		{"long-control", append([]byte{0x89, 0x80 | 126, 0, 126}, m[:]...), CloseProtocolError, false},
		{"fragmented-control", clientFrame(false, ws.OpPing, nil, m), CloseProtocolError, false},
		{"lone-continuation", clientFrame(true, ws.OpContinuation, nil, m), CloseProtocolError, false},
		{"interrupted-message", append(clientFrame(false, ws.OpBinary, nil, m), clientFrame(true, ws.OpBinary, nil, m)...), CloseProtocolError, false},
		{"msb", append([]byte{0x82, 0x80 | 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, m[:]...), CloseProtocolError, false},
		{"long-encoding", append([]byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 5}, m[:]...), CloseProtocolError, false},
		{"close-1-byte", clientFrame(true, ws.OpClose, []byte{3}, m), CloseProtocolError, false},
		{"close-1005", clientFrame(true, ws.OpClose, []byte{0x03, 0xed}, m), CloseProtocolError, false},
		{"close-utf8", clientFrame(true, ws.OpClose, []byte{0x03, 0xe8, 0xc3, 0x28}, m), CloseInvalidData, false},
		{"close-remote", clientFrame(true, ws.OpClose, []byte{0x0b, 0xb8, 'x'}, m), 3000, true},
	}
	for _, tc := range cases {
		res := decodeChunks(t, tc.stream, len(tc.stream))
		var e *Error
		if !errors.As(res.err, &e) || e.Code != tc.code || e.Remote != tc.remote {
			t.Errorf("%s: %v, want code %d", tc.name, res.err, tc.code)
			continue
		}
		r := res.replies[len(res.replies)-1]
		if len(r) != 4 || r[0] != 0x88 || int(binary.BigEndian.Uint16(r[2:])) != tc.code {
			t.Errorf("%s: reply %x, want a close frame with %d", tc.name, r, tc.code)
		}
	}
	// A close frame without a code is answered with one without a code.
	res := decodeChunks(t, clientFrame(true, ws.OpClose, nil, m), 100)
	if res.err != io.EOF || len(res.replies) != 1 || !bytes.Equal(res.replies[0], []byte{0x88, 0}) {
		t.Errorf("empty close: %v %x", res.err, res.replies)
	}
}

func TestAppendHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 65535, 65536, 1 << 20} {
		b := AppendHeader(nil, n)
		h, err := ws.ReadHeader(bytes.NewReader(b))
		if err != nil || !h.Fin || h.OpCode != ws.OpBinary || h.Masked || h.Length != int64(n) || len(b) != ws.HeaderSize(h) {
			t.Errorf("%d: %+v %v (%d bytes)", n, h, err, len(b))
		}
	}
}

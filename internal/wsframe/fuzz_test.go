package wsframe

import (
	"bytes"
	"testing"

	"github.com/gobwas/ws"
)

// FuzzDecoder decodes arbitrary input whole and in chunks of every shape
// the fuzzer picks: the output, replies and error are the same, Decode never
// leaves more than MaxHold bytes unconsumed, and every reply is a frame a
// server may send.
func FuzzDecoder(f *testing.F) {
	m := [4]byte{9, 8, 7, 6}
	f.Add(clientFrame(true, ws.OpBinary, []byte("hello"), m), uint8(1), uint8(3))
	f.Add(append(clientFrame(false, ws.OpBinary, []byte("ab"), m),
		append(clientFrame(true, ws.OpPing, []byte("p"), m), clientFrame(true, ws.OpContinuation, []byte("cd"), m)...)...), uint8(2), uint8(5))
	f.Add(clientFrame(true, ws.OpClose, []byte{0x03, 0xe8}, m), uint8(7), uint8(1))
	f.Add(clientFrame(true, ws.OpBinary, bytes.Repeat([]byte{1}, 300), m), uint8(13), uint8(200))
	f.Add([]byte{0x82, 0xff, 0, 0, 0, 0, 0, 0, 1, 0, 1, 2, 3, 4}, uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint8) {
		whole := decodeChunks(t, bytes.Clone(stream), max(len(stream), 1))
		split := decodeChunks(t, bytes.Clone(stream), int(a)+1, int(b)+1)
		if !sameResult(whole, split) {
			t.Fatalf("whole: %d bytes %x %v; in chunks of %d then %d: %d bytes %x %v",
				len(whole.out), whole.replies, whole.err, int(a)+1, int(b)+1, len(split.out), split.replies, split.err)
		}
		if len(whole.out) > len(stream) {
			t.Fatalf("%d bytes out of %d in", len(whole.out), len(stream))
		}
		for _, r := range whole.replies {
			h, err := ws.ReadHeader(bytes.NewReader(r))
			if err != nil || !h.Fin || h.Masked || !h.OpCode.IsControl() || int64(len(r)) != int64(ws.HeaderSize(h))+h.Length {
				t.Fatalf("bad reply %x: %+v %v", r, h, err)
			}
		}
	})
}

package frameio

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/warrenipc/warren/wire"
)

// frameErrClass tells apart the errors of a bad frame header.
func frameErrClass(err error) string {
	var ftl *wire.FrameTooLargeError
	var fe *wire.FrameError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ftl):
		return "frame_too_large"
	case errors.As(err, &fe):
		return "bad_frame"
	}
	return err.Error()
}

// FuzzReader checks the Reader against wire.ParseFrame, the reference.
func FuzzReader(f *testing.F) {
	f.Add(wire.AppendFrame(nil, 1, wire.TypeData, 0, make([]byte, 100)), uint32(99))
	f.Add(wire.AppendFrame(nil, 1, wire.TypeData, wire.FlagEnd, []byte("hello")), uint32(wire.DefaultMaxFrameSize))
	f.Add(wire.AppendMessage(nil, 3, wire.TypeData, wire.FlagEnd, make([]byte, 40), 16), uint32(16))
	f.Add(wire.AppendHeader(nil, wire.Header{Length: 5000, Stream: 1, Type: wire.TypeData}), uint32(4096))
	f.Fuzz(func(t *testing.T, data []byte, max uint32) {
		max %= 1 << 20 // the Reader may buffer up to one frame
		_, h, p, ok, err := wire.ParseFrame(data, max)

		// A Reader fed one byte at a time agrees on the first frame.
		r := NewReader(iotest.OneByteReader(bytes.NewReader(data)), max)
		rh, rp, rerr := r.Next()
		switch {
		case err != nil:
			if frameErrClass(rerr) != frameErrClass(err) {
				t.Fatalf("Reader: %v, wire.ParseFrame: %v", rerr, err)
			}
		case !ok:
			if want := io.ErrUnexpectedEOF; len(data) == 0 {
				if rerr != io.EOF {
					t.Fatalf("Reader on no bytes: %v", rerr)
				}
			} else if rerr != want {
				t.Fatalf("Reader on a partial frame: %v", rerr)
			}
		default:
			if rerr != nil || rh != h || !bytes.Equal(rp, p) {
				t.Fatalf("Reader: %v %x %v", rh, rp, rerr)
			}
			if r.Buffered() != 0 {
				t.Fatalf("Reader read %d bytes past a frame one byte at a time", r.Buffered())
			}
		}

		// A Reader that reads payloads in place (NextInto), peeking at and
		// skipping a 4-byte prefix as a session does for the first frame
		// of a chunked message, and reading some frames through its buffer
		// (as a session does small ones), returns the frames ParseFrame
		// finds, one after the other, less the bytes skipped.
		r2 := NewReader(iotest.HalfReader(bytes.NewReader(data)), max)
		var skipped int
		into := func(h wire.Header, head []byte) ([]byte, int) {
			switch {
			case h.Length%3 == 1:
				return nil, 0 // through the buffer, between frames read in place
			case h.Flags&wire.FlagMore == 0 || h.Length < 8:
				return make([]byte, h.Length), 0
			case len(head) < 4:
				return nil, 4
			}
			skipped = 4
			return make([]byte, h.Length-4), 4
		}
		for rest := data; ; {
			var h wire.Header
			var p []byte
			var ok bool
			rest, h, p, ok, err = wire.ParseFrame(rest, max)
			skipped = 0
			ih, ip, ierr := r2.NextInto(into)
			if err != nil || !ok {
				if ierr == nil {
					t.Fatalf("NextInto: %v %x, wire.ParseFrame: ok=%v %v", ih, ip, ok, err)
				}
				break
			}
			if ierr != nil || ih != h || !bytes.Equal(ip, p[skipped:]) {
				t.Fatalf("NextInto: %v %x %v (skipped %d), wire.ParseFrame: %v %x", ih, ip, ierr, skipped, h, p)
			}
		}
	})
}

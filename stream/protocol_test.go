package stream

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warrenipc/warren/wire"
)

// TestWireBytes pins the bytes a Stream sends, as PROTOCOL.md shows them.
func TestWireBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *Options
		want string // hex, spaces ignored
	}{
		{"defaults", nil, "F0 57 52 4E 01 02  0001 00020000  0010 00000001"},
		{"wire defaults", &Options{MaxFrameSize: wire.DefaultMaxFrameSize}, "F0 57 52 4E 01 01  0010 00000001"},
		{"1 MiB messages, 16 KiB frames", &Options{MaxMessageSize: 1 << 20, MaxFrameSize: 16 << 10},
			"F0 57 52 4E 01 03  0001 00004000  0002 00100000  0010 00000001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, raw := unixPair(t)
			raw.Write(appendPreface(nil, wire.Settings{}))
			s, err := New(cs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := unhex(t, tc.want)
			got := make([]byte, len(want))
			if _, err := io.ReadFull(raw, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("preface %X, want %X", got, want)
			}
			raw.Close()
			s.Close()
		})
	}

	s, raw := rawPair(t, nil, appendPreface(nil, wire.Settings{MaxFrameSize: 1024}))
	go func() {
		s.WriteBytes([]byte("hi"))
		s.Write(map[string]int{"n": 1})
		s.WriteBytes(bytes.Repeat([]byte{0xAA}, 1030)) // the peer takes 1024-byte frames
		s.CloseWrite()
	}()
	want := unhex(t, ""+
		"00000002 00000001 02 00  6869"+ // DATA stream 1: "hi"
		"00000007 00000001 02 00  7B226E223A317D"+ // DATA stream 1: {"n":1}
		"00000400 00000001 02 01  00000406"+strings.Repeat("AA", 1020)+ // DATA|MORE, total 1030
		"0000000A 00000001 02 00  "+strings.Repeat("AA", 10)+ // DATA, the last 10 bytes
		"00000000 00000001 03 02") // TRAILERS|END: end of stream
	got := make([]byte, len(want))
	if _, err := io.ReadFull(raw, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("sent\n%X\nwant\n%X", got, want)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHandshakeErrors: New fails clearly, and closes the connection, when
// the peer is not a plain message stream.
func TestHandshakeErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		peer   []byte // what the peer sends; it then waits for the connection to close
		opts   *Options
		is     []error
		within time.Duration
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), nil, []error{wire.ErrNotWarren, wire.ErrHTTPRequest}, time.Second},
		{"random bytes", []byte{0x16, 0x03, 0x01}, nil, []error{wire.ErrNotWarren}, time.Second},
		{"rpc session", wire.AppendPreface(nil, wire.Settings{}), nil, []error{ErrNotStream}, time.Second},
		{"unknown mode", append(wire.AppendPreface(nil, wire.Settings{})[:5], 1, 0, 0x10, 0, 0, 0, 7), nil, []error{ErrNotStream}, time.Second},
		{"bad version", []byte{0xF0, 'W', 'R', 'N', 9, 0}, nil, []error{wire.ErrVersion}, time.Second},
		{"setting out of range", append(wire.AppendPreface(nil, wire.Settings{})[:5], 1, 0, 1, 0, 0, 0, 1), nil, nil, time.Second},
		{"silent", nil, &Options{HandshakeTimeout: 50 * time.Millisecond}, []error{os.ErrDeadlineExceeded}, time.Second},
		{"closes", []byte{}, nil, []error{io.EOF}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipePair(t)
			peerDone := make(chan struct{})
			go func() {
				defer close(peerDone)
				if tc.peer == nil {
					io.Copy(io.Discard, b) // reads, never writes
					return
				}
				go io.Copy(io.Discard, b)
				b.Write(tc.peer)
				if len(tc.peer) == 0 {
					b.Close()
				}
			}()
			start := time.Now()
			s, err := New(a, tc.opts)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if d := time.Since(start); d > tc.within {
				t.Errorf("New took %v", d)
			}
			if !strings.HasPrefix(err.Error(), "warren: stream: handshake: ") {
				t.Errorf("error text %q", err)
			}
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not match %v", err, target)
				}
			}
			if _, werr := a.Write([]byte{0}); !errors.Is(werr, io.ErrClosedPipe) {
				t.Errorf("connection not closed: write gives %v", werr)
			}
			b.Close()
			<-peerDone
		})
	}
	if _, err := New(nil, nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// TestProtocolErrors: frames a plain stream never carries break the
// connection, with the same error from then on.
func TestProtocolErrors(t *testing.T) {
	chunk := frames(bytes.Repeat([]byte{1}, 3000), 1024, 0)
	firstChunk := chunk[:wire.HeaderSize+1024]
	for _, tc := range []struct {
		name  string
		bytes []byte
		large bool // *wire.FrameTooLargeError rather than *wire.FrameError
	}{
		{"ping", wire.AppendFrame(nil, 0, wire.TypePing, 0, make([]byte, 8)), false},
		{"data on stream 3", wire.AppendFrame(nil, 3, wire.TypeData, 0, []byte("x")), false},
		{"data on stream 0", wire.AppendFrame(nil, 0, wire.TypeData, 0, []byte("x")), false},
		{"headers", wire.AppendFrame(nil, 1, wire.TypeHeaders, 0, []byte("x")), false},
		{"window", wire.AppendFrame(nil, 1, wire.TypeWindow, 0, []byte{0, 0, 1, 0}), false},
		{"trailers without end", wire.AppendFrame(nil, 1, wire.TypeTrailers, 0, nil), false},
		{"end inside a message", append(bytes.Clone(firstChunk), endMarker...), false},
		{"more and end", wire.AppendFrame(nil, 1, wire.TypeData, wire.FlagMore|wire.FlagEnd, []byte("xxxxx")), false},
		{"short chunked message", append(bytes.Clone(firstChunk), wire.AppendFrame(nil, 1, wire.TypeData, 0, []byte("x"))...), false},
		{"unknown type", wire.AppendFrame(nil, 1, 9, 0, nil), false},
		{"frame too large", wire.AppendFrame(nil, 1, wire.TypeData, 0, make([]byte, 1025)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, raw := rawPair(t, &Options{MaxFrameSize: 1024}, nil)
			raw.Write(frames([]byte("valid"), 1024, 0))
			raw.Write(tc.bytes)
			if got, err := s.ReadBytes(nil); err != nil || string(got) != "valid" {
				t.Fatalf("first message: %q, %v", got, err)
			}
			_, err := s.ReadBytes(nil)
			if tc.large {
				mustErrAs[*wire.FrameTooLargeError](t, err)
			} else {
				mustErrAs[*wire.FrameError](t, err)
			}
			if !strings.HasPrefix(err.Error(), "warren: stream: read: ") {
				t.Errorf("error text %q", err)
			}
			if err2 := s.Read(new(any)); err2 != err {
				t.Fatalf("second read: %v, want the same error", err2)
			}
		})
	}
}

// TestEndMarkerForms: the last message may carry END itself, and an end
// marker's payload is ignored.
func TestEndMarkerForms(t *testing.T) {
	for name, tail := range map[string][]byte{
		"data with end":         frames([]byte("last"), 1024, wire.FlagEnd),
		"chunked data with end": frames(bytes.Repeat([]byte("last"), 1000), 1024, wire.FlagEnd),
		"marker with payload":   append(frames([]byte("last"), 1024, 0), wire.AppendFrame(nil, 1, wire.TypeTrailers, wire.FlagEnd, []byte("ignored"))...),
	} {
		t.Run(name, func(t *testing.T) {
			s, raw := rawPair(t, &Options{MaxFrameSize: 1024}, nil)
			raw.Write(tail)
			got, err := s.ReadBytes(nil)
			if err != nil || !bytes.HasPrefix(got, []byte("last")) {
				t.Fatalf("ReadBytes = %.10q, %v", got, err)
			}
			for range 2 {
				if _, err := s.ReadBytes(nil); err != io.EOF {
					t.Fatalf("ReadBytes = %v, want io.EOF", err)
				}
			}
			// Frames after the end are never read.
			raw.Write(wire.AppendFrame(nil, 0, wire.TypePing, 0, make([]byte, 8)))
			if _, err := s.ReadBytes(nil); err != io.EOF {
				t.Fatalf("ReadBytes = %v, want io.EOF", err)
			}
		})
	}
}

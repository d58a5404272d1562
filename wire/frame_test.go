package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{},
		{Length: 1, Stream: 2, Type: TypeData, Flags: FlagEnd},
		{Length: 0xfffffffe, Stream: 0xffffffff, Type: 0xff, Flags: 0xff},
		{Length: 0x01020304, Stream: 0x05060708, Type: TypeGoAway, Flags: FlagMore | FlagAck},
	} {
		b := AppendHeader([]byte("x"), h)
		if len(b) != 1+HeaderSize {
			t.Fatalf("AppendHeader(%v) appended %d bytes", h, len(b)-1)
		}
		var p [HeaderSize]byte
		putHeader(p[:], h)
		if !bytes.Equal(p[:], b[1:]) {
			t.Fatalf("putHeader = %x, AppendHeader = %x", p, b[1:])
		}
		got, ok := ParseHeader(b[1:])
		if !ok || got != h {
			t.Fatalf("ParseHeader = %v, %v; want %v", got, ok, h)
		}
	}
	if got := AppendHeader(nil, Header{Length: 0x0a0b0c0d, Stream: 7, Type: TypePing, Flags: FlagAck}); !bytes.Equal(got,
		[]byte{0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 7, 6, 4}) {
		t.Fatalf("big-endian layout: %x", got)
	}
}

func TestParseHeaderShort(t *testing.T) {
	b := AppendHeader(nil, Header{Length: 1, Stream: 1, Type: TypeData})
	for n := range HeaderSize {
		if _, ok := ParseHeader(b[:n]); ok {
			t.Fatalf("ParseHeader of %d bytes: ok", n)
		}
	}
}

func TestPutHeaderShortPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	putHeader(make([]byte, HeaderSize-1), Header{})
}

func TestHeaderCheck(t *testing.T) {
	const max = 100
	tests := []struct {
		name   string
		h      Header
		reason string // "" valid, "too large" for *FrameTooLargeError
	}{
		{"headers", Header{Stream: 1, Type: TypeHeaders, Length: max}, ""},
		{"data", Header{Stream: 2, Type: TypeData}, ""},
		{"trailers", Header{Stream: 3, Type: TypeTrailers}, ""},
		{"cancel", Header{Stream: 3, Type: TypeCancel, Length: 3}, ""},
		{"window stream", Header{Stream: 3, Type: TypeWindow, Length: 4}, ""},
		{"window connection", Header{Type: TypeWindow, Length: 4}, ""},
		{"ping", Header{Type: TypePing, Length: 8, Flags: FlagAck}, ""},
		{"goaway", Header{Type: TypeGoAway, Length: 10}, ""},
		{"too large", Header{Stream: 1, Type: TypeData, Length: max + 1}, "too large"},
		{"headers on 0", Header{Type: TypeHeaders}, "stream frame on stream 0"},
		{"data on 0", Header{Type: TypeData}, "stream frame on stream 0"},
		{"trailers on 0", Header{Type: TypeTrailers}, "stream frame on stream 0"},
		{"cancel on 0", Header{Type: TypeCancel}, "stream frame on stream 0"},
		{"ping on stream", Header{Stream: 1, Type: TypePing, Length: 8}, "connection frame on a stream"},
		{"goaway on stream", Header{Stream: 1, Type: TypeGoAway, Length: 8}, "connection frame on a stream"},
		{"ping short", Header{Type: TypePing, Length: 7}, "PING payload must be 8 bytes"},
		{"window long", Header{Stream: 1, Type: TypeWindow, Length: 5}, "WINDOW payload must be 4 bytes"},
		{"data more", Header{Stream: 1, Type: TypeData, Flags: FlagMore}, ""},
		{"headers more", Header{Stream: 1, Type: TypeHeaders, Flags: FlagMore}, "FlagMore on HEADERS or TRAILERS (only DATA is chunked)"},
		{"trailers more", Header{Stream: 1, Type: TypeTrailers, Flags: FlagMore | FlagEnd}, "FlagMore on HEADERS or TRAILERS (only DATA is chunked)"},
		{"cancel more (ignored)", Header{Stream: 1, Type: TypeCancel, Flags: FlagMore}, ""},
		{"ping more (ignored)", Header{Type: TypePing, Length: 8, Flags: FlagMore}, ""},
		{"type 0", Header{Stream: 1}, "unknown frame type"},
		{"type 8", Header{Stream: 1, Type: 8}, "unknown frame type"},
	}
	for _, tt := range tests {
		err := tt.h.Check(max)
		switch tt.reason {
		case "":
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
		case "too large":
			var e *FrameTooLargeError
			if !errors.As(err, &e) || e.Size != tt.h.Length || e.Limit != max {
				t.Errorf("%s: %v, want *FrameTooLargeError", tt.name, err)
			}
		default:
			var e *FrameError
			if !errors.As(err, &e) || e.Reason != tt.reason || e.Header != tt.h {
				t.Errorf("%s: %v, want *FrameError %q", tt.name, err, tt.reason)
			}
		}
	}
}

func TestParseFrame(t *testing.T) {
	b := AppendFrame(nil, 1, TypeData, FlagEnd, []byte("hello"))
	b = AppendFrame(b, 0, TypePing, 0, []byte("12345678"))
	b = append(b, 0, 0) // part of a third header

	rest, h, p, ok, err := ParseFrame(b, 16)
	if err != nil || !ok || string(p) != "hello" || h != (Header{Length: 5, Stream: 1, Type: TypeData, Flags: FlagEnd}) {
		t.Fatalf("first frame: %v %q %v %v", h, p, ok, err)
	}
	if cap(p) != len(p) {
		t.Fatal("payload capacity reaches into the next frame")
	}
	rest, h, p, ok, err = ParseFrame(rest, 16)
	if err != nil || !ok || string(p) != "12345678" || h.Type != TypePing {
		t.Fatalf("second frame: %v %q %v %v", h, p, ok, err)
	}
	if _, _, _, ok, err = ParseFrame(rest, 16); ok || err != nil || len(rest) != 2 {
		t.Fatalf("partial header: ok=%v err=%v", ok, err)
	}

	// A partial payload needs more bytes; a bad header fails at once.
	whole := AppendFrame(nil, 1, TypeData, 0, []byte("hello"))
	for n := range len(whole) {
		rest, _, _, ok, err := ParseFrame(whole[:n], 16)
		if ok || err != nil || len(rest) != n {
			t.Fatalf("%d of %d bytes: ok=%v err=%v", n, len(whole), ok, err)
		}
	}
	big := AppendHeader(nil, Header{Length: 17, Stream: 1, Type: TypeData})
	if _, _, _, ok, err := ParseFrame(big, 16); ok || err == nil {
		t.Fatalf("oversized header: ok=%v err=%v", ok, err)
	}
	bad := AppendHeader(nil, Header{Stream: 1, Type: 0x42})
	var fe *FrameError
	if _, _, _, _, err := ParseFrame(bad, 16); !errors.As(err, &fe) {
		t.Fatalf("bad type: %v", err)
	}
	// A limit beyond int32 must not overflow the length arithmetic.
	huge := AppendHeader(nil, Header{Length: 0xffffffff, Stream: 1, Type: TypeData})
	if _, _, _, ok, err := ParseFrame(huge, 0xffffffff); ok || err != nil {
		t.Fatalf("4 GiB frame header: ok=%v err=%v", ok, err)
	}
}

func TestParseFrameAllocs(t *testing.T) {
	b := AppendFrame(nil, 1, TypeData, 0, make([]byte, 1024))
	buf := make([]byte, 0, 2048)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendFrame(buf[:0], 1, TypeData, 0, b[HeaderSize:])
		if _, _, _, ok, _ := ParseFrame(buf, DefaultMaxFrameSize); !ok {
			t.Fatal("not ok")
		}
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func TestTypeAndHeaderString(t *testing.T) {
	want := map[Type]string{TypeHeaders: "HEADERS", TypeData: "DATA", TypeTrailers: "TRAILERS", TypeCancel: "CANCEL",
		TypeWindow: "WINDOW", TypePing: "PING", TypeGoAway: "GOAWAY", 0: "Type(0x00)", 0x42: "Type(0x42)"}
	for typ, s := range want {
		if typ.String() != s {
			t.Errorf("%d: %q, want %q", uint8(typ), typ.String(), s)
		}
		if typ.valid() != !strings.HasPrefix(s, "Type(") {
			t.Errorf("%v.valid() = %v", typ, typ.valid())
		}
	}
	if s := (Header{Length: 5, Stream: 3, Type: TypeData, Flags: FlagEnd}).String(); s != "DATA stream=3 len=5 flags=0x02" {
		t.Errorf("Header.String = %q", s)
	}
}

func TestErrorMessages(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&FrameError{Header: Header{Stream: 1, Type: 9}, Reason: "unknown frame type"}, "warren: bad frame (Type(0x09) stream=1 len=0 flags=0x00): unknown frame type"},
		{&FrameTooLargeError{Size: 5, Limit: 4}, "warren: frame payload of 5 bytes exceeds the limit of 4 bytes"},
		{&MessageTooLargeError{Size: 5, Limit: 4}, "warren: message of 5 bytes exceeds the limit of 4 bytes"},
		{&PayloadError{Type: TypeWindow, Reason: "zero increment"}, "warren: malformed WINDOW payload: zero increment"},
		{&PayloadError{Reason: "metadata block: trailing bytes"}, "warren: malformed payload: metadata block: trailing bytes"},
		{&SettingError{Setting: "MaxStreams", Value: 0, Min: 1, Max: 9}, "warren: setting MaxStreams = 0 is out of range [1, 9]"},
		{&NotWarrenError{Prefix: []byte{0x16, 3}}, `warren: peer does not speak the warren protocol (first bytes "\x16\x03")`},
		{&NotWarrenError{HTTP: true, Prefix: []byte("GET /x")}, `warren: peer does not speak the warren protocol: it sent an HTTP request ("GET /x")`},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}

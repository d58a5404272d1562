package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
	"testing/iotest"
	"time"

	"github.com/warrenipc/warren/internal/statusmsg"
)

// vectorSeeds returns the bytes of every vector of the given kind.
func vectorSeeds(kind string) [][]byte {
	var out [][]byte
	for _, v := range vectors {
		if v.Kind == kind {
			b, err := hex.DecodeString(v.Hex)
			if err != nil {
				panic(err)
			}
			out = append(out, b)
		}
	}
	return out
}

func FuzzParseFrame(f *testing.F) {
	for _, b := range vectorSeeds("frame") {
		f.Add(b, uint32(DefaultMaxFrameSize))
	}
	for _, b := range vectorSeeds("message") {
		f.Add(b, uint32(8))
	}
	f.Add(AppendFrame(nil, 1, TypeData, 0, make([]byte, 100)), uint32(99))
	f.Fuzz(func(t *testing.T, data []byte, max uint32) {
		max %= 1 << 20
		rest, h, p, ok, err := ParseFrame(data, max)
		hh, hok := ParseHeader(data)
		switch {
		case err != nil:
			if ok || !hok || h != hh || h.Check(max) == nil {
				t.Fatalf("error %v with ok=%v header %v", err, ok, h)
			}
		case !ok:
			if hok && (h.Check(max) != nil || uint64(len(data)) >= HeaderSize+uint64(h.Length)) {
				t.Fatalf("need more bytes, but header %v is complete and valid over %d bytes", h, len(data))
			}
		default:
			if h != hh || h.Check(max) != nil || uint32(len(p)) != h.Length || cap(p) != len(p) {
				t.Fatalf("frame %v with payload of %d bytes", h, len(p))
			}
			used := data[:len(data)-len(rest)]
			if again := AppendFrame(nil, h.Stream, h.Type, h.Flags, p); !bytes.Equal(again, used) {
				t.Fatalf("re-encoded %x, parsed %x", again, used)
			}
		}

	})
}

func FuzzParsePreface(f *testing.F) {
	for _, b := range vectorSeeds("preface") {
		f.Add(b, uint32(0), uint32(0), uint32(0), uint32(0))
	}
	f.Add([]byte{}, uint32(1024), uint32(1), uint32(1024), uint32(1))
	f.Add([]byte("GET / HTTP/1.1\r\n"), uint32(16<<20), uint32(1<<30), uint32(1<<31-1), uint32(1<<31-1))
	f.Fuzz(func(t *testing.T, data []byte, fs, ms, iw, st uint32) {
		s, n, ok, err := ParsePreface(data)
		var nw *NotWarrenError
		switch {
		case err != nil:
			if ok || n != 0 {
				t.Fatalf("error %v with ok=%v n=%d", err, ok, n)
			}
			if errors.As(err, &nw) {
				m := min(len(data), 4)
				if string(data[:m]) == Magic[:m] {
					t.Fatalf("NotWarren for a magic prefix %x", data)
				}
				if nw.HTTP != looksLikeHTTP(data) || errors.Is(err, ErrHTTPRequest) != nw.HTTP {
					t.Fatalf("HTTP classification of %q: %v", data, err)
				}
				if !bytes.Equal(nw.Prefix, data[:min(len(data), 6)]) {
					t.Fatalf("Prefix %q of %q", nw.Prefix, data)
				}
			}
		case !ok:
			if len(data) >= MaxPrefaceSize {
				t.Fatalf("need more bytes with %d", len(data))
			}
		default:
			if err := s.Validate(); err != nil {
				t.Fatalf("accepted invalid settings: %v", err)
			}
			if string(data[:4]) != Magic || data[4] != Version || n != 6+6*int(data[5]) {
				t.Fatalf("accepted %x as a preface of %d bytes", data[:n], n)
			}
			again := AppendPreface(nil, s)
			s2, n2, ok2, err2 := ParsePreface(again)
			if !ok2 || err2 != nil || s2 != s || n2 != len(again) || n2 > n {
				t.Fatalf("re-encoded %x: %+v %v", again, s2, err2)
			}
		}

		// ReadPreface, one byte at a time, agrees and reads only the preface.
		br := bytes.NewReader(data)
		rs, rerr := ReadPreface(iotest.OneByteReader(br))
		consumed := len(data) - br.Len()
		switch {
		case err != nil:
			if errClass(rerr) != errClass(err) {
				t.Fatalf("ReadPreface: %v, ParsePreface: %v", rerr, err)
			}
			if errors.As(rerr, &nw) && !bytes.Equal(nw.Prefix, data[:consumed]) {
				t.Fatalf("Prefix %q, consumed %q", nw.Prefix, data[:consumed])
			}
			if consumed > MaxPrefaceSize {
				t.Fatalf("consumed %d bytes", consumed)
			}
		case !ok:
			if !errors.Is(rerr, io.ErrUnexpectedEOF) && !(len(data) == 0 && errors.Is(rerr, io.EOF)) {
				t.Fatalf("ReadPreface on a partial preface: %v", rerr)
			}
		default:
			if rerr != nil || rs != s || consumed != n {
				t.Fatalf("ReadPreface: %+v %v after %d bytes, want %d", rs, rerr, consumed, n)
			}
		}

		// Encoding any valid settings round-trips.
		in := Settings{MaxFrameSize: fs, MaxMessageSize: ms, InitialWindow: iw, MaxStreams: st}
		full := in.WithDefaults()
		b := AppendPreface(nil, in)
		got, n, ok, err := ParsePreface(b)
		if full.Validate() != nil {
			if err == nil {
				t.Fatalf("invalid %+v accepted", full)
			}
			return
		}
		if !ok || err != nil || got != full || n != len(b) {
			t.Fatalf("%+v: got %+v %v", full, got, err)
		}
	})
}

func FuzzCallHeader(f *testing.F) {
	for _, b := range vectorSeeds("callheader") {
		f.Add(b, "/Svc/M", uint8(1), int64(time.Second), "k", "v")
	}
	f.Add([]byte{}, "", uint8(0), int64(-1), "", "")
	f.Add([]byte{1, '/', 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "/", uint8(255), int64(math.MaxInt64), "key", "")
	f.Fuzz(func(t *testing.T, data []byte, method string, codec uint8, timeout int64, k, v string) {
		if h, err := ParseCallHeader(data); err == nil {
			if len(h.Method) == 0 || h.Timeout < 0 {
				t.Fatalf("accepted %+v", h)
			}
			md, err := ParseMetadata(h.Metadata, nil)
			if err != nil {
				t.Fatalf("validated metadata fails to parse: %v", err)
			}
			again := AppendCallHeader(nil, string(h.Method), h.Codec, h.Timeout, md)
			h2, err := ParseCallHeader(again)
			md2, _ := ParseMetadata(h2.Metadata, nil)
			if err != nil || !bytes.Equal(h2.Method, h.Method) || h2.Codec != h.Codec || h2.Timeout != h.Timeout ||
				!reflect.DeepEqual(md2, md) {
				t.Fatalf("re-encoded %+v as %+v %v", h, h2, err)
			}
			if len(again) > len(data) {
				t.Fatalf("re-encoding grew %x to %x", data, again)
			}
		} else if pe := (*PayloadError)(nil); !errors.As(err, &pe) || pe.Type != TypeHeaders {
			t.Fatalf("error type %T %v", err, err)
		}

		if method == "" {
			return
		}
		mdIn := []string{k, v}
		if k == "" && v == "" {
			mdIn = nil
		}
		b := AppendCallHeader(nil, method, codec, time.Duration(timeout), mdIn)
		h, err := ParseCallHeader(b)
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		want := time.Duration(0)
		if timeout > 0 {
			us := (uint64(timeout) + 999) / 1000 // rounded up; cannot overflow
			want = time.Duration(us * 1000)
			if us > math.MaxInt64/1000 {
				want = math.MaxInt64
			}
		}
		md, err := ParseMetadata(h.Metadata, nil)
		if string(h.Method) != method || h.Codec != codec || h.Timeout != want || err != nil || !reflect.DeepEqual(md, mdIn) {
			t.Fatalf("round trip: %+v %q %v; want timeout %v", h, md, err, want)
		}
	})
}

func FuzzTrailer(f *testing.F) {
	for _, b := range vectorSeeds("trailer") {
		f.Add(b, uint32(5), "not found", []byte{1, 2}, "k", "v")
	}
	f.Add([]byte{}, uint32(0), "", []byte{}, "", "")
	f.Fuzz(func(t *testing.T, data []byte, code uint32, msg string, detail []byte, k, v string) {
		if tr, err := ParseTrailer(data); err == nil {
			details, err := ParseDetails(tr.Details)
			if err != nil {
				t.Fatalf("validated details fail to parse: %v", err)
			}
			md, err := ParseMetadata(tr.Metadata, nil)
			if err != nil {
				t.Fatalf("validated metadata fails to parse: %v", err)
			}
			again := AppendTrailer(nil, tr.Code, string(tr.Message), details, md)
			tr2, err := ParseTrailer(again)
			d2, _ := ParseDetails(tr2.Details)
			md2, _ := ParseMetadata(tr2.Metadata, nil)
			if err != nil || tr2.Code != tr.Code || string(tr2.Message) != statusmsg.Bound(string(tr.Message)) ||
				len(d2) != len(details) || !reflect.DeepEqual(md2, md) {
				t.Fatalf("re-encoded %+v as %+v %v", tr, tr2, err)
			}
			for i := range d2 {
				if !bytes.Equal(d2[i], details[i]) {
					t.Fatalf("detail %d: %x, want %x", i, d2[i], details[i])
				}
			}
			if len(again) > len(data) {
				t.Fatalf("re-encoding grew %x to %x", data, again)
			}
		} else if pe := (*PayloadError)(nil); !errors.As(err, &pe) || pe.Type != TypeTrailers {
			t.Fatalf("error type %T %v", err, err)
		}

		var details [][]byte
		if len(detail) > 0 {
			details = [][]byte{detail, {}}
		}
		var mdIn []string
		if k != "" || v != "" {
			mdIn = []string{k, v}
		}
		b := AppendTrailer(nil, code, msg, details, mdIn)
		tr, err := ParseTrailer(b)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		d, err1 := ParseDetails(tr.Details)
		md, err2 := ParseMetadata(tr.Metadata, nil)
		if tr.Code != code || string(tr.Message) != statusmsg.Bound(msg) || err1 != nil || err2 != nil ||
			len(d) != len(details) || !reflect.DeepEqual(md, mdIn) {
			t.Fatalf("round trip: %+v %q %q %v %v", tr, d, md, err1, err2)
		}
		if len(d) > 0 && !bytes.Equal(d[0], detail) {
			t.Fatalf("detail %x, want %x", d[0], detail)
		}
	})
}

// naiveMetadata parses a metadata block the slow, obvious way: byte by byte,
// with lengths in int64 so nothing can overflow.
func naiveMetadata(b []byte) ([][2]string, bool) {
	pos := 0
	uvarint := func() (int64, bool) {
		var v uint64
		for i := 0; i < 10; i++ {
			if pos >= len(b) {
				return 0, false
			}
			c := b[pos]
			pos++
			if i == 9 && c > 1 {
				return 0, false
			}
			v |= uint64(c&0x7f) << (7 * i)
			if c < 0x80 {
				if v > math.MaxInt64 {
					return math.MaxInt64, true
				}
				return int64(v), true
			}
		}
		return 0, false
	}
	str := func() (string, bool) {
		n, ok := uvarint()
		if !ok || n > int64(len(b)-pos) {
			return "", false
		}
		s := string(b[pos : pos+int(n)])
		pos += int(n)
		return s, true
	}
	if len(b) == 0 {
		return nil, true
	}
	count, ok := uvarint()
	if !ok {
		return nil, false
	}
	var out [][2]string
	for i := int64(0); i < count; i++ {
		k, ok1 := str()
		v, ok2 := str()
		if !ok1 || !ok2 {
			return nil, false
		}
		out = append(out, [2]string{k, v})
	}
	return out, pos == len(b)
}

func FuzzMetadata(f *testing.F) {
	for _, b := range vectorSeeds("metadata") {
		f.Add(b, uint8(1))
	}
	f.Add(AppendMetadata(nil, []string{"a", "b", "c", "d"}), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, stop uint8) {
		want, wantOK := naiveMetadata(data)
		var got [][2]string
		err := RangeMetadata(data, func(k, v []byte) bool {
			got = append(got, [2]string{string(k), string(v)})
			return true
		})
		if (err == nil) != wantOK {
			t.Fatalf("RangeMetadata: %v, naive ok=%v", err, wantOK)
		}
		if err != nil {
			if got != nil {
				t.Fatal("fn called for a malformed block")
			}
			if _, err := ParseMetadata(data, nil); err == nil {
				t.Fatal("ParseMetadata accepted a malformed block")
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %q, naive %q", got, want)
		}
		// Early stop after stop pairs.
		calls := 0
		RangeMetadata(data, func(k, v []byte) bool { calls++; return calls < int(stop) })
		if wantCalls := min(len(want), max(int(stop), 1)); calls != wantCalls {
			t.Fatalf("%d calls with stop %d of %d", calls, stop, len(want))
		}
		// Round trip.
		flat, err := ParseMetadata(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		again := AppendMetadata(nil, flat)
		flat2, err := ParseMetadata(again, nil)
		if err != nil || !reflect.DeepEqual(flat2, flat) {
			t.Fatalf("re-encoded %q as %q %v", flat, flat2, err)
		}
	})
}

// naiveAssembler is the reference for FuzzAssembler: it keeps every byte of
// a chunked message in a growing slice and checks the rules as written in
// PROTOCOL.md, with no buffer reuse and no early allocation.
type naiveAssembler struct {
	limit    int
	inMsg    bool
	dropping bool
	stream   uint32
	typ      Type
	total    int
	got      []byte
}

func (n *naiveAssembler) add(h Header, p []byte) (msg []byte, done bool, class string) {
	more := h.Flags&FlagMore != 0
	if more && h.Flags&FlagEnd != 0 {
		*n = naiveAssembler{limit: n.limit}
		return nil, false, "bad_frame"
	}
	if !n.inMsg {
		if !more {
			if len(p) > n.limit {
				return nil, false, "message_too_large"
			}
			return p, true, ""
		}
		if len(p) < 4 {
			return nil, false, "bad_frame"
		}
		total := int(binary.BigEndian.Uint32(p))
		if total <= len(p)-4 {
			return nil, false, "bad_frame"
		}
		*n = naiveAssembler{limit: n.limit, inMsg: true, stream: h.Stream, typ: h.Type, total: total,
			got: append([]byte(nil), p[4:]...)}
		if total > n.limit {
			n.dropping = true
			return nil, false, "message_too_large"
		}
		return nil, false, ""
	}
	fail := func() ([]byte, bool, string) {
		*n = naiveAssembler{limit: n.limit}
		return nil, false, "bad_frame"
	}
	switch {
	case h.Stream != n.stream || h.Type != n.typ:
		return fail()
	case more && len(p) == 0:
		return fail()
	case len(n.got)+len(p) > n.total:
		return fail()
	}
	n.got = append(n.got, p...)
	if more {
		if len(n.got) == n.total {
			return fail()
		}
		return nil, false, ""
	}
	if len(n.got) != n.total {
		return fail()
	}
	msg, dropping := n.got, n.dropping
	*n = naiveAssembler{limit: n.limit}
	if dropping {
		return nil, false, ""
	}
	return msg, true, ""
}

func FuzzAssembler(f *testing.F) {
	f.Add([]byte{0x09, 8, 0, 0, 0, 0, 'a', 'b', 'c', 'd', 0x00, 3, 'e', 'f', 'g'}, uint16(100))
	f.Add([]byte{0x01, 6, 0, 0, 0, 9, 'a', 'b', 0x01, 3, 'c', 'd', 'e', 0x00, 4, 'f', 'g', 'h', 'i'}, uint16(8))
	f.Add([]byte{0x00, 5, 'h', 'e', 'l', 'l', 'o', 0x00, 0}, uint16(4))
	f.Add([]byte{0xf9, 10, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 0x05, 30}, uint16(20))
	for _, b := range vectorSeeds("message") {
		f.Add(b, uint16(1<<15))
	}
	f.Add([]byte{0x01, 8, 0, 0x40, 0, 0, 1, 2, 3, 4}, uint16(0)) // 0: the default limit, 4 MiB
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		lim := uint32(limit)
		a := Assembler{Limit: lim}
		if lim == 0 {
			lim = DefaultMaxMessageSize
		}
		ref := naiveAssembler{limit: int(lim)}
		// Round trip: data as a message, chunked by a frame size from limit.
		if len(data) <= int(lim) {
			maxFrame := 5 + uint32(limit%200)
			frames := AppendMessage(nil, 1, TypeData, FlagEnd, data, maxFrame)
			var got []byte
			for len(frames) > 0 {
				rest, h, p, ok, err := ParseFrame(frames, maxFrame)
				if !ok || err != nil {
					t.Fatalf("AppendMessage made a bad frame: %v", err)
				}
				frames = rest
				m, done, err := a.Add(h, p)
				if err != nil || done != (len(frames) == 0) {
					t.Fatalf("Add: done=%v %v", done, err)
				}
				got = m
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("round trip with maxFrame %d: %x", maxFrame, got)
			}
		}

		// Random frames: ctl byte (bit 0 FlagMore, bit 1 type, bit 2 stream,
		// bit 3 and up: a plausible length prefix; 0xf0 on a frame without
		// the prefix: FlagEnd), length byte, payload.
		for len(data) >= 2 {
			ctl, n := data[0], int(data[1])
			data = data[2:]
			p := append([]byte(nil), data[:min(n, len(data))]...)
			data = data[len(p):]
			h := Header{Stream: 1, Type: TypeData, Length: uint32(len(p))}
			if ctl&1 != 0 {
				h.Flags |= FlagMore
			}
			if ctl&2 != 0 {
				h.Type = TypeHeaders
			}
			if ctl&4 != 0 {
				h.Stream = 3
			}
			if ctl&8 != 0 && len(p) >= 4 {
				binary.BigEndian.PutUint32(p, uint32(len(p)-4+int(ctl>>4)))
			} else if ctl&0xf0 == 0xf0 {
				h.Flags |= FlagEnd
			}
			msg, done, err := a.Add(h, p)
			wmsg, wdone, wclass := ref.add(h, p)
			if errClass(err) != wclass || done != wdone || !bytes.Equal(msg, wmsg) {
				t.Fatalf("frame %v %x: got %x %v %v; reference %x %v %q", h, p, msg, done, err, wmsg, wdone, wclass)
			}
			if done && uint32(len(msg)) > lim {
				t.Fatalf("delivered %d bytes over the limit %d", len(msg), lim)
			}
			if a.InProgress() != ref.inMsg {
				t.Fatalf("InProgress %v, reference %v", a.InProgress(), ref.inMsg)
			}
			if cap(a.buf) > int(lim) {
				t.Fatalf("buffer of %d bytes for a limit of %d", cap(a.buf), lim)
			}
		}
	})
}

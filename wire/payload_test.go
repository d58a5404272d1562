package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestCallHeaderRoundTrip(t *testing.T) {
	long := strings.Repeat("m", 300) // two-byte length
	tests := []struct {
		method  string
		codec   uint8
		timeout time.Duration
		wantT   time.Duration
		md      []string
	}{
		{"/a", 0, 0, 0, nil},
		{"Echo.Say", 1, -time.Second, 0, []string{"k", "v"}},
		{long, 2, time.Nanosecond, time.Microsecond, []string{"", "", long, long}},
		{"/x", 255, 1500 * time.Millisecond, 1500 * time.Millisecond, []string{"a", "1", "a", "2"}},
		{"/x", 3, time.Microsecond + 1, 2 * time.Microsecond, nil},
		{"/x", 3, math.MaxInt64, math.MaxInt64, nil}, // rounds up past MaxInt64 us: clamped
		{"/x", 3, 24 * time.Hour, 24 * time.Hour, nil},
	}
	for _, tt := range tests {
		b := AppendCallHeader([]byte("prefix"), tt.method, tt.codec, tt.timeout, tt.md)
		if string(b[:6]) != "prefix" {
			t.Fatal("AppendCallHeader overwrote b")
		}
		h, err := ParseCallHeader(b[6:])
		if err != nil {
			t.Fatalf("%q: %v", tt.method, err)
		}
		if string(h.Method) != tt.method || h.Codec != tt.codec || h.Timeout != tt.wantT {
			t.Fatalf("%q: got %q %d %v", tt.method, h.Method, h.Codec, h.Timeout)
		}
		md, err := ParseMetadata(h.Metadata, nil)
		if err != nil || !reflect.DeepEqual(md, tt.md) {
			t.Fatalf("%q: metadata %q %v, want %q", tt.method, md, err, tt.md)
		}
	}
}

func TestParseCallHeaderErrors(t *testing.T) {
	tests := map[string][]byte{
		"truncated method":                {0x80},
		"empty method":                    {0, 0, 0},
		"missing codec":                   {2, '/', 'm'},
		"truncated timeout":               {2, '/', 'm', 0},
		"metadata block: truncated count": {2, '/', 'm', 0, 0, 0x80},
		"metadata block: count exceeds the bytes present": {2, '/', 'm', 0, 0, 2, 0, 0},
		"metadata block: truncated key":                   {2, '/', 'm', 0, 0, 1, 5, 'a'},
		"metadata block: truncated value":                 {2, '/', 'm', 0, 0, 1, 1, 'a', 2, 'b'},
		"metadata block: trailing bytes":                  {2, '/', 'm', 0, 0, 1, 0, 0, 0},
	}
	tests["truncated method"+" (length past the end)"] = []byte{9, '/'}
	tests["truncated timeout"+" (varint overflow)"] = append([]byte{2, '/', 'm', 0}, bytes.Repeat([]byte{0xff}, 10)...)
	for reason, p := range tests {
		_, err := ParseCallHeader(p)
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Type != TypeHeaders || !strings.HasPrefix(reason, pe.Reason) {
			t.Errorf("%s: %v", reason, err)
		}
	}
	if _, err := ParseCallHeader(nil); err == nil {
		t.Error("empty payload: no error")
	}
}

func TestAppendMetadataOddPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	//lint:ignore SA5012 the odd length is what is being tested
	AppendMetadata(nil, []string{"k"})
}

func TestMetadata(t *testing.T) {
	if b := AppendMetadata([]byte("x"), nil); string(b) != "x" {
		t.Fatalf("empty metadata appended %q", b[1:])
	}
	md := []string{"a", "1", "b", "", "", "3"}
	block := AppendMetadata(nil, md)
	if want := []byte{3, 1, 'a', 1, '1', 1, 'b', 0, 0, 1, '3'}; !bytes.Equal(block, want) {
		t.Fatalf("block %x, want %x", block, want)
	}
	got, err := ParseMetadata(block, []string{"keep"})
	if err != nil || !reflect.DeepEqual(got, append([]string{"keep"}, md...)) {
		t.Fatalf("%q %v", got, err)
	}
	// Early stop.
	var keys []string
	if err := RangeMetadata(block, func(k, v []byte) bool {
		keys = append(keys, string(k))
		return len(keys) < 2
	}); err != nil || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Fatalf("early stop: %q %v", keys, err)
	}
	// Empty and count-0 blocks have no entries.
	for _, b := range [][]byte{nil, {0}} {
		if err := RangeMetadata(b, func(k, v []byte) bool { t.Fatal("called"); return true }); err != nil {
			t.Fatal(err)
		}
	}
	// A malformed block is rejected before fn sees any entry.
	bad := append(append([]byte{}, block...), 0xff)
	bad[0] = 3
	err = RangeMetadata(bad, func(k, v []byte) bool { t.Fatal("fn called on a malformed block"); return true })
	var pe *PayloadError
	if !errors.As(err, &pe) || pe.Type != 0 {
		t.Fatalf("malformed: %v", err)
	}
	if _, err := ParseMetadata([]byte{1, 1}, nil); err == nil {
		t.Fatal("ParseMetadata of a truncated block: no error")
	}
}

func TestMetadataAliasesAndAllocs(t *testing.T) {
	block := AppendMetadata(nil, []string{"key", "value"})
	RangeMetadata(block, func(k, v []byte) bool {
		if &k[0] != &block[2] || cap(k) != len(k) {
			t.Fatal("key does not alias the block or reaches past it")
		}
		return true
	})
	p := AppendCallHeader(nil, "/Svc/Method", 1, time.Second, []string{"trace", "abc", "tenant", "t1"})
	n := testing.AllocsPerRun(100, func() {
		h, err := ParseCallHeader(p)
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		if err := RangeMetadata(h.Metadata, func(k, v []byte) bool { count++; return true }); err != nil || count != 2 {
			t.Fatal(err, count)
		}
	})
	if n != 0 {
		t.Fatalf("ParseCallHeader + RangeMetadata: %v allocs", n)
	}
	buf := make([]byte, 0, 256)
	md := []string{"trace", "abc"}
	if n := testing.AllocsPerRun(100, func() { buf = AppendCallHeader(buf[:0], "/Svc/Method", 1, time.Second, md) }); n != 0 {
		t.Fatalf("AppendCallHeader: %v allocs", n)
	}
	tr := AppendTrailer(nil, 5, "not found", [][]byte{{1}}, md)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseTrailer(tr); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ParseTrailer: %v allocs", n)
	}
}

func TestTrailerRoundTrip(t *testing.T) {
	tests := []struct {
		code    uint32
		msg     string
		details [][]byte
		md      []string
		size    int // encoded size, -1 to skip
	}{
		{0, "", nil, nil, 0},
		{5, "", nil, nil, 2},
		{0, "x", nil, nil, 3},
		{13, "boom", [][]byte{[]byte("d1"), {}}, nil, 11},
		{0, "", nil, []string{"k", "v"}, 8},
		{math.MaxUint32, strings.Repeat("e", 200), [][]byte{bytes.Repeat([]byte{7}, 300)}, []string{"a", "b"}, -1},
	}
	for _, tt := range tests {
		b := AppendTrailer(nil, tt.code, tt.msg, tt.details, tt.md)
		if tt.size >= 0 && len(b) != tt.size {
			t.Errorf("code %d: %d bytes %x, want %d", tt.code, len(b), b, tt.size)
		}
		tr, err := ParseTrailer(b)
		if err != nil {
			t.Fatalf("code %d: %v", tt.code, err)
		}
		if tr.Code != tt.code || string(tr.Message) != tt.msg {
			t.Fatalf("got %d %q", tr.Code, tr.Message)
		}
		d, err := ParseDetails(tr.Details)
		if err != nil || len(d) != len(tt.details) {
			t.Fatalf("details %q %v", d, err)
		}
		for i := range d {
			if !bytes.Equal(d[i], tt.details[i]) {
				t.Fatalf("detail %d: %q", i, d[i])
			}
		}
		md, err := ParseMetadata(tr.Metadata, nil)
		if err != nil || !reflect.DeepEqual(md, tt.md) {
			t.Fatalf("metadata %q %v", md, err)
		}
	}
}

func TestParseTrailerErrors(t *testing.T) {
	tests := map[string][]byte{
		"truncated code":                                 {0x80},
		"code out of range":                              {0x80, 0x80, 0x80, 0x80, 0x10, 0},
		"truncated message":                              {5},
		"truncated message ":                             {5, 3, 'a'},
		"details block: truncated count":                 {5, 0, 0x80},
		"details block: count exceeds the bytes present": {5, 0, 3, 0, 0},
		"details block: truncated entry":                 {5, 0, 2, 0, 4, 'a'},
		"metadata block: truncated key":                  {5, 0, 0, 1, 9, 0},
		"metadata block: trailing bytes":                 {5, 0, 0, 0, 0},
	}
	for reason, p := range tests {
		_, err := ParseTrailer(p)
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Type != TypeTrailers || pe.Reason != strings.TrimSpace(reason) {
			t.Errorf("%s: %v", reason, err)
		}
	}
}

func TestParseDetails(t *testing.T) {
	if d, err := ParseDetails(nil); d != nil || err != nil {
		t.Fatal(d, err)
	}
	if d, err := ParseDetails([]byte{0}); len(d) != 0 || err != nil {
		t.Fatal(d, err)
	}
	for reason, p := range map[string][]byte{
		"details block: truncated count":                 {0x80},
		"details block: count exceeds the bytes present": {2, 0},
		"details block: truncated entry":                 {1, 2, 0},
		"details block: trailing bytes":                  {1, 0, 0},
	} {
		_, err := ParseDetails(p)
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Type != 0 || pe.Reason != reason {
			t.Errorf("%s: %v", reason, err)
		}
	}
}

func TestWindow(t *testing.T) {
	for _, incr := range []uint32{1, 65536, maxWindow} {
		b := AppendWindow(nil, incr)
		if len(b) != 4 {
			t.Fatalf("%d bytes", len(b))
		}
		got, err := ParseWindow(b)
		if err != nil || got != incr {
			t.Fatalf("%d: %d %v", incr, got, err)
		}
	}
	for reason, p := range map[string][]byte{
		"length is not 4":       {0, 0, 1},
		"length is not 4 ":      {0, 0, 0, 1, 0},
		"zero increment":        {0, 0, 0, 0},
		"increment over 2^31-1": {0x80, 0, 0, 0},
	} {
		_, err := ParseWindow(p)
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Type != TypeWindow || pe.Reason != strings.TrimSpace(reason) {
			t.Errorf("%s: %v", reason, err)
		}
	}
}

func TestGoAway(t *testing.T) {
	for _, tt := range []struct {
		last, code uint32
		msg        string
	}{{0, 0, ""}, {7, 14, "shutting down"}, {math.MaxUint32, math.MaxUint32, strings.Repeat("x", 1000)}} {
		b := AppendGoAway(nil, tt.last, tt.code, tt.msg)
		last, code, msg, err := ParseGoAway(b)
		if err != nil || last != tt.last || code != tt.code || string(msg) != tt.msg {
			t.Fatalf("%+v: %d %d %q %v", tt, last, code, msg, err)
		}
	}
	big := binary.AppendUvarint([]byte{0, 0, 0, 1}, math.MaxUint32+1)
	for reason, p := range map[string][]byte{
		"shorter than 4 bytes": {0, 0, 1},
		"truncated code":       {0, 0, 0, 1},
		"truncated code ":      {0, 0, 0, 1, 0x80},
		"code out of range":    big,
	} {
		_, _, _, err := ParseGoAway(p)
		var pe *PayloadError
		if !errors.As(err, &pe) || pe.Type != TypeGoAway || pe.Reason != strings.TrimSpace(reason) {
			t.Errorf("%s: %v", reason, err)
		}
	}
}

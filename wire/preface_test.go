package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/warrenipc/warren/internal/testutil"
)

func TestDefaultSettings(t *testing.T) {
	d := defaultSettings()
	if d != (Settings{MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024}) {
		t.Fatalf("DefaultSettings = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := (Settings{}).WithDefaults(); got != d {
		t.Fatalf("zero WithDefaults = %+v", got)
	}
	custom := Settings{MaxFrameSize: 2048, MaxMessageSize: 3, InitialWindow: 4096, MaxStreams: 5}
	if got := custom.WithDefaults(); got != custom {
		t.Fatalf("WithDefaults changed set fields: %+v", got)
	}
	if got := (Settings{MaxStreams: 7}).WithDefaults(); got.MaxStreams != 7 || got.MaxFrameSize != d.MaxFrameSize {
		t.Fatalf("partial WithDefaults = %+v", got)
	}
}

func TestSettingsValidate(t *testing.T) {
	ok := defaultSettings()
	tests := []struct {
		name    string
		mod     func(*Settings)
		setting string // "" when valid
	}{
		{"defaults", func(*Settings) {}, ""},
		{"frame min", func(s *Settings) { s.MaxFrameSize = 1024 }, ""},
		{"frame max", func(s *Settings) { s.MaxFrameSize = 16 << 20 }, ""},
		{"frame low", func(s *Settings) { s.MaxFrameSize = 1023 }, "MaxFrameSize"},
		{"frame high", func(s *Settings) { s.MaxFrameSize = 16<<20 + 1 }, "MaxFrameSize"},
		{"message min", func(s *Settings) { s.MaxMessageSize = 1 }, ""},
		{"message max", func(s *Settings) { s.MaxMessageSize = 1 << 30 }, ""},
		{"message zero", func(s *Settings) { s.MaxMessageSize = 0 }, "MaxMessageSize"},
		{"message high", func(s *Settings) { s.MaxMessageSize = 1<<30 + 1 }, "MaxMessageSize"},
		{"window min", func(s *Settings) { s.InitialWindow = 1024 }, ""},
		{"window max", func(s *Settings) { s.InitialWindow = 1<<31 - 1 }, ""},
		{"window low", func(s *Settings) { s.InitialWindow = 1023 }, "InitialWindow"},
		{"window high", func(s *Settings) { s.InitialWindow = 1 << 31 }, "InitialWindow"},
		{"streams min", func(s *Settings) { s.MaxStreams = 1 }, ""},
		{"streams zero", func(s *Settings) { s.MaxStreams = 0 }, "MaxStreams"},
		{"streams high", func(s *Settings) { s.MaxStreams = 1 << 31 }, "MaxStreams"},
	}
	for _, tt := range tests {
		s := ok
		tt.mod(&s)
		err := s.Validate()
		var se *SettingError
		switch {
		case tt.setting == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.setting != "" && (!errors.As(err, &se) || se.Setting != tt.setting):
			t.Errorf("%s: %v, want a SettingError for %s", tt.name, err, tt.setting)
		case se != nil && se.Value >= se.Min && se.Value <= se.Max:
			t.Errorf("%s: value %d inside reported range [%d, %d]", tt.name, se.Value, se.Min, se.Max)
		}
	}
	if err := (Settings{}).Validate(); err == nil {
		t.Error("zero Settings validated")
	}
}

func TestAppendPreface(t *testing.T) {
	if got := AppendPreface(nil, Settings{}); !bytes.Equal(got, []byte{0xF0, 'W', 'R', 'N', 1, 0}) {
		t.Fatalf("default preface %x", got)
	}
	if got := AppendPreface(nil, defaultSettings()); len(got) != 6 {
		t.Fatalf("explicit defaults: %x", got)
	}
	all := Settings{MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 30, InitialWindow: 1 << 16, MaxStreams: 7}
	b := AppendPreface([]byte("x"), all)
	if len(b) != 1+MaxPrefaceSize-12*6 || b[6] != 4 {
		t.Fatalf("custom preface %x", b)
	}
	s, n, ok, err := ParsePreface(b[1:])
	if err != nil || !ok || n != len(b)-1 || s != all {
		t.Fatalf("round trip: %+v %d %v %v", s, n, ok, err)
	}
}

func TestParsePrefaceIncremental(t *testing.T) {
	want := Settings{MaxFrameSize: 4096, MaxMessageSize: 100, InitialWindow: 8192, MaxStreams: 3}
	b := AppendPreface(nil, want)
	for i := range len(b) {
		if _, _, ok, err := ParsePreface(b[:i]); ok || err != nil {
			t.Fatalf("%d of %d bytes: ok=%v err=%v", i, len(b), ok, err)
		}
	}
	s, n, ok, err := ParsePreface(append(b, 1, 2, 3))
	if !ok || err != nil || n != len(b) || s != want {
		t.Fatalf("%+v %d %v %v", s, n, ok, err)
	}
}

func TestParsePrefaceErrors(t *testing.T) {
	magic := Magic
	type test struct {
		in      string
		http    bool
		isErr   error  // the sentinel the error matches
		setting string // or the setting a *SettingError names
		msg     string // text the message contains
	}
	tests := []test{
		{in: "\x00", isErr: ErrNotWarren},
		{in: "\xF0X", isErr: ErrNotWarren},
		{in: "\xF0WRX\x01\x00", isErr: ErrNotWarren},
		{in: "Q", isErr: ErrNotWarren},
		{in: "GX", isErr: ErrNotWarren},
		{in: "GETX", isErr: ErrNotWarren},
		{in: "HTTP/1.1 200 OK\r\n", isErr: ErrNotWarren},
		{in: magic + "\x02", isErr: ErrVersion, msg: "version 2 (this side speaks 1)"},
		{in: magic + "\x00\x00", isErr: ErrVersion},
		{in: magic + "\x01\x11", isErr: ErrBadPreface, msg: "17 settings"},
		{in: magic + "\x01\xff", isErr: ErrBadPreface},
		{in: magic + "\x01\x01\x00\x01\x00\x00\x00\x01", setting: "MaxFrameSize"},
		{in: magic + "\x01\x01\x00\x02\x00\x00\x00\x00", setting: "MaxMessageSize"},
		{in: magic + "\x01\x01\x00\x03\x00\x00\x00\x00", setting: "InitialWindow"},
		{in: magic + "\x01\x01\x00\x04\x00\x00\x00\x00", setting: "MaxStreams"},
		// The last of repeated ids wins, even when an earlier one was valid.
		{in: magic + "\x01\x02\x00\x01\x00\x00\x10\x00\x00\x01\x00\x00\x00\x00", setting: "MaxFrameSize"},
	}
	for _, m := range httpMethods {
		tests = append(tests,
			test{in: m + "/ HTTP/1.1\r\n", http: true, isErr: ErrNotWarren},
			test{in: m, http: true, isErr: ErrNotWarren})
	}
	for _, tt := range tests {
		_, n, ok, err := ParsePreface([]byte(tt.in))
		if ok || n != 0 || err == nil {
			t.Errorf("%q: ok=%v n=%d err=%v", tt.in, ok, n, err)
			continue
		}
		if tt.setting != "" {
			var se *SettingError
			if !errors.As(err, &se) || se.Setting != tt.setting {
				t.Errorf("%q: %v, want SettingError %s", tt.in, err, tt.setting)
			}
			continue
		}
		if !errors.Is(err, tt.isErr) {
			t.Errorf("%q: %v, want %v", tt.in, err, tt.isErr)
		}
		if errors.Is(err, ErrHTTPRequest) != tt.http {
			t.Errorf("%q: errors.Is(ErrHTTPRequest) = %v", tt.in, !tt.http)
		}
		if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: %q does not say %q", tt.in, err, tt.msg)
		}
		var nw *NotWarrenError
		if errors.As(err, &nw) {
			if want := tt.in[:min(len(tt.in), 6)]; string(nw.Prefix) != want {
				t.Errorf("%q: Prefix %q, want %q", tt.in, nw.Prefix, want)
			}
		}
	}
	// Fewer than 4 bytes that could start an HTTP request wait for more.
	for _, in := range []string{"", "\xF0", "\xF0WR", "G", "GE", "GET", "PO", "PR", "D", "O", "T", "C"} {
		if _, _, ok, err := ParsePreface([]byte(in)); ok || err != nil {
			t.Errorf("%q: ok=%v err=%v, want need more", in, ok, err)
		}
	}
}

func TestLooksLikeHTTP(t *testing.T) {
	for in, want := range map[string]bool{
		"GET /": true, "POST": true, "PUT x": true, "HEAD": true, "DELETE": true, "OPTIONS": true,
		"PATCH": true, "CONNECT": true, "TRACE": true, "PRI * HTTP/2.0": true,
		"GET": false, "": false, "get /": false, "\xF0WRN": false, "HTTP/1.1": false, "PUTX": false,
	} {
		if got := looksLikeHTTP([]byte(in)); got != want {
			t.Errorf("looksLikeHTTP(%q) = %v", in, got)
		}
	}
}

func TestReadPreface(t *testing.T) {
	want := Settings{MaxFrameSize: 1 << 20, MaxMessageSize: 1 << 30, InitialWindow: 1 << 16, MaxStreams: 7}
	p := AppendPreface(nil, want)
	frame := AppendFrame(nil, 0, TypePing, 0, []byte("12345678"))

	// Reads exactly the preface, through any Read sizes.
	for _, r := range []func(io.Reader) io.Reader{
		func(r io.Reader) io.Reader { return r },
		iotest.OneByteReader,
		iotest.HalfReader,
	} {
		br := bytes.NewReader(append(append([]byte{}, p...), frame...))
		s, err := ReadPreface(r(br))
		if err != nil || s != want {
			t.Fatalf("%+v %v", s, err)
		}
		if br.Len() != len(frame) {
			t.Fatalf("read %d bytes past the preface", len(frame)-br.Len())
		}
	}
	s, err := ReadPreface(bytes.NewReader(AppendPreface(nil, Settings{})))
	if err != nil || s != defaultSettings() {
		t.Fatalf("default preface: %+v %v", s, err)
	}

	// Fails on the first wrong bytes without reading more.
	for _, chunks := range [][]string{{"GET "}, {"G", "E", "T", " "}, {"\x16"}, {"\xF0WRN\x07"}, {"\xF0WRN", "\x01\x12"}} {
		_, err := ReadPreface(&testutil.ChunkReader{T: t, Chunks: chunks})
		if err == nil {
			t.Fatalf("%q: no error", chunks)
		}
	}
	_, err = ReadPreface(&testutil.ChunkReader{T: t, Chunks: []string{"GE", "T /index.html HTTP/1.1\r\n"}})
	var nw *NotWarrenError
	if !errors.As(err, &nw) || !nw.HTTP || string(nw.Prefix) != "GET /i" || !errors.Is(err, ErrHTTPRequest) {
		t.Fatalf("HTTP request: %v", err)
	}

	// End of input.
	if _, err := ReadPreface(strings.NewReader("")); !errors.Is(err, io.EOF) {
		t.Fatalf("empty: %v", err)
	}
	if _, err := ReadPreface(bytes.NewReader(p[:9])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v", err)
	}
	boom := errors.New("boom")
	if _, err := ReadPreface(&testutil.ChunkReader{T: t, Chunks: []string{"\xF0W"}, Err: boom}); !errors.Is(err, boom) ||
		!strings.Contains(err.Error(), "reading preface") {
		t.Fatalf("read error: %v", err)
	}
	if _, err := ReadPreface(testutil.EmptyReader{}); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("no progress: %v", err)
	}
	// Data returned together with an error is used.
	if s, err := ReadPreface(&dataEOFReader{p}); err != nil || s != want {
		t.Fatalf("data with io.EOF: %+v %v", s, err)
	}
	if _, err := ReadPreface(iotest.TimeoutReader(iotest.OneByteReader(bytes.NewReader(p)))); !errors.Is(err, iotest.ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
}

// dataEOFReader returns its last bytes together with io.EOF.
type dataEOFReader struct{ b []byte }

func (r *dataEOFReader) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func TestReadPrefaceAllocs(t *testing.T) {
	p := AppendPreface(nil, Settings{MaxFrameSize: 1 << 20})
	r := bytes.NewReader(p)
	n := testing.AllocsPerRun(100, func() {
		r.Reset(p)
		if _, err := ReadPreface(r); err != nil {
			t.Fatal(err)
		}
	})
	if n > 1 { // the buffer escapes through io.Reader
		t.Fatalf("%v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, _, ok, _ := ParsePreface(p); !ok {
			t.Fatal("not ok")
		}
	}); n != 0 {
		t.Fatalf("ParsePreface: %v allocs", n)
	}
}

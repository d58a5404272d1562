package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Version is the protocol version this package speaks.
const Version = 1

// Magic starts every preface. Its first byte is not ASCII, so no text
// protocol (HTTP, SMTP, Redis...) starts the same way.
const Magic = "\xF0WRN"

// MaxPrefaceSize is the size of the largest valid preface: magic, version,
// count, and 16 settings of 6 bytes each.
const MaxPrefaceSize = 6 + maxSettings*6

const maxSettings = 16

// Setting defaults and bounds. Validate enforces the bounds.
const (
	DefaultMaxFrameSize   = 64 << 10
	DefaultMaxMessageSize = 4 << 20
	DefaultInitialWindow  = 1 << 20
	DefaultMaxStreams     = 1024

	minFrameSize        = 1 << 10  // smallest MaxFrameSize a side may advertise
	maxFrameSizeLimit   = 16 << 20 // largest MaxFrameSize a side may advertise
	maxMessageSizeLimit = 1 << 30  // largest MaxMessageSize a side may advertise
	minWindow           = 1 << 10  // smallest InitialWindow a side may advertise
	maxWindow           = 1<<31 - 1
	maxStreamsLimit     = 1<<31 - 1
)

// The bounds of Settings.ShmRing, when it is not 0.
const (
	minShmRing = 4 << 10
	maxShmRing = 64 << 20
)

// settingID identifies a setting in a preface.
type settingID uint16

// Setting ids. A receiver ignores ids it does not know.
const (
	settingMaxFrameSize   settingID = 1
	settingMaxMessageSize settingID = 2
	settingInitialWindow  settingID = 3
	settingMaxStreams     settingID = 4
	settingMaxFiles       settingID = 5
	settingShmRing        settingID = 6
)

// Settings are the limits one side of a connection advertises in its
// preface. Each describes what that side accepts; the other side must stay
// within them. A zero field means the default (see WithDefaults).
type Settings struct {
	MaxFrameSize   uint32 // largest frame payload this side accepts; default 65536, range [1024, 16 MiB]
	MaxMessageSize uint32 // largest message this side accepts; default 4 MiB, range [1, 1 GiB]
	InitialWindow  uint32 // per-stream and connection receive window in bytes; default 1 MiB, range [1024, 2^31-1]
	MaxStreams     uint32 // concurrent streams this side accepts; default 1024, range [1, 2^31-1]
	// MaxFiles is the most descriptors one DATA frame may carry to this
	// side (FlagFiles); default 0: none. Range [0, 255]. A side announces
	// it only on a unix socket that can receive them.
	MaxFiles uint32
	// ShmRing asks for the shared-memory rings of PROTOCOL.md ("Shared-memory
	// rings"): the bytes of each ring this side accepts; default 0: none.
	// Range 0 or [4 KiB, 64 MiB]. A side announces it only on a unix socket.
	ShmRing uint32
}

// defaultSettings returns the settings a side that advertises nothing has.
func defaultSettings() Settings {
	return Settings{
		MaxFrameSize:   DefaultMaxFrameSize,
		MaxMessageSize: DefaultMaxMessageSize,
		InitialWindow:  DefaultInitialWindow,
		MaxStreams:     DefaultMaxStreams,
	}
}

// WithDefaults returns s with every zero field set to its default.
func (s Settings) WithDefaults() Settings {
	d := defaultSettings()
	if s.MaxFrameSize == 0 {
		s.MaxFrameSize = d.MaxFrameSize
	}
	if s.MaxMessageSize == 0 {
		s.MaxMessageSize = d.MaxMessageSize
	}
	if s.InitialWindow == 0 {
		s.InitialWindow = d.InitialWindow
	}
	if s.MaxStreams == 0 {
		s.MaxStreams = d.MaxStreams
	}
	return s
}

// Validate returns a *SettingError naming the first field outside its range.
// A zero field is out of range: call WithDefaults first to fill them in.
func (s Settings) Validate() error {
	check := func(name string, v, lo, hi uint32) error {
		if v < lo || v > hi {
			return &SettingError{Setting: name, Value: v, Min: lo, Max: hi}
		}
		return nil
	}
	if err := check("MaxFrameSize", s.MaxFrameSize, minFrameSize, maxFrameSizeLimit); err != nil {
		return err
	}
	if err := check("MaxMessageSize", s.MaxMessageSize, 1, maxMessageSizeLimit); err != nil {
		return err
	}
	if err := check("InitialWindow", s.InitialWindow, minWindow, maxWindow); err != nil {
		return err
	}
	if err := check("MaxStreams", s.MaxStreams, 1, maxStreamsLimit); err != nil {
		return err
	}
	if err := check("MaxFiles", s.MaxFiles, 0, 255); err != nil {
		return err
	}
	if s.ShmRing != 0 {
		return check("ShmRing", s.ShmRing, minShmRing, maxShmRing)
	}
	return nil
}

// AppendPreface appends the preface advertising s to b. Zero fields and
// fields equal to their default are left out, so the preface of the default
// settings is 6 bytes. s should be valid (see Validate): the peer rejects a
// preface whose settings are out of range.
func AppendPreface(b []byte, s Settings) []byte {
	s = s.WithDefaults()
	d := defaultSettings()
	b = append(b, Magic...)
	b = append(b, Version, 0)
	countAt := len(b) - 1
	put := func(id settingID, v, def uint32) {
		if v != def {
			b = binary.BigEndian.AppendUint16(b, uint16(id))
			b = binary.BigEndian.AppendUint32(b, v)
			b[countAt]++
		}
	}
	put(settingMaxFrameSize, s.MaxFrameSize, d.MaxFrameSize)
	put(settingMaxMessageSize, s.MaxMessageSize, d.MaxMessageSize)
	put(settingInitialWindow, s.InitialWindow, d.InitialWindow)
	put(settingMaxStreams, s.MaxStreams, d.MaxStreams)
	put(settingMaxFiles, s.MaxFiles, 0)
	put(settingShmRing, s.ShmRing, 0)
	return b
}

// ParsePreface decodes a preface from the start of b and returns the settings
// it advertises, with defaults for those it leaves out, and its size n.
//
// ok is false when b does not yet hold the whole preface ("need more bytes").
// ParsePreface fails as soon as the bytes available prove they are not a
// warren preface, with a *NotWarrenError (errors.Is ErrNotWarren). The one
// exception: while fewer than 4 bytes are available and they could still be
// the start of an HTTP request, it asks for more, so that a request is
// reliably reported as ErrHTTPRequest as well (see looksLikeHTTP).
//
// A version other than Version gives an error matching ErrVersion, more than
// 16 settings one matching ErrBadPreface, and a setting out of range a
// *SettingError. Unknown setting ids are ignored; when an id repeats, the
// last value wins.
func ParsePreface(b []byte) (s Settings, n int, ok bool, err error) {
	m := min(len(b), len(Magic))
	if string(b[:m]) != Magic[:m] {
		if m < 4 && httpPrefix(b) {
			return Settings{}, 0, false, nil
		}
		return Settings{}, 0, false, &NotWarrenError{HTTP: looksLikeHTTP(b), Prefix: bytes.Clone(b[:min(len(b), 6)])}
	}
	if len(b) > 4 && b[4] != Version {
		return Settings{}, 0, false, fmt.Errorf("%w %d (this side speaks %d)", ErrVersion, b[4], Version)
	}
	if len(b) < 6 {
		return Settings{}, 0, false, nil
	}
	count := int(b[5])
	if count > maxSettings {
		return Settings{}, 0, false, fmt.Errorf("%w: %d settings, at most %d allowed", ErrBadPreface, count, maxSettings)
	}
	n = 6 + count*6
	if len(b) < n {
		return Settings{}, 0, false, nil
	}
	s = defaultSettings()
	for p := b[6:n]; len(p) >= 6; p = p[6:] {
		v := binary.BigEndian.Uint32(p[2:])
		switch settingID(binary.BigEndian.Uint16(p)) {
		case settingMaxFrameSize:
			s.MaxFrameSize = v
		case settingMaxMessageSize:
			s.MaxMessageSize = v
		case settingInitialWindow:
			s.InitialWindow = v
		case settingMaxStreams:
			s.MaxStreams = v
		case settingMaxFiles:
			s.MaxFiles = v
		case settingShmRing:
			s.ShmRing = v
		}
	}
	if err := s.Validate(); err != nil {
		return Settings{}, 0, false, err
	}
	return s, n, true, nil
}

// httpMethods are the first 4 bytes of HTTP/1.x request lines (and of the
// HTTP/2 connection preface).
var httpMethods = [...]string{"GET ", "POST", "PUT ", "HEAD", "DELE", "OPTI", "PATC", "CONN", "TRAC", "PRI "}

// looksLikeHTTP reports whether b starts like an HTTP/1.x request: its first
// 4 bytes are those of a request method. It needs at least 4 bytes and
// returns false for fewer.
func looksLikeHTTP(b []byte) bool {
	if len(b) < 4 {
		return false
	}
	for _, m := range httpMethods {
		if string(b[:4]) == m {
			return true
		}
	}
	return false
}

// httpPrefix reports whether b (fewer than 4 bytes) could be the start of an
// HTTP request.
func httpPrefix(b []byte) bool {
	for _, m := range httpMethods {
		if len(b) <= len(m) && string(b) == m[:len(b)] {
			return true
		}
	}
	return false
}

// ReadPreface reads the peer's preface from r and returns the settings it
// advertises. It reads exactly the preface and nothing after it, so r can be
// an unbuffered connection handed to a Reader afterwards. It fails as soon as
// the first bytes are wrong, without waiting for more, with the errors of
// ParsePreface; on a *NotWarrenError, Prefix holds every byte consumed.
// A peer that closes before sending anything gives io.EOF, one that closes
// part way io.ErrUnexpectedEOF, both wrapped.
//
// Set a deadline on the connection first: a peer may send nothing at all.
func ReadPreface(r io.Reader) (Settings, error) {
	var buf [MaxPrefaceSize]byte
	n, want := 0, 6 // a preface is at least 6 bytes: never read past it
	for zero := 0; ; {
		k, err := r.Read(buf[n:want])
		n += k
		if k > 0 {
			zero = 0
			s, _, ok, perr := ParsePreface(buf[:n])
			if perr != nil {
				return Settings{}, perr
			}
			if ok {
				return s, nil
			}
			if n >= 6 {
				want = 6 + int(buf[5])*6 // ParsePreface checked the count
			}
		}
		if err != nil {
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Settings{}, fmt.Errorf("warren: reading preface: %w", err)
		}
		if k == 0 {
			if zero++; zero >= 100 {
				return Settings{}, fmt.Errorf("warren: reading preface: %w", io.ErrNoProgress)
			}
		}
	}
}

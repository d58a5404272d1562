package wire

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/warrenipc/warren/internal/statusmsg"
)

// Payload encodings. Variable-length integers are unsigned varints
// (encoding/binary Uvarint). Decoders check every length against the bytes
// that remain before slicing, and return slices that alias their input.

// CallHeader is the decoded payload of a client's HEADERS frame, which opens
// a call. Method and Metadata alias the payload.
type CallHeader struct {
	Method   []byte
	Codec    uint8
	Timeout  time.Duration // 0 means no deadline
	Metadata []byte        // raw metadata block, validated; see RangeMetadata
}

// AppendCallHeader appends the payload of a call's HEADERS frame to b:
// method, codec, timeout and metadata. The timeout is rounded up to whole
// microseconds; zero or negative means none. md holds flattened key, value
// pairs. The method must not be empty: ParseCallHeader rejects that.
func AppendCallHeader(b []byte, method string, codec uint8, timeout time.Duration, md []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(method)))
	b = append(b, method...)
	b = append(b, codec)
	var us uint64
	if timeout > 0 {
		us = uint64(timeout / time.Microsecond)
		if timeout%time.Microsecond != 0 {
			us++
		}
	}
	b = binary.AppendUvarint(b, us)
	return AppendMetadata(b, md)
}

// ParseCallHeader decodes the payload of a client's HEADERS frame. The
// metadata block is validated but not decoded. It returns a *PayloadError
// when p is malformed or the method is empty.
func ParseCallHeader(p []byte) (CallHeader, error) {
	var h CallHeader
	method, p, ok := readBytes(p)
	if !ok {
		return h, payloadErr(TypeHeaders, "truncated method")
	}
	if len(method) == 0 {
		return h, payloadErr(TypeHeaders, "empty method")
	}
	if len(p) == 0 {
		return h, payloadErr(TypeHeaders, "missing codec")
	}
	h.Method, h.Codec = method, p[0]
	us, p, ok := readUvarint(p[1:])
	if !ok {
		return CallHeader{}, payloadErr(TypeHeaders, "truncated timeout")
	}
	if us > math.MaxInt64/uint64(time.Microsecond) {
		h.Timeout = math.MaxInt64 // later than any deadline worth keeping
	} else {
		h.Timeout = time.Duration(us) * time.Microsecond
	}
	if reason := checkMetadata(p); reason != "" {
		return CallHeader{}, payloadErr(TypeHeaders, reason)
	}
	h.Metadata = p
	return h, nil
}

// AppendMetadata appends a metadata block holding md, flattened key, value
// pairs, to b. An empty md appends nothing: an empty block means no metadata.
// It panics if len(md) is odd.
func AppendMetadata(b []byte, md []string) []byte {
	if len(md)%2 != 0 {
		panic("wire: metadata must be key, value pairs")
	}
	if len(md) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(md)/2))
	for _, s := range md {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// RangeMetadata calls fn for each key, value pair of a metadata block, in
// order, until fn returns false. It validates the whole block before the
// first call, so fn never sees part of a malformed block. k and v alias
// block.
func RangeMetadata(block []byte, fn func(k, v []byte) bool) error {
	if reason := checkMetadata(block); reason != "" {
		return payloadErr(0, reason)
	}
	if len(block) == 0 {
		return nil
	}
	n, p, _ := readUvarint(block)
	for ; n > 0; n-- {
		var k, v []byte
		k, p, _ = readBytes(p)
		v, p, _ = readBytes(p)
		if !fn(k, v) {
			break
		}
	}
	return nil
}

// ParseMetadata decodes a metadata block and appends its keys and values,
// flattened, to dst.
func ParseMetadata(block []byte, dst []string) ([]string, error) {
	err := RangeMetadata(block, func(k, v []byte) bool {
		dst = append(dst, string(k), string(v))
		return true
	})
	return dst, err
}

// checkMetadata validates a metadata block: the count, then that many
// length-prefixed keys and values, and nothing after. It returns the reason
// the block is malformed, or "".
func checkMetadata(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	n, p, ok := readUvarint(p)
	if !ok {
		return "metadata block: truncated count"
	}
	if n > uint64(len(p))/2 { // each pair takes at least 2 bytes
		return "metadata block: count exceeds the bytes present"
	}
	for ; n > 0; n-- {
		if _, p, ok = readBytes(p); !ok {
			return "metadata block: truncated key"
		}
		if _, p, ok = readBytes(p); !ok {
			return "metadata block: truncated value"
		}
	}
	if len(p) != 0 {
		return "metadata block: trailing bytes"
	}
	return ""
}

// Trailer is the decoded payload of a TRAILERS frame: the final status of a
// call. Message, Details and Metadata alias the payload.
type Trailer struct {
	Code     uint32 // status code; 0 is OK
	Message  []byte
	Details  []byte // raw details block, validated; see ParseDetails
	Metadata []byte // raw metadata block, validated; see RangeMetadata
}

// AppendTrailer appends a TRAILERS payload to b. Trailing empty parts are
// left out, so an OK status with no message, details or metadata appends
// nothing. A message over 1 KiB is cut to 1 KiB, ending with
// "... (truncated)".
func AppendTrailer(b []byte, code uint32, msg string, details [][]byte, md []string) []byte {
	if code == 0 && msg == "" && len(details) == 0 && len(md) == 0 {
		return b
	}
	msg = statusmsg.Bound(msg)
	b = binary.AppendUvarint(b, uint64(code))
	b = binary.AppendUvarint(b, uint64(len(msg)))
	b = append(b, msg...)
	if len(details) == 0 && len(md) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, uint64(len(details)))
	for _, d := range details {
		b = binary.AppendUvarint(b, uint64(len(d)))
		b = append(b, d...)
	}
	return AppendMetadata(b, md)
}

// ParseTrailer decodes a TRAILERS payload. An empty payload is code 0 (OK)
// with nothing else. It returns a *PayloadError when p is malformed.
func ParseTrailer(p []byte) (Trailer, error) {
	var t Trailer
	if len(p) == 0 {
		return t, nil
	}
	code, p, ok := readUvarint(p)
	if !ok {
		return t, payloadErr(TypeTrailers, "truncated code")
	}
	if code > math.MaxUint32 {
		return t, payloadErr(TypeTrailers, "code out of range")
	}
	t.Code = uint32(code)
	if t.Message, p, ok = readBytes(p); !ok {
		return Trailer{}, payloadErr(TypeTrailers, "truncated message")
	}
	if len(p) == 0 {
		return t, nil
	}
	rest, reason := skipDetails(p)
	if reason != "" {
		return Trailer{}, payloadErr(TypeTrailers, reason)
	}
	t.Details = p[:len(p)-len(rest)]
	if reason := checkMetadata(rest); reason != "" {
		return Trailer{}, payloadErr(TypeTrailers, reason)
	}
	t.Metadata = rest
	return t, nil
}

// ParseDetails decodes a details block into its entries, which alias block.
// It allocates the returned slice.
func ParseDetails(block []byte) ([][]byte, error) {
	if len(block) == 0 {
		return nil, nil
	}
	rest, reason := skipDetails(block)
	if reason == "" && len(rest) != 0 {
		reason = "details block: trailing bytes"
	}
	if reason != "" {
		return nil, payloadErr(0, reason)
	}
	n, p, _ := readUvarint(block)
	out := make([][]byte, 0, n)
	for ; n > 0; n-- {
		var d []byte
		d, p, _ = readBytes(p)
		out = append(out, d)
	}
	return out, nil
}

// skipDetails validates the details block at the start of p and returns what
// follows it, or the reason it is malformed.
func skipDetails(p []byte) (rest []byte, reason string) {
	n, p, ok := readUvarint(p)
	if !ok {
		return nil, "details block: truncated count"
	}
	if n > uint64(len(p)) { // each entry takes at least 1 byte
		return nil, "details block: count exceeds the bytes present"
	}
	for ; n > 0; n-- {
		if _, p, ok = readBytes(p); !ok {
			return nil, "details block: truncated entry"
		}
	}
	return p, ""
}

// AppendWindow appends a WINDOW payload granting incr bytes of credit.
func AppendWindow(b []byte, incr uint32) []byte {
	return binary.BigEndian.AppendUint32(b, incr)
}

// ParseWindow decodes a WINDOW payload. The increment must be in
// [1, maxWindow].
func ParseWindow(p []byte) (uint32, error) {
	if len(p) != 4 {
		return 0, payloadErr(TypeWindow, "length is not 4")
	}
	incr := binary.BigEndian.Uint32(p)
	if incr == 0 {
		return 0, payloadErr(TypeWindow, "zero increment")
	}
	if incr > maxWindow {
		return 0, payloadErr(TypeWindow, "increment over 2^31-1")
	}
	return incr, nil
}

// AppendGoAway appends a GOAWAY payload: the highest stream id the sender
// will process, a status code and a message for people.
func AppendGoAway(b []byte, last uint32, code uint32, msg string) []byte {
	b = binary.BigEndian.AppendUint32(b, last)
	b = binary.AppendUvarint(b, uint64(code))
	return append(b, msg...)
}

// ParseGoAway decodes a GOAWAY payload; msg aliases p.
func ParseGoAway(p []byte) (last, code uint32, msg []byte, err error) {
	if len(p) < 4 {
		return 0, 0, nil, payloadErr(TypeGoAway, "shorter than 4 bytes")
	}
	last = binary.BigEndian.Uint32(p)
	c, p, ok := readUvarint(p[4:])
	if !ok {
		return 0, 0, nil, payloadErr(TypeGoAway, "truncated code")
	}
	if c > math.MaxUint32 {
		return 0, 0, nil, payloadErr(TypeGoAway, "code out of range")
	}
	return last, uint32(c), p, nil
}

// readUvarint decodes a uvarint from the start of p and returns it with the
// rest of p; ok is false when p is truncated or the value overflows 64 bits.
func readUvarint(p []byte) (v uint64, rest []byte, ok bool) {
	if len(p) > 0 && p[0] < 0x80 { // one byte: most lengths and counts
		return uint64(p[0]), p[1:], true
	}
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, p, false
	}
	return v, p[n:], true
}

// readBytes decodes a uvarint length and that many bytes from the start of p.
func readBytes(p []byte) (b, rest []byte, ok bool) {
	n, p, ok := readUvarint(p)
	if !ok || n > uint64(len(p)) {
		return nil, p, false
	}
	return p[:n:n], p[n:], true
}

// payloadErr returns a *PayloadError.
func payloadErr(t Type, reason string) error {
	return &PayloadError{Type: t, Reason: reason}
}

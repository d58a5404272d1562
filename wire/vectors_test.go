package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite ../testdata/vectors.json from the table in vectors_test.go")

const vectorsPath = "../testdata/vectors.json"

// vector is one entry of testdata/vectors.json. Hex and Fields are written
// by hand below, independently of the encoders: the test decodes Hex and
// compares with Fields, and encodes Fields and compares with Hex.
type vector struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	Hex  string `json:"hex"`
	// Fields holds the decoded values; {} for an invalid vector.
	Fields any `json:"fields"`
	// Error is "" for a valid vector, else the class of the error.
	Error string `json:"error"`
	// NonCanonical marks a valid vector that a decoder accepts but an
	// encoder never produces (unknown settings, a default sent explicitly,
	// an explicit empty block), so it is not re-encoded.
	NonCanonical bool `json:"noncanonical,omitempty"`
	// Status, on a callheader vector that decodes, is the code a callee
	// answers it with whatever methods it serves: 3 for a method name not
	// of the form Service.Method.
	Status int `json:"status,omitempty"`
}

type frameFields struct {
	Length  uint32 `json:"length"`
	Stream  uint32 `json:"stream"`
	Type    string `json:"type"`
	TypeID  uint8  `json:"type_id"`
	Flags   uint8  `json:"flags"`
	Payload string `json:"payload"` // hex
}

type prefaceFields struct {
	Version        uint8  `json:"version"`
	MaxFrameSize   uint32 `json:"max_frame_size"`
	MaxMessageSize uint32 `json:"max_message_size"`
	InitialWindow  uint32 `json:"initial_window"`
	MaxStreams     uint32 `json:"max_streams"`
	Size           int    `json:"size"` // bytes consumed
}

type callHeaderFields struct {
	Method    string      `json:"method"`
	Codec     uint8       `json:"codec"`
	TimeoutUS int64       `json:"timeout_us"`
	Metadata  [][2]string `json:"metadata"`
}

type trailerFields struct {
	Code     uint32      `json:"code"`
	Message  string      `json:"message"`
	Details  []string    `json:"details"` // hex
	Metadata [][2]string `json:"metadata"`
}

type metadataFields struct {
	Metadata [][2]string `json:"metadata"`
}

type windowFields struct {
	Increment uint32 `json:"increment"`
}

type goAwayFields struct {
	LastStream uint32 `json:"last_stream"`
	Code       uint32 `json:"code"`
	Message    string `json:"message"`
}

type messageFields struct {
	Stream   uint32 `json:"stream"`
	Type     string `json:"type"`
	Flags    uint8  `json:"flags"`     // flags of the last frame (as passed to the encoder)
	MaxFrame uint32 `json:"max_frame"` // the encoder's frame payload limit
	Frames   int    `json:"frames"`
	Message  string `json:"message"` // hex
}

type noFields struct{}

// x returns the hex encoding of s, to write text payloads readably.
func x(s string) string { return hex.EncodeToString([]byte(s)) }

// cat concatenates hex strings.
func cat(parts ...string) string { return strings.Join(parts, "") }

func md(kv ...string) [][2]string {
	var out [][2]string
	for i := 0; i < len(kv); i += 2 {
		out = append(out, [2]string{kv[i], kv[i+1]})
	}
	return out
}

var none = noFields{}

// vectors is the source of testdata/vectors.json. Every decoder in the
// package runs with the default settings (MaxFrameSize 65536,
// MaxMessageSize 4 MiB).
var vectors = []vector{
	// Frames: header (length | stream | type | flags) and raw payload.
	{Name: "headers frame: call header", Kind: "frame",
		Hex:    cat("0000000b", "00000001", "01", "00", "08", x("Echo.Say"), "00", "00"),
		Fields: frameFields{Length: 11, Stream: 1, Type: "HEADERS", TypeID: 1, Payload: cat("08", x("Echo.Say"), "00", "00")}},
	{Name: "headers frame: empty reply metadata", Kind: "frame",
		Hex:    cat("00000000", "00000001", "01", "00"),
		Fields: frameFields{Stream: 1, Type: "HEADERS", TypeID: 1, Payload: ""}},
	{Name: "data frame with FlagFiles: a shared message of 16 MiB in a memfd", Kind: "frame",
		Hex:    cat("0000000a", "00000001", "02", "0a", "01", "01", "0000000001000000"),
		Fields: frameFields{Length: 10, Stream: 1, Type: "DATA", TypeID: 2, Flags: 0x0a, Payload: cat("01", "01", "0000000001000000")}},
	{Name: "data frame with FlagFiles: two files and a message", Kind: "frame",
		Hex:    cat("00000004", "00000003", "02", "08", "02", "00", x("hi")),
		Fields: frameFields{Length: 4, Stream: 3, Type: "DATA", TypeID: 2, Flags: 0x08, Payload: cat("02", "00", x("hi"))}},
	{Name: "data frame with FlagEnd", Kind: "frame",
		Hex:    cat("00000005", "00000001", "02", "02", x("hello")),
		Fields: frameFields{Length: 5, Stream: 1, Type: "DATA", TypeID: 2, Flags: 2, Payload: x("hello")}},
	{Name: "empty data frame half-closing stream 3", Kind: "frame",
		Hex:    cat("00000000", "00000003", "02", "02"),
		Fields: frameFields{Stream: 3, Type: "DATA", TypeID: 2, Flags: 2, Payload: ""}},
	{Name: "data frame with FlagMore: first chunk with total length", Kind: "frame",
		Hex:    cat("00000008", "00000001", "02", "01", "00000010", x("abcd")),
		Fields: frameFields{Length: 8, Stream: 1, Type: "DATA", TypeID: 2, Flags: 1, Payload: cat("00000010", x("abcd"))}},
	{Name: "data frame on a server-initiated stream", Kind: "frame",
		Hex:    cat("00000001", "00000002", "02", "00", "ff"),
		Fields: frameFields{Length: 1, Stream: 2, Type: "DATA", TypeID: 2, Payload: "ff"}},
	{Name: "data frame with reserved flag bits (ignored)", Kind: "frame",
		Hex:    cat("00000001", "00000001", "02", "f2", "00"),
		Fields: frameFields{Length: 1, Stream: 1, Type: "DATA", TypeID: 2, Flags: 0xf2, Payload: "00"}},
	{Name: "trailers frame: OK, empty payload", Kind: "frame",
		Hex:    cat("00000000", "00000001", "03", "02"),
		Fields: frameFields{Stream: 1, Type: "TRAILERS", TypeID: 3, Flags: 2, Payload: ""}},
	{Name: "trailers frame: NotFound", Kind: "frame",
		Hex:    cat("00000004", "00000001", "03", "02", "05", "02", x("no")),
		Fields: frameFields{Length: 4, Stream: 1, Type: "TRAILERS", TypeID: 3, Flags: 2, Payload: cat("05", "02", x("no"))}},
	{Name: "cancel frame", Kind: "frame",
		Hex:    cat("00000000", "00000005", "04", "00"),
		Fields: frameFields{Stream: 5, Type: "CANCEL", TypeID: 4, Payload: ""}},
	{Name: "window frame for stream 1", Kind: "frame",
		Hex:    cat("00000004", "00000001", "05", "00", "00010000"),
		Fields: frameFields{Length: 4, Stream: 1, Type: "WINDOW", TypeID: 5, Payload: "00010000"}},
	{Name: "window frame for the connection", Kind: "frame",
		Hex:    cat("00000004", "00000000", "05", "00", "00100000"),
		Fields: frameFields{Length: 4, Type: "WINDOW", TypeID: 5, Payload: "00100000"}},
	{Name: "ping frame", Kind: "frame",
		Hex:    cat("00000008", "00000000", "06", "00", "0102030405060708"),
		Fields: frameFields{Length: 8, Type: "PING", TypeID: 6, Payload: "0102030405060708"}},
	{Name: "ping reply with FlagAck", Kind: "frame",
		Hex:    cat("00000008", "00000000", "06", "04", "0102030405060708"),
		Fields: frameFields{Length: 8, Type: "PING", TypeID: 6, Flags: 4, Payload: "0102030405060708"}},
	{Name: "goaway frame", Kind: "frame",
		Hex:    cat("00000008", "00000000", "07", "00", "00000007", "00", x("bye")),
		Fields: frameFields{Length: 8, Type: "GOAWAY", TypeID: 7, Payload: cat("00000007", "00", x("bye"))}},
	{Name: "oversized frame: payload over MaxFrameSize", Kind: "frame",
		Hex: cat("00010001", "00000001", "02", "00"), Fields: none, Error: "frame_too_large"},
	{Name: "unknown frame type 0x09", Kind: "frame",
		Hex: cat("00000000", "00000001", "09", "00"), Fields: none, Error: "bad_frame"},
	{Name: "frame type 0", Kind: "frame",
		Hex: cat("00000000", "00000001", "00", "00"), Fields: none, Error: "bad_frame"},
	{Name: "data frame on stream 0", Kind: "frame",
		Hex: cat("00000001", "00000000", "02", "00", "ff"), Fields: none, Error: "bad_frame"},
	{Name: "ping frame on a stream", Kind: "frame",
		Hex: cat("00000008", "00000001", "06", "00", "0102030405060708"), Fields: none, Error: "bad_frame"},
	{Name: "ping frame with 4 bytes", Kind: "frame",
		Hex: cat("00000004", "00000000", "06", "00", "01020304"), Fields: none, Error: "bad_frame"},
	{Name: "window frame with 3 bytes", Kind: "frame",
		Hex: cat("00000003", "00000001", "05", "00", "000001"), Fields: none, Error: "bad_frame"},
	{Name: "goaway frame on a stream", Kind: "frame",
		Hex: cat("00000005", "00000001", "07", "00", "00000000", "00"), Fields: none, Error: "bad_frame"},
	{Name: "headers frame with FlagMore (only DATA is chunked)", Kind: "frame",
		Hex: cat("00000001", "00000001", "01", "01", "00"), Fields: none, Error: "bad_frame"},
	{Name: "trailers frame with FlagMore", Kind: "frame",
		Hex: cat("00000000", "00000001", "03", "03"), Fields: none, Error: "bad_frame"},
	{Name: "truncated header", Kind: "frame",
		Hex: cat("00000005", "0000"), Fields: none, Error: "incomplete"},
	{Name: "payload length past the end", Kind: "frame",
		Hex: cat("00000005", "00000001", "02", "00", x("hi")), Fields: none, Error: "incomplete"},

	// Prefaces: magic | version | count | count x (id u16, value u32).
	{Name: "default preface", Kind: "preface",
		Hex:    cat("f057524e", "01", "00"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 6}},
	{Name: "custom preface: every setting", Kind: "preface",
		Hex:    cat("f057524e", "01", "04", "0001", "00004000", "0002", "01000000", "0003", "00400000", "0004", "00000064"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 16384, MaxMessageSize: 16 << 20, InitialWindow: 4 << 20, MaxStreams: 100, Size: 30}},
	{Name: "custom preface: one setting, others default", Kind: "preface",
		Hex:    cat("f057524e", "01", "01", "0001", "00100000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 1 << 20, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 12}},
	{Name: "custom preface: limits at their bounds", Kind: "preface",
		Hex:    cat("f057524e", "01", "04", "0001", "00000400", "0002", "40000000", "0003", "7fffffff", "0004", "00000001"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 1024, MaxMessageSize: 1 << 30, InitialWindow: 1<<31 - 1, MaxStreams: 1, Size: 30}},
	{Name: "preface followed by a frame (only the preface is consumed)", Kind: "preface",
		Hex:    cat("f057524e", "01", "00", "00000008", "00000000", "06", "00", "0102030405060708"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 6}, NonCanonical: true},
	{Name: "preface with an unknown setting (ignored)", Kind: "preface",
		Hex:    cat("f057524e", "01", "02", "0063", "deadbeef", "0001", "00008000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 32768, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 18}, NonCanonical: true},
	{Name: "preface announcing MaxFiles 16 (ignored by a peer that passes no descriptors)", Kind: "preface",
		Hex:    cat("f057524e", "01", "01", "0005", "00000010"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 12}, NonCanonical: true},
	{Name: "preface asking for shared-memory rings of 256 KiB (ignored by a peer without them)", Kind: "preface",
		Hex:    cat("f057524e", "01", "01", "0006", "00040000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 12}, NonCanonical: true},
	{Name: "preface with a repeated setting (last wins)", Kind: "preface",
		Hex:    cat("f057524e", "01", "02", "0001", "00001000", "0001", "00002000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 8192, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 18}, NonCanonical: true},
	{Name: "preface with a setting out of range, then repeated in range (last wins)", Kind: "preface",
		Hex:    cat("f057524e", "01", "02", "0001", "00000000", "0001", "00008000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 32768, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 18}, NonCanonical: true},
	{Name: "preface with a setting in range, then repeated out of range", Kind: "preface",
		Hex: cat("f057524e", "01", "02", "0001", "00008000", "0001", "00000000"), Fields: none, Error: "bad_setting"},
	{Name: "preface sending a default explicitly", Kind: "preface",
		Hex:    cat("f057524e", "01", "01", "0001", "00010000"),
		Fields: prefaceFields{Version: 1, MaxFrameSize: 65536, MaxMessageSize: 4 << 20, InitialWindow: 1 << 20, MaxStreams: 1024, Size: 12}, NonCanonical: true},
	{Name: "HTTP GET request", Kind: "preface",
		Hex: x("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Fields: none, Error: "http_request"},
	{Name: "HTTP POST request (Connect)", Kind: "preface",
		Hex: x("POST /Counter/Inc HTTP/1.1\r\n"), Fields: none, Error: "http_request"},
	{Name: "HTTP/2 connection preface", Kind: "preface",
		Hex: x("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Fields: none, Error: "http_request"},
	{Name: "first 4 bytes of an HTTP request", Kind: "preface",
		Hex: x("HEAD"), Fields: none, Error: "http_request"},
	{Name: "first 2 bytes of an HTTP request: wait for 4", Kind: "preface",
		Hex: x("GE"), Fields: none, Error: "incomplete"},
	{Name: "TLS ClientHello", Kind: "preface",
		Hex: cat("160301020001"), Fields: none, Error: "not_warren"},
	{Name: "one wrong byte is enough", Kind: "preface",
		Hex: "00", Fields: none, Error: "not_warren"},
	{Name: "text that is not HTTP", Kind: "preface",
		Hex: x("SSH-2.0-OpenSSH\r\n"), Fields: none, Error: "not_warren"},
	{Name: "magic with a wrong last byte", Kind: "preface",
		Hex: cat("f057524f", "01", "00"), Fields: none, Error: "not_warren"},
	{Name: "unsupported version 2", Kind: "preface",
		Hex: cat("f057524e", "02", "00"), Fields: none, Error: "bad_version"},
	{Name: "version 0", Kind: "preface",
		Hex: cat("f057524e", "00"), Fields: none, Error: "bad_version"},
	{Name: "17 settings", Kind: "preface",
		Hex: cat("f057524e", "01", "11"), Fields: none, Error: "bad_preface"},
	{Name: "MaxFrameSize below 1024", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0001", "00000100"), Fields: none, Error: "bad_setting"},
	{Name: "MaxFrameSize above 16 MiB", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0001", "01000001"), Fields: none, Error: "bad_setting"},
	{Name: "MaxMessageSize 0", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0002", "00000000"), Fields: none, Error: "bad_setting"},
	{Name: "MaxMessageSize above 1 GiB", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0002", "40000001"), Fields: none, Error: "bad_setting"},
	{Name: "InitialWindow above 2^31-1", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0003", "80000000"), Fields: none, Error: "bad_setting"},
	{Name: "MaxStreams 0", Kind: "preface",
		Hex: cat("f057524e", "01", "01", "0004", "00000000"), Fields: none, Error: "bad_setting"},
	{Name: "magic only", Kind: "preface",
		Hex: "f057524e", Fields: none, Error: "incomplete"},
	{Name: "truncated setting", Kind: "preface",
		Hex: cat("f057524e", "01", "02", "0001", "00008000", "0002"), Fields: none, Error: "incomplete"},

	// Call headers: uvarint len | method | codec | uvarint timeout_us | metadata block.
	{Name: "call header: no timeout, no metadata", Kind: "callheader",
		Hex:    cat("08", x("Echo.Say"), "00", "00"),
		Fields: callHeaderFields{Method: "Echo.Say", Codec: 0}},
	{Name: "call header: JSON, 1.5 s timeout, metadata", Kind: "callheader",
		Hex: cat("0b", x("Counter.Inc"), "01", "e0c65b",
			"02", "08", x("trace-id"), "03", x("abc"), "06", x("tenant"), "02", x("t1")),
		Fields: callHeaderFields{Method: "Counter.Inc", Codec: 1, TimeoutUS: 1500000, Metadata: md("trace-id", "abc", "tenant", "t1")}},
	{Name: "call header: protobuf, 1 us timeout, empty value", Kind: "callheader",
		Hex:    cat("03", x("S.m"), "02", "01", "01", "01", x("k"), "00"),
		Fields: callHeaderFields{Method: "S.m", Codec: 2, TimeoutUS: 1, Metadata: md("k", "")}},
	{Name: "call header: package-qualified method", Kind: "callheader",
		Hex:    cat("12", x("pkg.v1.Counter.Inc"), "01", "00"),
		Fields: callHeaderFields{Method: "pkg.v1.Counter.Inc", Codec: 1}},
	{Name: "call header: explicit empty metadata block", Kind: "callheader",
		Hex:    cat("03", x("S.m"), "00", "00", "00"),
		Fields: callHeaderFields{Method: "S.m"}, NonCanonical: true},
	// Well encoded, but not a method name: answered with code 3, not 12.
	{Name: "call header: method name without a dot", Kind: "callheader",
		Hex:    cat("04", x("Nope"), "01", "00"),
		Fields: callHeaderFields{Method: "Nope", Codec: 1}, Status: 3},
	{Name: "call header: method name as an HTTP path", Kind: "callheader",
		Hex:    cat("0c", x("/Counter/Get"), "01", "00"),
		Fields: callHeaderFields{Method: "/Counter/Get", Codec: 1}, Status: 3},
	{Name: "call header: method name with an empty service", Kind: "callheader",
		Hex:    cat("04", x(".Get"), "01", "00"),
		Fields: callHeaderFields{Method: ".Get", Codec: 1}, Status: 3},
	{Name: "call header: method name with an empty method", Kind: "callheader",
		Hex:    cat("08", x("Counter."), "01", "00"),
		Fields: callHeaderFields{Method: "Counter.", Codec: 1}, Status: 3},
	{Name: "call header: method name with a space", Kind: "callheader",
		Hex:    cat("0c", x("Counter.G et"), "01", "00"),
		Fields: callHeaderFields{Method: "Counter.G et", Codec: 1}, Status: 3},
	{Name: "call header: truncated method length varint", Kind: "callheader",
		Hex: "80", Fields: none, Error: "bad_payload"},
	{Name: "call header: method length past the end", Kind: "callheader",
		Hex: cat("0a", x("/A")), Fields: none, Error: "bad_payload"},
	{Name: "call header: empty method", Kind: "callheader",
		Hex: cat("00", "00", "00"), Fields: none, Error: "bad_payload"},
	{Name: "call header: missing codec", Kind: "callheader",
		Hex: cat("03", x("S.m")), Fields: none, Error: "bad_payload"},
	{Name: "call header: truncated timeout varint", Kind: "callheader",
		Hex: cat("03", x("S.m"), "00", "ff"), Fields: none, Error: "bad_payload"},
	{Name: "call header: metadata count past the end", Kind: "callheader",
		Hex: cat("03", x("S.m"), "00", "00", "05", "01", x("a"), "01", x("b")), Fields: none, Error: "bad_payload"},
	{Name: "call header: metadata value length past the end", Kind: "callheader",
		Hex: cat("03", x("S.m"), "00", "00", "01", "01", x("a"), "09", x("b")), Fields: none, Error: "bad_payload"},
	{Name: "call header: bytes after the metadata block", Kind: "callheader",
		Hex: cat("03", x("S.m"), "00", "00", "01", "01", x("a"), "01", x("b"), "ff"), Fields: none, Error: "bad_payload"},

	// Trailers: uvarint code | uvarint len | message | details block | metadata block.
	{Name: "trailer: OK is an empty payload", Kind: "trailer",
		Hex: "", Fields: trailerFields{}},
	{Name: "trailer: NotFound with a message", Kind: "trailer",
		Hex:    cat("05", "0f", x("no such counter")),
		Fields: trailerFields{Code: 5, Message: "no such counter"}},
	{Name: "trailer: NotFound without a message", Kind: "trailer",
		Hex: "0500", Fields: trailerFields{Code: 5}},
	{Name: "trailer: OK written with an empty message", Kind: "trailer",
		Hex: "0000", Fields: trailerFields{}, NonCanonical: true},
	{Name: "trailer: details and metadata", Kind: "trailer",
		Hex:    cat("03", "08", x("bad name"), "02", "02", "0a0b", "00", "01", "05", x("retry"), "02", x("no")),
		Fields: trailerFields{Code: 3, Message: "bad name", Details: []string{"0a0b", ""}, Metadata: md("retry", "no")}},
	{Name: "trailer: OK with metadata only", Kind: "trailer",
		Hex:    cat("00", "00", "00", "01", "01", x("k"), "01", x("v")),
		Fields: trailerFields{Metadata: md("k", "v")}},
	{Name: "trailer: details, no metadata", Kind: "trailer",
		Hex:    cat("0d", "00", "01", "03", "010203"),
		Fields: trailerFields{Code: 13, Details: []string{"010203"}}},
	{Name: "trailer: truncated code varint", Kind: "trailer",
		Hex: "80", Fields: none, Error: "bad_payload"},
	{Name: "trailer: code over 32 bits", Kind: "trailer",
		Hex: cat("8080808010", "00"), Fields: none, Error: "bad_payload"},
	{Name: "trailer: missing message length", Kind: "trailer",
		Hex: "05", Fields: none, Error: "bad_payload"},
	{Name: "trailer: message length past the end", Kind: "trailer",
		Hex: cat("05", "10", x("A")), Fields: none, Error: "bad_payload"},
	{Name: "trailer: details count past the end", Kind: "trailer",
		Hex: cat("05", "00", "05", "01", x("A")), Fields: none, Error: "bad_payload"},
	{Name: "trailer: bytes after the metadata block", Kind: "trailer",
		Hex: cat("05", "00", "00", "00", "00"), Fields: none, Error: "bad_payload"},

	// Metadata blocks: uvarint count | count x (uvarint klen | key | uvarint vlen | value).
	{Name: "metadata: empty block", Kind: "metadata",
		Hex: "", Fields: metadataFields{}},
	{Name: "metadata: two pairs, repeated key kept", Kind: "metadata",
		Hex:    cat("02", "01", x("a"), "01", x("1"), "01", x("a"), "01", x("2")),
		Fields: metadataFields{Metadata: md("a", "1", "a", "2")}},
	{Name: "metadata: UTF-8 value", Kind: "metadata",
		Hex:    cat("01", "04", x("name"), "06", x("žluť")),
		Fields: metadataFields{Metadata: md("name", "žluť")}},
	{Name: "metadata: count 0", Kind: "metadata",
		Hex: "00", Fields: metadataFields{}, NonCanonical: true},
	{Name: "metadata: truncated count varint", Kind: "metadata",
		Hex: "81", Fields: none, Error: "bad_payload"},
	{Name: "metadata: count past the end", Kind: "metadata",
		Hex: cat("03", "00", "00"), Fields: none, Error: "bad_payload"},
	{Name: "metadata: key length past the end", Kind: "metadata",
		Hex: cat("01", "05", x("ab")), Fields: none, Error: "bad_payload"},
	{Name: "metadata: trailing bytes", Kind: "metadata",
		Hex: cat("01", "00", "00", "ff"), Fields: none, Error: "bad_payload"},

	// WINDOW payloads: u32 increment in [1, 2^31-1].
	{Name: "window: 64 KiB", Kind: "window", Hex: "00010000", Fields: windowFields{Increment: 65536}},
	{Name: "window: largest increment", Kind: "window", Hex: "7fffffff", Fields: windowFields{Increment: 1<<31 - 1}},
	{Name: "window: zero increment", Kind: "window", Hex: "00000000", Fields: none, Error: "bad_payload"},
	{Name: "window: increment over 2^31-1", Kind: "window", Hex: "80000000", Fields: none, Error: "bad_payload"},
	{Name: "window: 3 bytes", Kind: "window", Hex: "000001", Fields: none, Error: "bad_payload"},

	// GOAWAY payloads: u32 last stream | uvarint code | message.
	{Name: "goaway: graceful", Kind: "goaway",
		Hex: cat("00000007", "00", x("bye")), Fields: goAwayFields{LastStream: 7, Message: "bye"}},
	{Name: "goaway: Unavailable, no streams accepted", Kind: "goaway",
		Hex:    cat("00000000", "0e", x("shutting down")),
		Fields: goAwayFields{Code: 14, Message: "shutting down"}},
	{Name: "goaway: server shutting down (as the Go server sends it)", Kind: "goaway",
		Hex:    cat("00000005", "0e", x("server is shutting down")),
		Fields: goAwayFields{LastStream: 5, Code: 14, Message: "server is shutting down"}},
	{Name: "goaway: idle timeout", Kind: "goaway",
		Hex:    cat("00000003", "00", x("idle timeout")),
		Fields: goAwayFields{LastStream: 3, Message: "idle timeout"}},
	{Name: "goaway: connection refused by policy", Kind: "goaway",
		Hex:    cat("00000000", "07", x("peer not authorized")),
		Fields: goAwayFields{Code: 7, Message: "peer not authorized"}},
	{Name: "goaway: empty message", Kind: "goaway",
		Hex: cat("ffffffff", "00"), Fields: goAwayFields{LastStream: 0xffffffff}},
	{Name: "goaway: 3 bytes", Kind: "goaway", Hex: "000000", Fields: none, Error: "bad_payload"},
	{Name: "goaway: truncated code varint", Kind: "goaway", Hex: cat("00000001", "80"), Fields: none, Error: "bad_payload"},

	// Messages: a sequence of frames reassembled into one message.
	{Name: "message in one frame", Kind: "message",
		Hex:    cat("00000002", "00000001", "02", "02", x("hi")),
		Fields: messageFields{Stream: 1, Type: "DATA", Flags: 2, MaxFrame: 1024, Frames: 1, Message: x("hi")}},
	{Name: "empty message", Kind: "message",
		Hex:    cat("00000000", "00000001", "02", "00"),
		Fields: messageFields{Stream: 1, Type: "DATA", MaxFrame: 1024, Frames: 1, Message: ""}},
	{Name: "message exactly one frame long", Kind: "message",
		Hex:    cat("00000008", "00000001", "02", "00", x("12345678")),
		Fields: messageFields{Stream: 1, Type: "DATA", MaxFrame: 8, Frames: 1, Message: x("12345678")}},
	{Name: "chunked message in frames of 8 bytes", Kind: "message",
		Hex: cat(
			"00000008", "00000003", "02", "01", "0000000e", x("hell"),
			"00000008", "00000003", "02", "01", x("o, warre"),
			"00000002", "00000003", "02", "02", x("n!")),
		Fields: messageFields{Stream: 3, Type: "DATA", Flags: 2, MaxFrame: 8, Frames: 3, Message: x("hello, warren!")}},
	{Name: "chunked message one byte over the frame size", Kind: "message",
		Hex: cat(
			"00000008", "00000001", "02", "01", "00000009", x("1234"),
			"00000005", "00000001", "02", "00", x("56789")),
		Fields: messageFields{Stream: 1, Type: "DATA", MaxFrame: 8, Frames: 2, Message: x("123456789")}},
	{Name: "chunked message on a server-initiated stream", Kind: "message",
		Hex: cat(
			"00000010", "00000002", "02", "01", "00000015", x("the quick br"),
			"00000009", "00000002", "02", "02", x("own fox !")),
		Fields: messageFields{Stream: 2, Type: "DATA", Flags: 2, MaxFrame: 16, Frames: 2, Message: x("the quick brown fox !")}},
	{Name: "chunked message: declared length not above the first chunk", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000004", x("abcd"),
			"00000000", "00000001", "02", "00"),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: END together with MORE", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000006", x("abcd"),
			"00000002", "00000001", "02", "03", x("ef")),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: first frame shorter than the length prefix", Kind: "message",
		Hex: cat("00000002", "00000001", "02", "01", "0000"), Fields: none, Error: "bad_frame"},
	{Name: "chunked message: last frame short of the declared length", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "0000000a", x("abcd"),
			"00000002", "00000001", "02", "00", x("ef")),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: more bytes than declared", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000006", x("abcd"),
			"00000003", "00000001", "02", "00", x("efg")),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: FlagMore on the completing frame", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000006", x("abcd"),
			"00000002", "00000001", "02", "01", x("ef")),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: empty continuation frame", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000006", x("abcd"),
			"00000000", "00000001", "02", "01"),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: another type in the middle", Kind: "message",
		Hex: cat("00000008", "00000001", "02", "01", "00000006", x("abcd"),
			"00000002", "00000001", "01", "00", x("ef")),
		Fields: none, Error: "bad_frame"},
	{Name: "chunked message: declared length over MaxMessageSize", Kind: "message",
		Hex:    cat("00000008", "00000001", "02", "01", "00400001", x("abcd")),
		Fields: none, Error: "message_too_large"},
	{Name: "chunked message: frames end before the last", Kind: "message",
		Hex:    cat("00000008", "00000001", "02", "01", "0000000a", x("abcd")),
		Fields: none, Error: "incomplete"},
}

// errClass maps an error to the class used in the vectors.
func errClass(err error) string {
	var (
		ftl *FrameTooLargeError
		fe  *FrameError
		pe  *PayloadError
		mtl *MessageTooLargeError
		se  *SettingError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ftl):
		return "frame_too_large"
	case errors.As(err, &fe):
		return "bad_frame"
	case errors.As(err, &pe):
		return "bad_payload"
	case errors.As(err, &mtl):
		return "message_too_large"
	case errors.As(err, &se):
		return "bad_setting"
	case errors.Is(err, ErrHTTPRequest):
		return "http_request"
	case errors.Is(err, ErrNotWarren):
		return "not_warren"
	case errors.Is(err, ErrVersion):
		return "bad_version"
	case errors.Is(err, ErrBadPreface):
		return "bad_preface"
	}
	return "unknown: " + err.Error()
}

var errIncomplete = errors.New("incomplete")

// decodeVector decodes b as kind and returns the fields, or an error.
func decodeVector(kind string, b []byte) (any, error) {
	switch kind {
	case "frame":
		rest, h, p, ok, err := ParseFrame(b, DefaultMaxFrameSize)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errIncomplete
		}
		if len(rest) != 0 {
			return nil, fmt.Errorf("%d bytes after the frame", len(rest))
		}
		return frameFields{Length: h.Length, Stream: h.Stream, Type: h.Type.String(), TypeID: uint8(h.Type),
			Flags: uint8(h.Flags), Payload: hex.EncodeToString(p)}, nil
	case "preface":
		s, n, ok, err := ParsePreface(b)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errIncomplete
		}
		return prefaceFields{Version: b[4], MaxFrameSize: s.MaxFrameSize, MaxMessageSize: s.MaxMessageSize,
			InitialWindow: s.InitialWindow, MaxStreams: s.MaxStreams, Size: n}, nil
	case "callheader":
		h, err := ParseCallHeader(b)
		if err != nil {
			return nil, err
		}
		m, err := pairs(h.Metadata)
		if err != nil {
			return nil, err
		}
		return callHeaderFields{Method: string(h.Method), Codec: h.Codec, TimeoutUS: h.Timeout.Microseconds(), Metadata: m}, nil
	case "trailer":
		t, err := ParseTrailer(b)
		if err != nil {
			return nil, err
		}
		d, err := ParseDetails(t.Details)
		if err != nil {
			return nil, err
		}
		var ds []string
		for _, e := range d {
			ds = append(ds, hex.EncodeToString(e))
		}
		m, err := pairs(t.Metadata)
		if err != nil {
			return nil, err
		}
		return trailerFields{Code: t.Code, Message: string(t.Message), Details: ds, Metadata: m}, nil
	case "metadata":
		m, err := pairs(b)
		if err != nil {
			return nil, err
		}
		return metadataFields{Metadata: m}, nil
	case "window":
		incr, err := ParseWindow(b)
		if err != nil {
			return nil, err
		}
		return windowFields{Increment: incr}, nil
	case "goaway":
		last, code, msg, err := ParseGoAway(b)
		if err != nil {
			return nil, err
		}
		return goAwayFields{LastStream: last, Code: code, Message: string(msg)}, nil
	case "message":
		var a Assembler
		frames := 0
		for len(b) > 0 {
			rest, h, p, ok, err := ParseFrame(b, DefaultMaxFrameSize)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errIncomplete
			}
			b = rest
			frames++
			msg, done, err := a.Add(h, p)
			if err != nil {
				return nil, err
			}
			if done {
				if len(b) != 0 {
					return nil, fmt.Errorf("%d bytes after the message", len(b))
				}
				return messageFields{Stream: h.Stream, Type: h.Type.String(), Flags: uint8(h.Flags),
					Frames: frames, Message: hex.EncodeToString(msg)}, nil
			}
		}
		return nil, errIncomplete
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

func pairs(block []byte) ([][2]string, error) {
	var out [][2]string
	err := RangeMetadata(block, func(k, v []byte) bool {
		out = append(out, [2]string{string(k), string(v)})
		return true
	})
	return out, err
}

func flatten(m [][2]string) []string {
	var out []string
	for _, kv := range m {
		out = append(out, kv[0], kv[1])
	}
	return out
}

// encodeVector encodes fields (decoded from JSON into the kind's type).
func encodeVector(kind string, fields any) ([]byte, error) {
	switch f := fields.(type) {
	case frameFields:
		p, err := hex.DecodeString(f.Payload)
		if err != nil {
			return nil, err
		}
		return AppendFrame(nil, f.Stream, Type(f.TypeID), Flags(f.Flags), p), nil
	case prefaceFields:
		return AppendPreface(nil, Settings{MaxFrameSize: f.MaxFrameSize, MaxMessageSize: f.MaxMessageSize,
			InitialWindow: f.InitialWindow, MaxStreams: f.MaxStreams}), nil
	case callHeaderFields:
		return AppendCallHeader(nil, f.Method, f.Codec, time.Duration(f.TimeoutUS)*time.Microsecond, flatten(f.Metadata)), nil
	case trailerFields:
		var ds [][]byte
		for _, d := range f.Details {
			b, err := hex.DecodeString(d)
			if err != nil {
				return nil, err
			}
			ds = append(ds, b)
		}
		return AppendTrailer(nil, f.Code, f.Message, ds, flatten(f.Metadata)), nil
	case metadataFields:
		return AppendMetadata(nil, flatten(f.Metadata)), nil
	case windowFields:
		return AppendWindow(nil, f.Increment), nil
	case goAwayFields:
		return AppendGoAway(nil, f.LastStream, f.Code, f.Message), nil
	case messageFields:
		msg, err := hex.DecodeString(f.Message)
		if err != nil {
			return nil, err
		}
		typ := map[string]Type{"HEADERS": TypeHeaders, "DATA": TypeData, "TRAILERS": TypeTrailers}[f.Type]
		return AppendMessage(nil, f.Stream, typ, Flags(f.Flags), msg, f.MaxFrame), nil
	}
	return nil, fmt.Errorf("cannot encode %s fields %T", kind, fields)
}

// fieldsFor returns a pointer to a zero value of kind's fields type.
func fieldsFor(kind string) any {
	return map[string]any{
		"frame": &frameFields{}, "preface": &prefaceFields{}, "callheader": &callHeaderFields{},
		"trailer": &trailerFields{}, "metadata": &metadataFields{}, "window": &windowFields{},
		"goaway": &goAwayFields{}, "message": &messageFields{},
	}[kind]
}

func marshalVectors(t *testing.T, vs []vector) []byte {
	t.Helper()
	b, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestVectors checks that testdata/vectors.json is generated from the table
// above, then decodes and re-encodes every vector in the file.
func TestVectors(t *testing.T) {
	want := marshalVectors(t, vectors)
	if *update {
		if err := os.MkdirAll("../testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("%v (generate it with go test ./wire -run TestVectors -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date: run go test ./wire -run TestVectors -update", vectorsPath)
	}

	var raw []struct {
		Name         string          `json:"name"`
		Kind         string          `json:"kind"`
		Hex          string          `json:"hex"`
		Fields       json.RawMessage `json:"fields"`
		Error        string          `json:"error"`
		NonCanonical bool            `json:"noncanonical"`
		Status       int             `json:"status"`
	}
	if err := json.Unmarshal(got, &raw); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	names := map[string]bool{}
	for _, v := range raw {
		kinds[v.Kind]++
		if names[v.Name] {
			t.Errorf("duplicate vector name %q", v.Name)
		}
		names[v.Name] = true
		if v.Status != 0 && (v.Kind != "callheader" || v.Error != "") {
			t.Errorf("%s: status is for callheader vectors that decode", v.Name)
		}
		t.Run(v.Kind+"/"+v.Name, func(t *testing.T) {
			b, err := hex.DecodeString(v.Hex)
			if err != nil {
				t.Fatalf("bad hex: %v", err)
			}
			dec, err := decodeVector(v.Kind, b)
			if v.Error != "" {
				class := errClass(err)
				if errors.Is(err, errIncomplete) {
					class = "incomplete"
				}
				if class != v.Error {
					t.Fatalf("error class %q (%v), want %q", class, err, v.Error)
				}
				if string(v.Fields) != "{}" {
					t.Errorf("invalid vector has fields %s", v.Fields)
				}
				return
			}
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			wantFields := fieldsFor(v.Kind)
			if wantFields == nil {
				t.Fatalf("unknown kind %q", v.Kind)
			}
			dj := json.NewDecoder(bytes.NewReader(v.Fields))
			dj.DisallowUnknownFields()
			if err := dj.Decode(wantFields); err != nil {
				t.Fatalf("fields: %v", err)
			}
			wf := reflect.ValueOf(wantFields).Elem().Interface()
			if mf, ok := wf.(messageFields); ok {
				mf.MaxFrame = 0 // encoder input, not decoded
				dec := dec.(messageFields)
				if !reflect.DeepEqual(dec, mf) {
					t.Fatalf("decoded %+v\nwant    %+v", dec, mf)
				}
			} else if !reflect.DeepEqual(dec, wf) {
				t.Fatalf("decoded %+v\nwant    %+v", dec, wf)
			}
			if v.NonCanonical {
				return
			}
			enc, err := encodeVector(v.Kind, wf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, b) {
				t.Fatalf("re-encoded\n%x\nwant\n%x", enc, b)
			}
		})
	}
	for _, k := range []string{"frame", "preface", "callheader", "trailer", "metadata", "window", "goaway", "message"} {
		if kinds[k] == 0 {
			t.Errorf("no vectors of kind %q", k)
		}
	}
}

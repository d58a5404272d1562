package stream

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/warrenipc/warren/wire"
)

// fuzzFrame is the MaxFrameSize of the fuzzed reader: the smallest allowed,
// so that short inputs reach chunking.
const fuzzFrame = 1 << 10

// Outcomes of the reference reader, one per Read.
const (
	evMessage  = "message"
	evTooLarge = "too large" // a message over the limit, skipped
	evEOF      = "EOF"       // the end-of-stream marker
	evLost     = "lost"      // the input ended without the marker
	evBroken   = "broken"    // a frame breaks the protocol
)

type event struct {
	kind string
	msg  []byte
}

// refRead is a naive reader of a plain message stream, written from
// PROTOCOL.md without the wire package's Reader and Assembler: it returns
// what each Read should give for input (the bytes after the prefaces).
func refRead(input []byte, maxFrame, maxMsg int) []event {
	var evs []event
	var msg []byte // the chunked message in progress
	total, inMsg, discard := 0, false, false
	for {
		if len(input) < wire.HeaderSize {
			return append(evs, event{kind: evLost})
		}
		length := int(binary.BigEndian.Uint32(input))
		stream := binary.BigEndian.Uint32(input[4:])
		typ, flags := wire.Type(input[8]), wire.Flags(input[9])
		more, end := flags&wire.FlagMore != 0, flags&wire.FlagEnd != 0
		// Header checks come before the payload is waited for.
		if length > maxFrame || typ == 0 || typ > wire.TypeGoAway {
			return append(evs, event{kind: evBroken})
		}
		switch {
		case typ == wire.TypePing && (stream != 0 || length != 8),
			typ == wire.TypeWindow && length != 4,
			typ == wire.TypeGoAway && stream != 0,
			(typ == wire.TypeHeaders || typ == wire.TypeData || typ == wire.TypeTrailers || typ == wire.TypeCancel) && stream == 0,
			more && (typ == wire.TypeHeaders || typ == wire.TypeTrailers):
			return append(evs, event{kind: evBroken})
		}
		if len(input) < wire.HeaderSize+length {
			return append(evs, event{kind: evLost})
		}
		p := input[wire.HeaderSize : wire.HeaderSize+length]
		input = input[wire.HeaderSize+length:]
		if stream != 1 || (typ != wire.TypeData && typ != wire.TypeTrailers) {
			return append(evs, event{kind: evBroken})
		}
		if typ == wire.TypeTrailers {
			if !end || inMsg {
				return append(evs, event{kind: evBroken})
			}
			return append(evs, event{kind: evEOF})
		}
		if more && end {
			return append(evs, event{kind: evBroken})
		}
		switch {
		case !inMsg && !more: // a whole message in one frame
			if len(p) > maxMsg {
				evs = append(evs, event{kind: evTooLarge})
			} else {
				evs = append(evs, event{kind: evMessage, msg: p})
			}
		case !inMsg: // the first chunk
			if len(p) < 4 {
				return append(evs, event{kind: evBroken})
			}
			total = int(binary.BigEndian.Uint32(p))
			if total <= len(p)-4 {
				return append(evs, event{kind: evBroken})
			}
			inMsg, discard, msg = true, total > maxMsg, append([]byte(nil), p[4:]...)
			if discard {
				evs = append(evs, event{kind: evTooLarge})
			}
		default: // a following chunk
			if (more && len(p) == 0) || len(msg)+len(p) > total {
				return append(evs, event{kind: evBroken})
			}
			msg = append(msg, p...)
			if more && len(msg) == total {
				return append(evs, event{kind: evBroken})
			}
			if !more {
				if len(msg) != total {
					return append(evs, event{kind: evBroken})
				}
				if !discard {
					evs = append(evs, event{kind: evMessage, msg: msg})
				}
				inMsg, msg = false, nil
			}
		}
		if end {
			return append(evs, event{kind: evEOF})
		}
	}
}

// classify names the outcome of one ReadBytes.
func classify(err error) string {
	var tl *wire.MessageTooLargeError
	var fe *wire.FrameError
	var ftl *wire.FrameTooLargeError
	var ce *ConnError
	switch {
	case err == nil:
		return evMessage
	case err == io.EOF:
		return evEOF
	case errors.As(err, &tl):
		return evTooLarge
	case errors.As(err, &fe), errors.As(err, &ftl):
		return evBroken
	case errors.As(err, &ce) && errors.Is(err, io.ErrUnexpectedEOF):
		return evLost
	}
	return fmt.Sprintf("unexpected error %v", err)
}

func fuzzSeeds() [][]byte {
	big := bytes.Repeat([]byte("x"), 3000)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	return [][]byte{
		nil,
		endMarker,
		cat(frames([]byte("hello"), fuzzFrame, 0), endMarker),
		cat(frames(nil, fuzzFrame, 0), frames([]byte("last"), fuzzFrame, wire.FlagEnd)),
		cat(frames(big, fuzzFrame, 0), endMarker),
		cat(frames(big, fuzzFrame, 0)[:2000]),
		cat(frames([]byte(`{"a":1}`), fuzzFrame, 0), frames(big[:200], fuzzFrame, 0), endMarker),
		wire.AppendFrame(nil, 0, wire.TypePing, 0, make([]byte, 8)),
		wire.AppendFrame(nil, 1, wire.TypeData, wire.FlagMore, []byte{0, 0, 0, 9, 'a'}),
		wire.AppendFrame(nil, 1, wire.TypeData, wire.FlagMore, []byte{0x40, 0, 0, 0, 'a'}),
	}
}

// FuzzStreamRead feeds arbitrary bytes after a valid preface to a Stream and
// compares what each Read returns with the reference reader: it never
// panics, never returns a message over the limit or bytes that were not fed
// to it, and never returns a partial message.
func FuzzStreamRead(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(uint16(100), s)
		f.Add(uint16(4000), s)
	}
	preface := appendPreface(nil, wire.Settings{MaxFrameSize: fuzzFrame}) // small buffers
	f.Fuzz(func(t *testing.T, limit uint16, data []byte) {
		maxMsg := 1 + int(limit)%8192
		want := refRead(data, fuzzFrame, maxMsg)
		conn := newFeedConn(append(bytes.Clone(preface), data...))
		s, err := New(conn, &Options{MaxFrameSize: fuzzFrame, MaxMessageSize: uint32(maxMsg)})
		if err != nil {
			t.Fatal(err)
		}
		var buf []byte
		returned := 0
		for i, ev := range want {
			buf, err = s.ReadBytes(buf)
			if got := classify(err); got != ev.kind {
				t.Fatalf("read %d: %s (%v), want %s", i, got, err, ev.kind)
			}
			if err != nil && len(buf) != 0 {
				t.Fatalf("read %d: %d bytes with error %v", i, len(buf), err)
			}
			if len(buf) > maxMsg {
				t.Fatalf("read %d: message of %d bytes over the limit %d", i, len(buf), maxMsg)
			}
			if !bytes.Equal(buf, ev.msg) {
				t.Fatalf("read %d: message %q, want %q", i, buf, ev.msg)
			}
			returned += len(buf)
		}
		if returned > len(data) {
			t.Fatalf("returned %d bytes from %d fed", returned, len(data))
		}
		// The last outcome is final.
		last := want[len(want)-1].kind
		if _, err := s.ReadBytes(nil); classify(err) != last {
			t.Fatalf("read after the end: %v, want %s", err, last)
		}
		s.Close()
	})
}

// FuzzJSONMessage feeds arbitrary bytes to the JSON decoding of Read: it
// decodes exactly the inputs that are one valid JSON value, never returns an
// io error (which would read as the end of the stream), and numbers survive
// a round trip unchanged.
func FuzzJSONMessage(f *testing.F) {
	for _, s := range []string{
		``, ` `, `{}`, `[]`, `null`, `0`, `-0.0e-0`, `9223372036854775807`, `1e400`, `0.1`,
		`{"a":[1,2,{"b":null}]}`, `{"type":"x","payload":{"k":1}}`, `"\u00e9\ud800"`,
		`{"word":"a","n":1,"extra":2}`, `1 2`, `{"a":1}}`, `[`, `{"a"`, "\xff", `{"n":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r bytes.Reader
		var v any
		err := decodeJSON(&r, data, &v, false)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v wraps an io error", err)
		}
		if valid := json.Valid(data); (err == nil) != valid {
			t.Fatalf("decode error %v, but json.Valid = %t", err, valid)
		}
		if err == nil {
			// Numbers are json.Number and write back as they came.
			out, merr := json.Marshal(v)
			if merr != nil {
				t.Fatalf("re-encoding %#v: %v", v, merr)
			}
			var again any
			if err := decodeJSON(&r, out, &again, false); err != nil {
				t.Fatalf("decoding the re-encoded %q: %v", out, err)
			}
			if out2, _ := json.Marshal(again); !bytes.Equal(out, out2) {
				t.Fatalf("round trip changed %q to %q", out, out2)
			}
		}
		// Strict decoding into a struct never fails with an io error, and
		// what it accepts the lax mode accepts too.
		var w word
		serr := decodeJSON(&r, data, &w, true)
		if errors.Is(serr, io.EOF) || errors.Is(serr, io.ErrUnexpectedEOF) {
			t.Fatalf("strict error %v wraps an io error", serr)
		}
		if serr == nil && decodeJSON(&r, data, &w, false) != nil {
			t.Fatalf("strict mode accepts %q, lax mode does not", data)
		}
		var env envelope
		if decodeJSON(&r, data, &env, false) == nil && env.Payload != nil && !json.Valid(env.Payload) {
			t.Fatalf("payload %q is not valid JSON", env.Payload)
		}
	})
}

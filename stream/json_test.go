package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/descriptorpb"
)

// exchange writes each raw message on a and returns b, which reads them.
func exchange(t *testing.T, bOpts *Options, msgs ...string) (a, b *Stream) {
	t.Helper()
	a, b = newPair(t, unixPair, nil, bOpts)
	for _, m := range msgs {
		if err := a.WriteBytes([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// TestJSONNumber: numbers decoded into interface values keep every digit,
// and write back byte for byte.
func TestJSONNumber(t *testing.T) {
	const msg = `{"max":9223372036854775807,"tenth":0.1,"huge":1e400,"pi":3.14159265358979323846264338327950288,"neg":-18446744073709551617}`
	a, b := exchange(t, nil, msg, msg, `[9007199254740993]`)

	var m map[string]any
	if err := b.Read(&m); err != nil {
		t.Fatal(err)
	}
	if got := m["max"]; got != json.Number("9223372036854775807") {
		t.Fatalf("max = %#v", got)
	}
	if n, err := m["max"].(json.Number).Int64(); err != nil || n != 1<<63-1 {
		t.Fatalf("Int64() = %d, %v", n, err)
	}
	if got := m["tenth"]; got != json.Number("0.1") {
		t.Fatalf("tenth = %#v", got)
	}
	// Write it back: the peer reads the very same text.
	go b.Write(m)
	back, err := a.ReadBytes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var again map[string]any
	d := json.NewDecoder(bytes.NewReader(back))
	d.UseNumber()
	if err := d.Decode(&again); err != nil {
		t.Fatal(err)
	}
	for k, v := range m {
		if again[k] != v {
			t.Errorf("%s: wrote %v, read back %v (%s)", k, v, again[k], back)
		}
	}

	var v any // a bare interface too
	if err := b.Read(&v); err != nil || v.(map[string]any)["huge"] != json.Number("1e400") {
		t.Fatalf("Read(*any) = %#v, %v", v, err)
	}
	var list []any
	if err := b.Read(&list); err != nil || list[0] != json.Number("9007199254740993") {
		t.Fatalf("Read(*[]any) = %#v, %v", list, err)
	}
}

type envelope struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
}

type point struct {
	X, Y int
}

// TestRawMessage: decode an envelope first, then its payload by type.
func TestRawMessage(t *testing.T) {
	_, b := exchange(t, nil,
		`{"type":"point","payload":{"X":1,"Y":2}}`,
		`{"type":"text","payload":"hello"}`,
		`{"type":"point","payload":{"X":3,"Y":4}}`)
	var got []any
	var payloads []json.RawMessage
	for range 3 {
		var env envelope
		if err := b.Read(&env); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, env.Payload)
		switch env.Type {
		case "point":
			var p point
			if err := json.Unmarshal(env.Payload, &p); err != nil {
				t.Fatal(err)
			}
			got = append(got, p)
		case "text":
			var s string
			if err := json.Unmarshal(env.Payload, &s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
	}
	want := []any{point{1, 2}, "hello", point{3, 4}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("message %d: %v, want %v", i, got[i], want[i])
		}
	}
	// RawMessage values own their bytes: later reads did not overwrite them.
	if string(payloads[0]) != `{"X":1,"Y":2}` {
		t.Fatalf("first payload is now %s", payloads[0])
	}
}

// TestStrict: with DisallowUnknownFields, an unknown field is an error that
// names it, and the stream goes on.
func TestStrict(t *testing.T) {
	_, b := exchange(t, &Options{DisallowUnknownFields: true},
		`{"word":"a","n":1}`,
		`{"word":"b","n":2,"extra":true}`,
		`{"word":"c","n":3}`,
		`{"name":"a.proto","bogus":1}`)
	var w word
	if err := b.Read(&w); err != nil || w.Word != "a" {
		t.Fatalf("Read = %+v, %v", w, err)
	}
	err := b.Read(&w)
	ce := mustErrAs[*CodecError](t, err)
	if ce.Field != "extra" || ce.Op != "decode" || ce.Codec != "json" || !strings.Contains(err.Error(), `unknown field "extra"`) {
		t.Fatalf("error %q: %+v", err, ce)
	}
	if err := b.Read(&w); err != nil || w.Word != "c" {
		t.Fatalf("Read after the error = %+v, %v", w, err)
	}
	// Protobuf messages in JSON too.
	err = b.Read(new(descriptorpb.FileDescriptorProto))
	if ce := mustErrAs[*CodecError](t, err); ce.Field != "bogus" {
		t.Fatalf("protojson error %q: field %q", err, ce.Field)
	}

	// Without strict mode, unknown fields are ignored.
	_, lax := exchange(t, nil, `{"word":"b","n":2,"extra":true}`)
	if err := lax.Read(&w); err != nil || w.Word != "b" {
		t.Fatalf("lax Read = %+v, %v", w, err)
	}
}

// TestJSONDecodeErrors: a message that is not one JSON value is a
// *CodecError, never io.EOF or io.ErrUnexpectedEOF, which mean something
// else on a stream.
func TestJSONDecodeErrors(t *testing.T) {
	bad := []string{``, `   `, `{"word":`, `{"word":"a"} {"word":"b"}`, `{"word":"a"}]`, `nul`, `{"n":"x"}`}
	_, b := exchange(t, nil, append(bad, `{"word":"ok"}`)...)
	for _, m := range bad {
		var w word
		err := b.Read(&w)
		mustErrAs[*CodecError](t, err)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: error %v wraps an io error", m, err)
		}
	}
	var w word
	if err := b.Read(&w); err != nil || w.Word != "ok" {
		t.Fatalf("Read = %+v, %v", w, err)
	}
	// Whitespace around the value is fine.
	_, b = exchange(t, nil, " \n{\"word\":\"ws\"}\r\n\t ")
	if err := b.Read(&w); err != nil || w.Word != "ws" {
		t.Fatalf("Read = %+v, %v", w, err)
	}
}

func TestUnknownField(t *testing.T) {
	for msg, want := range map[string]string{
		`json: unknown field "a"`:                          "a",
		`json: unknown field "unknown field \"b\""`:        `unknown field "b"`,
		`proto: (line 1:2): unknown field "c"`:             "c",
		`json: cannot unmarshal string into Go value`:      "",
		`json: unknown field "unterminated`:                "",
		`proto: (line 1:2): unknown field "\/escaped"`:     "",
		`proto: (line 1:2): unknown field "\u00e9t\u00e9"`: "été",
	} {
		if got := unknownField(errors.New(msg)); got != want {
			t.Errorf("unknownField(%q) = %q, want %q", msg, got, want)
		}
	}
}

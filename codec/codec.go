// Package codec turns messages into bytes and back. A codec's id travels
// with every call, so one server answers JSON, protobuf and raw-bytes callers
// alike.
package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"google.golang.org/protobuf/proto"
)

// Codec ids as they appear on the wire.
const (
	IDRaw   uint8 = 0
	IDJSON  uint8 = 1
	IDProto uint8 = 2
)

// A Codec marshals and unmarshals messages.
type Codec interface {
	// ID is the codec's wire id.
	ID() uint8
	// Name is the codec's name ("raw", "json", "proto").
	Name() string
	// Append appends the encoding of v to b.
	Append(b []byte, v any) ([]byte, error)
	// Unmarshal decodes data into v, which must be a pointer. Implementations
	// must not keep data after they return.
	Unmarshal(data []byte, v any) error
}

// Errors returned by codecs.
var (
	// ErrUnsupportedType is returned when a codec cannot handle a value's
	// type; errors wrapping it name the type.
	ErrUnsupportedType = errors.New("warren: codec does not support this type")
	// ErrUnknownCodec is returned by ByID for an id no codec has.
	ErrUnknownCodec = errors.New("warren: unknown codec")
)

// Raw passes bytes through. It accepts []byte and *[]byte values; Unmarshal
// into a *[]byte reuses the slice's capacity.
var Raw Codec = rawCodec{}

// JSON encodes with encoding/json, or with protojson (the protobuf JSON
// mapping) for proto.Message values. Decoding discards unknown fields, as
// encoding/json does and as binary protobuf does, so that a client built
// from a newer schema (a field added) still calls an older server.
// Decoding keeps numbers exact when decoding into interface values
// (json.Number).
var JSON Codec = jsonCodec{}

// Proto encodes proto.Message values in the protobuf binary format.
var Proto Codec = protoCodec{}

// ByID returns the codec with the wire id.
func ByID(id uint8) (Codec, error) {
	switch id {
	case IDRaw:
		return Raw, nil
	case IDJSON:
		return JSON, nil
	case IDProto:
		return Proto, nil
	}
	return nil, fmt.Errorf("%w: id %d", ErrUnknownCodec, id)
}

// For returns the codec a client uses by default for v: Raw for []byte,
// Proto for proto.Message, JSON for everything else.
func For(v any) Codec {
	switch v.(type) {
	case []byte, *[]byte:
		return Raw
	case proto.Message:
		return Proto
	}
	return JSON
}

type rawCodec struct{}

func (rawCodec) ID() uint8    { return IDRaw }
func (rawCodec) Name() string { return "raw" }

func (rawCodec) Append(b []byte, v any) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return append(b, m...), nil
	case *[]byte:
		return append(b, *m...), nil
	}
	return b, fmt.Errorf("%w: raw codec needs []byte, got %T", ErrUnsupportedType, v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("%w: raw codec needs *[]byte, got %T", ErrUnsupportedType, v)
	}
	if len(data) > 0 && cap(*m) >= len(data) && &(*m)[:1][0] == &data[0] {
		*m = (*m)[:len(data)] // read in place already (rpc: a lent reply buffer)
		return nil
	}
	*m = append((*m)[:0], data...)
	return nil
}

type jsonCodec struct{}

func (jsonCodec) ID() uint8    { return IDJSON }
func (jsonCodec) Name() string { return "json" }

// jsonEnc is a pooled encoder writing into a reusable buffer.
type jsonEnc struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonEncPool = sync.Pool{New: func() any {
	e := new(jsonEnc)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

func (jsonCodec) Append(b []byte, v any) ([]byte, error) {
	if m, ok := v.(proto.Message); ok {
		return appendProtoJSON(b, m)
	}
	e := jsonEncPool.Get().(*jsonEnc)
	e.buf.Reset()
	err := e.enc.Encode(v)
	if err == nil {
		out := e.buf.Bytes()
		b = append(b, out[:len(out)-1]...) // drop the Encoder's newline
	}
	if e.buf.Cap() <= 64<<10 {
		jsonEncPool.Put(e)
	}
	return b, err
}

// compactJSON removes the whitespace outside strings from the valid JSON in
// b[from:], in place: protojson varies its spacing from build to build on
// purpose, and replies should read the same every time.
func compactJSON(b []byte, from int) []byte {
	w := from
	inString, escaped := false, false
	for _, c := range b[from:] {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			continue
		}
		b[w] = c
		w++
	}
	return b[:w]
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	if m, ok := v.(proto.Message); ok {
		return unmarshalProtoJSON(data, m)
	}
	if !holdsInterface(reflect.TypeOf(v)) {
		// json.Number matters only where a value lands in an interface:
		// without one, json.Unmarshal decodes the same, with fewer
		// allocations than a Decoder.
		return json.Unmarshal(data, v)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("warren: json: data after the top-level value")
	}
	return nil
}

// interfaceTypes caches holdsInterface: reflect.Type -> bool.
var interfaceTypes sync.Map

// holdsInterface reports whether decoding JSON into a value of type t can
// store a value in an interface: t is or contains one (in a field, an
// element, a map value or a pointer's target).
func holdsInterface(t reflect.Type) bool {
	if t == nil {
		return true
	}
	if v, ok := interfaceTypes.Load(t); ok {
		return v.(bool)
	}
	v := findInterface(t, map[reflect.Type]bool{})
	interfaceTypes.Store(t, v)
	return v
}

func findInterface(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false // a cycle: what it holds is looked at where it started
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return findInterface(t.Elem(), seen)
	case reflect.Map:
		return findInterface(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if findInterface(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

type protoCodec struct{}

func (protoCodec) ID() uint8    { return IDProto }
func (protoCodec) Name() string { return "proto" }

func (protoCodec) Append(b []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return b, fmt.Errorf("%w: proto codec needs a proto.Message, got %T", ErrUnsupportedType, v)
	}
	return proto.MarshalOptions{}.MarshalAppend(b, m)
}

func (protoCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%w: proto codec needs a proto.Message, got %T", ErrUnsupportedType, v)
	}
	return proto.Unmarshal(data, m)
}

package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSON decoding errors that encoding/json reports as io errors, which a
// caller could mistake for the end of the stream or a lost connection.
var (
	errNoJSONValue   = errors.New("no JSON value in the message")
	errTruncatedJSON = errors.New("unexpected end of JSON input")
	errTrailingJSON  = errors.New("data after the JSON value")
)

// decodeJSON decodes data, one JSON value, into v, with r as the decoder's
// input (reused to save an allocation). Numbers decoded into interface values become
// json.Number, so that they keep every digit; strict rejects object keys
// that v's type does not have. proto.Message values are decoded with
// protojson.
func decodeJSON(r *bytes.Reader, data []byte, v any, strict bool) error {
	if m, ok := v.(proto.Message); ok {
		return protojson.UnmarshalOptions{DiscardUnknown: !strict}.Unmarshal(data, m)
	}
	r.Reset(data)
	defer r.Reset(nil)
	d := json.NewDecoder(r)
	d.UseNumber()
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		switch err {
		case io.EOF:
			return errNoJSONValue
		case io.ErrUnexpectedEOF:
			return errTruncatedJSON
		}
		return err
	}
	for _, c := range data[d.InputOffset():] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return errTrailingJSON
		}
	}
	return nil
}

// newDecodeError wraps a codec's decoding error, naming the unknown field
// when strict mode is the cause.
func newDecodeError(codecName string, err error, strict bool) *CodecError {
	e := &CodecError{Op: "decode", Codec: codecName, Err: err}
	if strict {
		e.Field = unknownField(err)
	}
	return e
}

// unknownField returns the field named by an "unknown field" error of
// encoding/json (`json: unknown field "x"`) or protojson (`... unknown field
// "x"`), or "".
func unknownField(err error) string {
	msg := err.Error()
	const marker = "unknown field "
	i := strings.Index(msg, marker)
	if i < 0 {
		return ""
	}
	q, err := strconv.QuotedPrefix(msg[i+len(marker):])
	if err != nil {
		return ""
	}
	name, err := strconv.Unquote(q)
	if err != nil {
		return ""
	}
	return name
}

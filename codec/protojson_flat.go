package codec

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The JSON codec's fast path for flat messages: messages whose fields are
// all singular strings, bools and integers (the counter service's, and
// most request and reply messages). Such a message goes between JSON and
// the protobuf binary format directly, and the binary format to and from
// the message through the generated code, without protojson's reflection
// and token allocations. The result is protojson's, byte for byte: the same
// field names and order, int64 as strings, the same string escapes
// (FuzzFlatJSON compares the two). Anything the fast path does not handle
// exactly as protojson does (a name it does not know, a duplicate, an
// escape, null, a number in another form, invalid UTF-8) goes to protojson,
// which then accepts it or returns its own error, naming the field.

// maxFlatFields bounds the fields of a flat message (a bit mask of those
// seen, and a stack array of their places).
const maxFlatFields = 32

// flatPlan is what the fast path knows of a message type.
type flatPlan struct {
	ok     bool
	fields []flatField     // in declaration order, protojson's
	byName map[string]int8 // JSON name and proto name: index in fields
	byNum  map[protowire.Number]int8
}

type flatField struct {
	num  protowire.Number
	typ  protowire.Type // its wire type
	kind protoreflect.Kind
	key  string // `"jsonName":`
}

var flatPlans sync.Map // protoreflect.MessageDescriptor -> *flatPlan

func flatPlanOf(md protoreflect.MessageDescriptor) *flatPlan {
	if p, ok := flatPlans.Load(md); ok {
		return p.(*flatPlan)
	}
	p, _ := flatPlans.LoadOrStore(md, newFlatPlan(md))
	return p.(*flatPlan)
}

func newFlatPlan(md protoreflect.MessageDescriptor) *flatPlan {
	p := &flatPlan{byName: map[string]int8{}, byNum: map[protowire.Number]int8{}}
	fds := md.Fields()
	// Well-known types have JSON forms of their own; extensions are
	// written by protojson but not here.
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") || md.ExtensionRanges().Len() > 0 || fds.Len() > maxFlatFields {
		return p
	}
	for i := range fds.Len() {
		fd := fds.Get(i)
		if !flatKind(fd.Kind()) || fd.Cardinality() != protoreflect.Optional ||
			(fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic()) {
			return p
		}
		name := fd.JSONName()
		if !plainName(name) {
			return p
		}
		p.fields = append(p.fields, flatField{num: fd.Number(), typ: wireType(fd.Kind()), kind: fd.Kind(), key: `"` + name + `":`})
		p.byNum[fd.Number()] = int8(i)
	}
	// protojson looks a name up as a JSON name first, then as a proto name.
	for i := range fds.Len() {
		p.byName[fds.Get(i).TextName()] = int8(i)
	}
	for i := range fds.Len() {
		p.byName[fds.Get(i).JSONName()] = int8(i)
	}
	p.ok = true
	return p
}

func flatKind(k protoreflect.Kind) bool {
	switch k {
	case protoreflect.StringKind, protoreflect.BoolKind,
		protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}

func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.StringKind:
		return protowire.BytesType
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind:
		return protowire.Fixed32Type
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind:
		return protowire.Fixed64Type
	}
	return protowire.VarintType
}

// plainName reports whether a JSON name needs no escape.
func plainName(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < ' ' || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return s != ""
}

// scratch buffers for the binary form.
var flatBufs = sync.Pool{New: func() any { return new([]byte) }}

func getFlatBuf() *[]byte { return flatBufs.Get().(*[]byte) }

func putFlatBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		flatBufs.Put(b)
	}
}

// appendProtoJSON appends m in the protobuf JSON mapping, compact.
func appendProtoJSON(b []byte, m proto.Message) ([]byte, error) {
	if p := flatPlanOf(m.ProtoReflect().Descriptor()); p.ok {
		if out, ok := p.appendJSON(b, m); ok {
			return out, nil
		}
	}
	n := len(b)
	b, err := protojson.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b, err
	}
	return compactJSON(b, n), nil
}

// appendJSON appends m's JSON to b; false if it must go to protojson (b is
// then unchanged, up to its length).
func (p *flatPlan) appendJSON(b []byte, m proto.Message) ([]byte, bool) {
	bp := getFlatBuf()
	defer putFlatBuf(bp)
	bin, err := proto.MarshalOptions{}.MarshalAppend(*bp, m)
	*bp = bin
	if err != nil {
		return b, false
	}
	// Where each field's value is in bin: its end, 0 if absent.
	var at [maxFlatFields]struct{ start, end int32 }
	for off := 0; off < len(bin); {
		num, typ, n := protowire.ConsumeTag(bin[off:])
		if n < 0 {
			return b, false
		}
		off += n
		v := protowire.ConsumeFieldValue(num, typ, bin[off:])
		if v < 0 {
			return b, false
		}
		// A field not in the plan, or of another wire type, is an unknown
		// field: protojson leaves it out.
		if i, ok := p.byNum[num]; ok && p.fields[i].typ == typ {
			at[i].start, at[i].end = int32(off), int32(off+v)
		}
		off += v
	}
	start := len(b)
	b = append(b, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		if at[i].end == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.key...)
		var ok bool
		if b, ok = appendFlatValue(b, f.kind, bin[at[i].start:at[i].end]); !ok {
			return b[:start], false
		}
	}
	return append(b, '}'), true
}

// appendFlatValue appends the JSON of a field's binary value v.
func appendFlatValue(b []byte, k protoreflect.Kind, v []byte) ([]byte, bool) {
	if k == protoreflect.StringKind {
		s, n := protowire.ConsumeBytes(v)
		if n < 0 {
			return b, false
		}
		return appendJSONString(b, s)
	}
	var x uint64
	switch k {
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind:
		u, n := protowire.ConsumeFixed32(v)
		if n < 0 {
			return b, false
		}
		x = uint64(u)
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind:
		u, n := protowire.ConsumeFixed64(v)
		if n < 0 {
			return b, false
		}
		x = u
	default:
		u, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return b, false
		}
		x = u
	}
	switch k {
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, x != 0), true
	case protoreflect.Int32Kind:
		return strconv.AppendInt(b, int64(int32(x)), 10), true
	case protoreflect.Sint32Kind:
		return strconv.AppendInt(b, int64(int32(protowire.DecodeZigZag(x&math.MaxUint32))), 10), true
	case protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, int64(int32(uint32(x))), 10), true
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, uint64(uint32(x)), 10), true
	case protoreflect.Int64Kind, protoreflect.Sfixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, int64(x), 10), '"'), true
	case protoreflect.Sint64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, protowire.DecodeZigZag(x), 10), '"'), true
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		b = append(b, '"')
		return append(strconv.AppendUint(b, x, 10), '"'), true
	}
	return b, false
}

// appendJSONString appends s as protojson writes a string; false for
// invalid UTF-8 (protojson's error).
func appendJSONString(b, s []byte) ([]byte, bool) {
	b = append(b, '"')
	for len(s) > 0 {
		c := s[0]
		if c >= ' ' && c < utf8.RuneSelf && c != '"' && c != '\\' {
			b = append(b, c)
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && n == 1:
			return b, false
		case r < ' ' || r == '"' || r == '\\':
			b = append(b, '\\')
			switch r {
			case '"', '\\':
				b = append(b, byte(r))
			case '\b':
				b = append(b, 'b')
			case '\f':
				b = append(b, 'f')
			case '\n':
				b = append(b, 'n')
			case '\r':
				b = append(b, 'r')
			case '\t':
				b = append(b, 't')
			default:
				b = append(b, 'u')
				b = append(b, "0000"[1+(bits.Len32(uint32(r))-1)/4:]...)
				b = strconv.AppendUint(b, uint64(r), 16)
			}
		default:
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
	return append(b, '"'), true
}

// unmarshalProtoJSON decodes data, in the protobuf JSON mapping, into m.
func unmarshalProtoJSON(data []byte, m proto.Message) error {
	if p := flatPlanOf(m.ProtoReflect().Descriptor()); p.ok {
		bp := getFlatBuf()
		bin, ok := p.toBinary(*bp, data)
		*bp = bin
		if ok {
			err := proto.Unmarshal(bin, m)
			putFlatBuf(bp)
			if err == nil {
				return nil
			}
		} else {
			putFlatBuf(bp)
		}
	}
	return discardUnknown.Unmarshal(data, m)
}

// discardUnknown decodes the protobuf JSON mapping, skipping unknown fields.
var discardUnknown = protojson.UnmarshalOptions{DiscardUnknown: true}

// toBinary appends the binary form of the JSON object data to bin; false if
// data must go to protojson.
func (p *flatPlan) toBinary(bin, data []byte) ([]byte, bool) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return bin, false
	}
	i = skipSpace(data, i+1)
	var seen uint32
	if i < len(data) && data[i] == '}' {
		return bin, skipSpace(data, i+1) == len(data)
	}
	for {
		// "name":
		key, j, ok := plainString(data, i)
		if !ok {
			return bin, false
		}
		fi, known := p.byName[string(key)]
		if !known || seen&(1<<fi) != 0 {
			return bin, false
		}
		seen |= 1 << fi
		i = skipSpace(data, j)
		if i == len(data) || data[i] != ':' {
			return bin, false
		}
		i = skipSpace(data, i+1)
		f := &p.fields[fi]
		if bin, i, ok = appendFlatBinary(bin, f, data, i); !ok {
			return bin, false
		}
		i = skipSpace(data, i)
		if i == len(data) {
			return bin, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return bin, skipSpace(data, i+1) == len(data)
		default:
			return bin, false
		}
	}
}

// appendFlatBinary appends the binary field f with the JSON value at
// data[i:], and returns the index after the value.
func appendFlatBinary(bin []byte, f *flatField, data []byte, i int) ([]byte, int, bool) {
	switch f.kind {
	case protoreflect.StringKind:
		s, j, ok := plainString(data, i)
		if !ok {
			return bin, i, false
		}
		bin = protowire.AppendTag(bin, f.num, protowire.BytesType)
		return protowire.AppendBytes(bin, s), j, true
	case protoreflect.BoolKind:
		switch {
		case hasAt(data, i, "true"):
			return protowire.AppendVarint(protowire.AppendTag(bin, f.num, protowire.VarintType), 1), i + 4, true
		case hasAt(data, i, "false"):
			return protowire.AppendVarint(protowire.AppendTag(bin, f.num, protowire.VarintType), 0), i + 5, true
		}
		return bin, i, false
	}
	// An integer: a number, or a string holding one, in plain decimal.
	quoted := i < len(data) && data[i] == '"'
	j := i
	if quoted {
		j++
	}
	neg := j < len(data) && data[j] == '-'
	if neg {
		j++
	}
	var u uint64
	digits := j
	for ; j < len(data) && '0' <= data[j] && data[j] <= '9'; j++ {
		hi, lo := bits.Mul64(u, 10)
		lo, carry := bits.Add64(lo, uint64(data[j]-'0'), 0)
		if hi != 0 || carry != 0 {
			return bin, i, false
		}
		u = lo
	}
	if j == digits || (data[digits] == '0' && j-digits > 1) {
		return bin, i, false
	}
	if quoted {
		if j == len(data) || data[j] != '"' {
			return bin, i, false
		}
		j++
	} else if j < len(data) && (data[j] == '.' || data[j] == 'e' || data[j] == 'E') {
		return bin, i, false
	}
	var x uint64 // the value as its wire type carries it
	switch f.kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if (!neg && u > math.MaxInt32) || (neg && u > -math.MinInt32) {
			return bin, i, false
		}
		v := int64(u)
		if neg {
			v = -v
		}
		switch f.kind {
		case protoreflect.Sint32Kind:
			x = protowire.EncodeZigZag(v)
		case protoreflect.Sfixed32Kind:
			x = uint64(uint32(int32(v)))
		default:
			x = uint64(v)
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if (!neg && u > math.MaxInt64) || (neg && u > 1<<63) {
			return bin, i, false
		}
		v := int64(u)
		if neg {
			v = -v
		}
		x = uint64(v)
		if f.kind == protoreflect.Sint64Kind {
			x = protowire.EncodeZigZag(v)
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if neg || u > math.MaxUint32 {
			return bin, i, false
		}
		x = u
	default: // Uint64Kind, Fixed64Kind
		if neg {
			return bin, i, false
		}
		x = u
	}
	switch f.kind {
	case protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind:
		bin = protowire.AppendFixed32(protowire.AppendTag(bin, f.num, protowire.Fixed32Type), uint32(x))
	case protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind:
		bin = protowire.AppendFixed64(protowire.AppendTag(bin, f.num, protowire.Fixed64Type), x)
	default:
		bin = protowire.AppendVarint(protowire.AppendTag(bin, f.num, protowire.VarintType), x)
	}
	return bin, j, true
}

// plainString returns the contents of the JSON string at data[i:] and the
// index after it, if it has no escapes, no control characters and is valid
// UTF-8.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[i+1 : j]
			return s, j + 1, ascii || utf8.Valid(s)
		case c < ' ' || c == '\\':
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func hasAt(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

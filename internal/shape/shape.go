// Package shape describes message types as JSON sees them: the shapes that
// rpc's method list (Warren.Methods) reports for each method's request and
// reply, read from Go types by reflection and from protobuf descriptors.
package shape

import (
	"reflect"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Shape describes a message type: its JSON type, and for objects their
// fields; protobuf messages are named by their full name.
type Shape struct {
	Type   string  `json:"type"`            // object, string, number, integer, boolean, array, bytes, any
	Proto  string  `json:"proto,omitempty"` // full name of a protobuf message
	Go     string  `json:"go,omitempty"`    // Go type name
	Fields []Field `json:"fields,omitempty"`
	Elem   *Shape  `json:"elem,omitempty"` // element of an array or map value
}

// Field is one field of an object shape.
type Field struct {
	Name  string `json:"name"`
	Shape *Shape `json:"shape"`
}

var protoMessage = reflect.TypeFor[proto.Message]()

// Of describes the messages of Go type t (a struct, a protobuf message, or
// a pointer to one) as the JSON codec reads and writes them.
func Of(t reflect.Type) *Shape { return shapeOf(t, 0) }

func shapeOf(t reflect.Type, depth int) *Shape {
	if reflect.PointerTo(t).Implements(protoMessage) {
		m := reflect.New(t).Interface().(proto.Message)
		sh := protoShape(m.ProtoReflect().Descriptor(), depth)
		sh.Go = t.String()
		return sh
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	sh := &Shape{Go: t.String()}
	switch t.Kind() {
	case reflect.String:
		sh.Type = "string"
	case reflect.Bool:
		sh.Type = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		sh.Type = "integer"
	case reflect.Float32, reflect.Float64:
		sh.Type = "number"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			sh.Type = "bytes"
			break
		}
		sh.Type = "array"
		if depth < 8 {
			sh.Elem = shapeOf(t.Elem(), depth+1)
		}
	case reflect.Map:
		sh.Type = "object"
		if depth < 8 {
			sh.Elem = shapeOf(t.Elem(), depth+1)
		}
	case reflect.Struct:
		sh.Type = "object"
		if depth >= 8 {
			break
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if tag, ok := f.Tag.Lookup("json"); ok {
				n, _, _ := strings.Cut(tag, ",")
				if n == "-" {
					continue
				}
				if n != "" {
					name = n
				}
			}
			sh.Fields = append(sh.Fields, Field{Name: name, Shape: shapeOf(f.Type, depth+1)})
		}
	default:
		sh.Type = "any"
	}
	return sh
}

// protoShape describes a protobuf message as its JSON mapping reads it.
func protoShape(md protoreflect.MessageDescriptor, depth int) *Shape {
	sh := &Shape{Type: "object", Proto: string(md.FullName())}
	if depth >= 8 {
		return sh
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		sh.Fields = append(sh.Fields, Field{Name: fd.JSONName(), Shape: protoFieldShape(fd, depth+1)})
	}
	return sh
}

func protoFieldShape(fd protoreflect.FieldDescriptor, depth int) *Shape {
	var elem *Shape
	if fd.IsMap() {
		elem = protoFieldShape(fd.MapValue(), depth+1)
		return &Shape{Type: "object", Elem: elem}
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		elem = &Shape{Type: "string"}
	case protoreflect.BoolKind:
		elem = &Shape{Type: "boolean"}
	case protoreflect.BytesKind:
		elem = &Shape{Type: "bytes"}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		elem = &Shape{Type: "number"}
	case protoreflect.EnumKind:
		elem = &Shape{Type: "string", Proto: string(fd.Enum().FullName())}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		elem = protoShape(fd.Message(), depth)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		elem = &Shape{Type: "string", Go: "int64"} // the JSON mapping writes 64-bit integers as strings
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		elem = &Shape{Type: "string", Go: "uint64"}
	default: // the 32-bit integer kinds
		elem = &Shape{Type: "integer"}
	}
	if fd.IsList() {
		return &Shape{Type: "array", Elem: elem}
	}
	return elem
}

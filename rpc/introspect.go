package rpc

import (
	"context"
	"reflect"
	"sort"
	"strings"

	"github.com/warrenipc/warren/internal/buildinfo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// IntrospectionMethod is the built-in method that lists a server's methods
// and the shapes of their messages. It takes an empty request.
const IntrospectionMethod = "Warren.Methods"

// MethodList is the reply of IntrospectionMethod.
type MethodList struct {
	Methods []MethodInfo `json:"methods"`
	Version *BuildInfo   `json:"version,omitempty"` // the server's build
}

// BuildInfo is the build of a server's program, from the information the Go
// toolchain embeds (runtime/debug.ReadBuildInfo).
type BuildInfo struct {
	// Version is warren's module version: a tag, a pseudo-version, or
	// "(devel)" when built from a source tree (go run, a replaced module).
	Version string `json:"version"`
	// Revision and Time are the program's version control revision and
	// commit time (RFC 3339), when the build recorded them; Modified
	// reports uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"` // toolchain version, as in go1.26.0
}

// MethodInfo describes one registered method.
type MethodInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"` // unary, server_stream, client_stream or bidi_stream
	Request *Shape `json:"request"`
	Reply   *Shape `json:"reply"`
	// NoSideEffects: registered WithNoSideEffects; clients retry such a
	// call whose connection failed after it was sent.
	NoSideEffects bool `json:"no_side_effects,omitempty"`
}

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

// Empty is an empty message.
type Empty struct{}

func introspectionHandler(s *Server) *handler {
	return newHandler(s, IntrospectionMethod, func(ctx context.Context, _ *Empty) (*MethodList, error) {
		return s.methodList(), nil
	}, nil)
}

func (s *Server) methodList() *MethodList {
	hs := *s.handlers.Load()
	out := &MethodList{Methods: make([]MethodInfo, 0, len(hs))}
	for k, h := range hs {
		if k != h.name {
			continue // the full name of a schema method (WithSchema)
		}
		out.Methods = append(out.Methods, MethodInfo{
			Name: h.name, Kind: h.kind.String(),
			Request: shapeOf(h.reqType, 0), Reply: shapeOf(h.respType, 0), NoSideEffects: h.noSideEffects,
		})
	}
	sort.Slice(out.Methods, func(i, j int) bool { return out.Methods[i].Name < out.Methods[j].Name })
	bi := buildinfo.Get()
	out.Version = &BuildInfo{Version: bi.Version, Revision: bi.Revision, Time: bi.Time, Modified: bi.Modified, Go: bi.Go}
	return out
}

var protoMessage = reflect.TypeFor[proto.Message]()

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
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		elem = &Shape{Type: "string"} // the JSON mapping writes 64-bit integers as strings
	default: // the 32-bit integer kinds
		elem = &Shape{Type: "integer"}
	}
	if fd.IsList() {
		return &Shape{Type: "array", Elem: elem}
	}
	return elem
}

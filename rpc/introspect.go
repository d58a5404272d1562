package rpc

import (
	"context"
	"reflect"
	"sort"

	"github.com/warrenipc/warren/internal/buildinfo"
	"github.com/warrenipc/warren/internal/shape"
	"google.golang.org/protobuf/proto"
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

// Shape describes a message type: its JSON type (object, string, number,
// integer, boolean, array, bytes or any), and for objects their fields;
// protobuf messages are named by their full name.
type Shape = shape.Shape

// Field is one field of an object shape.
type Field = shape.Field

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
			Request: shape.Of(h.reqType), Reply: shape.Of(h.respType), NoSideEffects: h.noSideEffects,
		})
	}
	sort.Slice(out.Methods, func(i, j int) bool { return out.Methods[i].Name < out.Methods[j].Name })
	bi := buildinfo.Get()
	out.Version = &BuildInfo{Version: bi.Version, Revision: bi.Revision, Time: bi.Time, Modified: bi.Modified, Go: bi.Go}
	return out
}

var protoMessage = reflect.TypeFor[proto.Message]()

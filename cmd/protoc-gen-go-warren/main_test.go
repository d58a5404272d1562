package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/warrenipc/warren/examples/counter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run generates code for fd, as protoc does with paths=source_relative,
// and returns the files written by name.
func run(t *testing.T, fd *descriptorpb.FileDescriptorProto) map[string]string {
	t.Helper()
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: []string{fd.GetName()},
		Parameter:      proto.String("paths=source_relative"),
		ProtoFile:      []*descriptorpb.FileDescriptorProto{fd},
	}
	gen, err := protogen.Options{}.New(req)
	if err != nil {
		t.Fatal(err)
	}
	if err := generate(gen); err != nil {
		t.Fatal(err)
	}
	resp := gen.Response()
	if resp.Error != nil {
		t.Fatal(resp.GetError())
	}
	out := map[string]string{}
	for _, f := range resp.File {
		out[f.GetName()] = f.GetContent()
	}
	return out
}

// code is src without its comment lines.
func code(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(strings.TrimSpace(line), "//") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestCounter generates examples/counter's code from its compiled
// descriptor: the result is the committed counter_warren.pb.go but for the
// comments (a compiled descriptor keeps none from the .proto file).
func TestCounter(t *testing.T) {
	out := run(t, protodesc.ToFileDescriptorProto(counter.File_counter_proto))
	want, err := os.ReadFile("../../examples/counter/counter_warren.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := out["counter_warren.pb.go"]; code(got) != code(string(want)) {
		t.Fatalf("generated:\n%s\nwant (examples/counter/counter_warren.pb.go):\n%s", got, want)
	}
}

// TestNoSideEffects: a method with idempotency_level NO_SIDE_EFFECTS is
// registered with rpc.WithNoSideEffects, and only that one.
func TestNoSideEffects(t *testing.T) {
	fd := protodesc.ToFileDescriptorProto(counter.File_counter_proto)
	for _, m := range fd.Service[0].Method {
		if m.GetName() == "Get" {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()}
		}
	}
	got := run(t, fd)["counter_warren.pb.go"]
	if n := strings.Count(got, "rpc.WithNoSideEffects()"); n != 1 ||
		!strings.Contains(got, `rpc.Handle(srv, "Counter.Get", impl.Get, rpc.WithSchema(methods.ByName("Get")), rpc.WithNoSideEffects())`) {
		t.Fatalf("want Counter.Get alone registered with rpc.WithNoSideEffects():\n%s", got)
	}
}

// TestNoServices: a file without services gets no file.
func TestNoServices(t *testing.T) {
	fd := protodesc.ToFileDescriptorProto(counter.File_counter_proto)
	fd.Service = nil
	if out := run(t, fd); len(out) != 0 {
		t.Fatalf("wrote %d files for a file without services", len(out))
	}
}

package codec

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// flatDesc is a flat message with a field of every kind the fast path
// handles, proto3 implicit presence and explicit (optional), and a field
// whose JSON name differs from its proto name.
var flatDesc = func() protoreflect.MessageDescriptor {
	d := descriptorpb.FieldDescriptorProto_Type_value
	var fields []*descriptorpb.FieldDescriptorProto
	var oneofs []*descriptorpb.OneofDescriptorProto
	n := int32(100)
	for _, typ := range []string{"string", "bool", "int32", "sint32", "sfixed32", "int64", "sint64", "sfixed64", "uint32", "fixed32", "uint64", "fixed64"} {
		for _, optional := range []bool{false, true} {
			name := "f_" + typ
			if optional {
				name = "opt_" + typ
			}
			f := &descriptorpb.FieldDescriptorProto{
				Name:   proto.String(name),
				Number: proto.Int32(n), // descending: declaration order is not number order
				Label:  descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
				Type:   descriptorpb.FieldDescriptorProto_Type(d["TYPE_"+strings.ToUpper(typ)]).Enum(),
			}
			if optional {
				f.Proto3Optional = proto.Bool(true)
				f.OneofIndex = proto.Int32(int32(len(oneofs)))
				oneofs = append(oneofs, &descriptorpb.OneofDescriptorProto{Name: proto.String("_" + name)})
			}
			fields = append(fields, f)
			n -= 3
		}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("flat_test.proto"),
		Package: proto.String("warren.codectest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name:      proto.String("Flat"),
			Field:     fields,
			OneofDecl: oneofs,
		}},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().Get(0)
}()

func newFlat() *dynamicpb.Message { return dynamicpb.NewMessage(flatDesc) }

func TestFlatPlan(t *testing.T) {
	if p := flatPlanOf(flatDesc); !p.ok || len(p.fields) != 24 {
		t.Fatalf("Flat: ok %v, %d fields", p.ok, len(p.fields))
	}
	// Not flat: a message field, a repeated field, a well-known type.
	for _, m := range []proto.Message{&descriptorpb.FileDescriptorProto{}, &descriptorpb.FieldOptions{}, wrapperspb.Int64(1)} {
		if flatPlanOf(m.ProtoReflect().Descriptor()).ok {
			t.Errorf("%T is flat", m)
		}
	}
}

// checkFlatJSON checks that the fast path and protojson agree on data:
// both accept it, as the same message, or both refuse it, with the same
// error; and that the fast path writes what protojson writes.
func checkFlatJSON(t *testing.T, data []byte) {
	t.Helper()
	fast, ref := newFlat(), newFlat()
	errF, errR := unmarshalProtoJSON(data, fast), protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, ref)
	if (errF == nil) != (errR == nil) || (errF != nil && errF.Error() != errR.Error()) {
		t.Fatalf("%q: fast path: %v, protojson: %v", data, errF, errR)
	}
	if errF != nil {
		return
	}
	if !proto.Equal(fast, ref) {
		t.Fatalf("%q: fast path %v, protojson %v", data, fast, ref)
	}
	checkFlatMarshal(t, fast)
}

func checkFlatMarshal(t *testing.T, m proto.Message) {
	t.Helper()
	got, errF := appendProtoJSON([]byte("x"), m)
	want, errR := protojson.Marshal(m)
	if (errF == nil) != (errR == nil) {
		t.Fatalf("%v: fast path: %v, protojson: %v", m, errF, errR)
	}
	if errF != nil {
		return
	}
	want = compactJSON(want, 0)
	if string(got[1:]) != string(want) {
		t.Fatalf("fast path %s\nprotojson %s", got[1:], want)
	}
	if _, ok := flatPlanOf(m.ProtoReflect().Descriptor()).appendJSON(nil, m); !ok {
		t.Fatalf("%s: not on the fast path", want)
	}
}

var flatSeeds = []string{
	`{}`, ` { } `, `{"fString":"a","fBool":true,"fInt32":-5,"fSint32":"-7","fSfixed32":2147483647,"fInt64":"9007199254740993",` +
		`"fSint64":-9223372036854775808,"fSfixed64":"-1","fUint32":4294967295,"fFixed32":"0","fUint64":"18446744073709551615","fFixed64":7}`,
	`{"optString":"","optBool":false,"optInt64":"0","optUint32":0,"opt_sint64":"-0"}`,
	`{"f_string":"snake case name", "fInt32" : 1 }`,
	`{"fString":"é \u00e9 \n","fBool":true}`,
	`{"fString":"日本","bye":3}`, `{"bye":{"x":[1,{"y":null}]},"fInt32":4}`, `{"fInt32":1,"bye":}`,
	`{"fInt32":2147483648}`, `{"fInt32":1e2}`, `{"fInt32":"1.0"}`, `{"fInt32":01}`, `{"fUint64":-1}`,
	`{"fInt64":" 1"}`, `{"fInt64":"1 2"}`, `{"fBool":"true"}`, `{"fString":null}`, `{"fString":1}`,
	`{"fInt32":1,"f_int32":2}`, `{"fInt32":1,}`, `{"fInt32":1} x`, `[]`, ``, `{"fString":"\xff"}`,
	`{"fString":"a"`, `{"fInt32":-}`, `{"optFixed64":"18446744073709551616"}`,
}

func TestFlatJSON(t *testing.T) {
	for _, s := range flatSeeds {
		checkFlatJSON(t, []byte(s))
	}
	// Unknown fields are discarded; int64 comes and goes as strings.
	m := newFlat()
	if err := JSON.Unmarshal([]byte(`{"fString":"a","bye":3}`), m); err != nil || !strings.Contains(fmt.Sprint(m), `"a"`) {
		t.Errorf("unknown field: %v %v", m, err)
	}
	if err := JSON.Unmarshal([]byte(`{"fInt64":"7","optInt64":-9}`), m); err != nil {
		t.Fatal(err)
	}
	out, err := JSON.Append(nil, m)
	if err != nil || string(out) != `{"fInt64":"7","optInt64":"-9"}` {
		t.Errorf("got %s, %v", out, err)
	}
	// Strings that need escapes, and invalid UTF-8 (refused by both).
	s := newFlat()
	fd := flatDesc.Fields().ByName("f_string")
	for _, v := range []string{"\"\\\b\f\n\r\t\x00\x1f\x7f", "\u2028 \ufffd é", "\xff"} {
		s.Set(fd, protoreflect.ValueOfString(v))
		checkFlatMarshal(t, s)
	}
}

// FuzzFlatJSON checks the fast path against protojson: on any input, the
// same message or the same error, and the same JSON out; and on any
// message (read from the input as protobuf binary), the same JSON out.
func FuzzFlatJSON(f *testing.F) {
	for _, s := range flatSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFlatJSON(t, data)
		m := newFlat()
		if proto.Unmarshal(data, m) == nil {
			checkFlatMarshal(t, m)
		}
	})
}

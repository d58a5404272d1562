package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestByIDAndFor(t *testing.T) {
	for _, c := range []Codec{Raw, JSON, Proto} {
		got, err := ByID(c.ID())
		if err != nil || got != c {
			t.Errorf("ByID(%d) = %v, %v", c.ID(), got, err)
		}
	}
	if _, err := ByID(9); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("ByID(9) err = %v", err)
	}
	var b []byte
	if For(b) != Raw || For(&b) != Raw || For(wrapperspb.String("x")) != Proto || For(&struct{}{}) != JSON {
		t.Error("For picked the wrong codec")
	}
}

func TestRaw(t *testing.T) {
	out, err := Raw.Append([]byte("ab"), []byte("cd"))
	if err != nil || string(out) != "abcd" {
		t.Fatalf("Append = %q, %v", out, err)
	}
	dst := make([]byte, 0, 16)
	if err := Raw.Unmarshal([]byte("xyz"), &dst); err != nil || string(dst) != "xyz" || cap(dst) != 16 {
		t.Fatalf("Unmarshal = %q (cap %d), %v", dst, cap(dst), err)
	}
	if _, err := Raw.Append(nil, 42); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("Append(int) err = %v", err)
	}
	if err := Raw.Unmarshal(nil, new(string)); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("Unmarshal(*string) err = %v", err)
	}
}

func TestJSON(t *testing.T) {
	type msg struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
		HTML  string `json:"html"`
	}
	out, err := JSON.Append([]byte("prefix:"), msg{"a", 1 << 62, "<b>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `prefix:{"name":"a","value":4611686018427387904,"html":"<b>"}`; string(out) != want {
		t.Fatalf("Append = %s, want %s", out, want)
	}
	var m msg
	if err := JSON.Unmarshal(out[len("prefix:"):], &m); err != nil || m.Value != 1<<62 || m.HTML != "<b>" {
		t.Fatalf("Unmarshal = %+v, %v", m, err)
	}
	// Numbers decoded into interface values stay exact.
	var v map[string]any
	if err := JSON.Unmarshal([]byte(`{"n":9223372036854775807,"f":0.1}`), &v); err != nil {
		t.Fatal(err)
	}
	if n, ok := v["n"].(json.Number); !ok || n.String() != "9223372036854775807" {
		t.Fatalf("n = %#v", v["n"])
	}
	if err := JSON.Unmarshal([]byte(`{} {}`), &v); err == nil {
		t.Error("trailing data accepted")
	}
	if err := JSON.Unmarshal([]byte(`{"name":`), &m); err == nil {
		t.Error("truncated JSON accepted")
	}
	if err := JSON.Unmarshal([]byte(`{"name":"a"} {}`), &m); err == nil {
		t.Error("trailing data accepted (a type without interfaces)")
	}
	// Interfaces anywhere in the type, through pointers, elements and
	// recursive types, get exact numbers too.
	type node struct {
		Next  *node
		Items []map[string]*[1]any
	}
	var nd node
	if err := JSON.Unmarshal([]byte(`{"Next":{"Items":[{"k":[12345678901234567890]}]}}`), &nd); err != nil {
		t.Fatal(err)
	}
	if n, ok := (*nd.Next.Items[0]["k"])[0].(json.Number); !ok || n.String() != "12345678901234567890" {
		t.Fatalf("nested number = %#v", (*nd.Next.Items[0]["k"])[0])
	}
	for typ, want := range map[reflect.Type]bool{reflect.TypeFor[msg](): false, reflect.TypeFor[*node](): true, reflect.TypeFor[[]*msg](): false, reflect.TypeFor[error](): true} {
		if holdsInterface(typ) != want {
			t.Errorf("holdsInterface(%v) = %v", typ, !want)
		}
	}
	// proto.Message values go through protojson.
	out, err = JSON.Append(nil, wrapperspb.String("hi"))
	if err != nil || string(out) != `"hi"` {
		t.Fatalf("protojson Append = %s, %v", out, err)
	}
	w := new(wrapperspb.StringValue)
	if err := JSON.Unmarshal([]byte(`"yo"`), w); err != nil || w.GetValue() != "yo" {
		t.Fatalf("protojson Unmarshal = %v, %v", w, err)
	}
}

func TestProto(t *testing.T) {
	out, err := Proto.Append(nil, wrapperspb.Int64(-5))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(wrapperspb.Int64(-5))
	if string(out) != string(want) {
		t.Fatalf("Append = %x, want %x", out, want)
	}
	v := new(wrapperspb.Int64Value)
	if err := Proto.Unmarshal(out, v); err != nil || v.GetValue() != -5 {
		t.Fatalf("Unmarshal = %v, %v", v, err)
	}
	if _, err := Proto.Append(nil, struct{}{}); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("Append(struct) err = %v", err)
	}
	if err := Proto.Unmarshal(nil, new(int)); !errors.Is(err, ErrUnsupportedType) {
		t.Errorf("Unmarshal(*int) err = %v", err)
	}
	if err := Proto.Unmarshal([]byte{0xff}, v); err == nil {
		t.Error("malformed protobuf accepted")
	}
}

func BenchmarkJSONAppend(b *testing.B) {
	type msg struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
	}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = JSON.Append(buf[:0], &msg{"counter", 42})
	}
}

func BenchmarkProtoAppend(b *testing.B) {
	m := wrapperspb.Bytes(make([]byte, 1024))
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = Proto.Append(buf[:0], m)
	}
}

// TestJSONProtoCompact checks that protobuf messages encode as compact JSON
// (protojson varies its spacing from build to build), strings untouched,
// and that an unknown field is discarded.
func TestJSONProtoCompact(t *testing.T) {
	m, err := structpb.NewStruct(map[string]any{"a b": `c, "d": e\`, "n": 1.5, "l": []any{true, nil}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := JSON.Append([]byte("prefix "), m)
	if err != nil {
		t.Fatal(err)
	}
	want := `prefix {"a b":"c, \"d\": e\\","l":[true,null],"n":1.5}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	var back structpb.Struct
	if err := JSON.Unmarshal(out[len("prefix "):], &back); err != nil || !proto.Equal(&back, m) {
		t.Fatalf("round trip: %v", err)
	}
	var fd descriptorpb.FileDescriptorProto
	if err := JSON.Unmarshal([]byte(`{"name":"a","bye":3}`), &fd); err != nil || fd.GetName() != "a" {
		t.Fatalf("unknown field: %v %v", &fd, err)
	}
}

// FuzzCompactJSON checks compactJSON against encoding/json's Compact on
// valid JSON.
func FuzzCompactJSON(f *testing.F) {
	for _, s := range []string{`{"a b": "c, \"d\": e\\", "n": 1.5}`, " [ 1 ,\n\t2 ] ", `"\\"`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		out := compactJSON(append([]byte("x"), data...), 1)[1:]
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil || buf.String() != string(out) {
			t.Fatalf("compact(%q) = %q, encoding/json says %q (%v)", data, out, buf.String(), err)
		}
	})
}

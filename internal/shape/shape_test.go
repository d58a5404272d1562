package shape

import (
	"encoding/json"
	"reflect"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type node struct {
	Name     string            `json:"name"`
	Skipped  int               `json:"-"`
	Renamed  bool              `json:"on,omitempty"`
	Data     []byte            `json:"data"`
	Kids     []*node           `json:"kids"`
	Labels   map[string]uint16 `json:"labels"`
	_        int               // unexported: left out
	Untagged float64
}

func TestOf(t *testing.T) {
	got, _ := json.Marshal(Of(reflect.TypeFor[*node]()))
	sh := Of(reflect.TypeFor[node]())
	names := []string{}
	for _, f := range sh.Fields {
		names = append(names, f.Name+":"+f.Shape.Type)
	}
	want := []string{"name:string", "on:boolean", "data:bytes", "kids:array", "labels:object", "Untagged:number"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("fields %v, want %v", names, want)
	}
	if sh.Fields[3].Shape.Elem.Type != "object" || sh.Fields[4].Shape.Elem.Type != "integer" {
		t.Errorf("elements: %s", got)
	}
	// A recursive type stops at depth 8.
	depth := 0
	for s := sh; s != nil && len(s.Fields) > 3; s = s.Fields[3].Shape.Elem {
		depth++
	}
	if depth == 0 || depth > 8 {
		t.Errorf("recursive type described %d levels deep", depth)
	}

	ts := Of(reflect.TypeFor[timestamppb.Timestamp]())
	if ts.Proto != "google.protobuf.Timestamp" || ts.Go != "timestamppb.Timestamp" || len(ts.Fields) != 2 || ts.Fields[0].Shape.Type != "string" || ts.Fields[0].Shape.Go != "int64" {
		t.Errorf("Timestamp: %+v", ts)
	}
	st := Of(reflect.TypeFor[structpb.Struct]()) // recursive through Value
	if st.Proto != "google.protobuf.Struct" || st.Fields[0].Shape.Type != "object" || st.Fields[0].Shape.Elem.Proto != "google.protobuf.Value" {
		t.Errorf("Struct: %+v", st.Fields[0].Shape)
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/rpc"
	"github.com/warrenipc/warren/status"
	testv1 "github.com/warrenipc/warren/testdata/proto/warren/test/v1"
	"github.com/warrenipc/warren/transport"
)

// everythingValues are messages covering every field kind of testv1.All at
// its extremes: every one must come back exactly as sent.
func everythingValues(t *testing.T) []*testv1.All {
	t.Helper()
	deep := &testv1.Inner{Label: "0", N: math.MinInt64, Children: []*testv1.Inner{
		{Label: "1", Children: []*testv1.Inner{{Label: "2", N: math.MaxInt64, Children: []*testv1.Inner{{}}}}},
		{},
	}}
	st, err := structpb.NewStruct(map[string]any{
		"null": nil, "n": -1.5, "s": "ü\x00", "b": false,
		"list":   []any{1.0, "two", nil, true, map[string]any{}, []any{}},
		"nested": map[string]any{"deeper": map[string]any{"x": 1e300}},
	})
	if err != nil {
		t.Fatal(err)
	}
	anyInner, err := anypb.New(deep)
	if err != nil {
		t.Fatal(err)
	}
	anyDuration, err := anypb.New(durationpb.New(-1500 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	extremes := &testv1.All{
		Int32S: math.MinInt32, Int64S: math.MinInt64, Uint32S: math.MaxUint32, Uint64S: math.MaxUint64,
		Sint32S: math.MinInt32, Sint64S: math.MaxInt64, Fixed32S: math.MaxUint32, Fixed64S: math.MaxUint64,
		Sfixed32S: math.MinInt32, Sfixed64S: math.MinInt64,
		Floats: math.MaxFloat32, Doubles: math.Copysign(0, -1), Bools: true,
		Strings: "héllo, 世界 🎉 \x00 \u2028", Bytes_: []byte{0x00, 0xff, 0x80, 0x00},
		Kind: testv1.Kind_KIND_MINUS, Inner: deep,
		Int64List:     []int64{math.MinInt64, 0, math.MaxInt64},
		DoubleList:    []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 5e-324, math.MaxFloat64},
		StringList:    []string{"", "é", "\u2028", "\x00"},
		BytesList:     [][]byte{{}, {0x00}, {0xff}},
		KindList:      []testv1.Kind{testv1.Kind_KIND_UNSPECIFIED, testv1.Kind_KIND_MINUS, testv1.Kind_KIND_TWO},
		InnerList:     []*testv1.Inner{{}, deep},
		StringToInt64: map[string]int64{"": math.MinInt64, "ü": math.MaxInt64},
		Int32ToString: map[int32]string{-1: "", math.MinInt32: "x", math.MaxInt32: "世界"},
		Uint64ToInner: map[uint64]*testv1.Inner{math.MaxUint64: deep, 0: {}},
		BoolToBytes:   map[bool][]byte{true: {0x00, 0xff}, false: {}},
		Choice:        &testv1.All_ChoiceString{ChoiceString: ""},
		// Set to their zero values: present, unlike in the empty message.
		OptInt32: proto.Int32(0), OptString: proto.String(""), OptBool: proto.Bool(false),
		OptKind:       testv1.Kind_KIND_UNSPECIFIED.Enum(),
		Timestamp:     &timestamppb.Timestamp{Seconds: -62135596800, Nanos: 0}, // 0001-01-01T00:00:00Z
		Duration:      &durationpb.Duration{Seconds: -315576000000, Nanos: -999999999},
		Struct_:       st,
		Value:         structpb.NewStructValue(st),
		ListValue:     &structpb.ListValue{Values: []*structpb.Value{structpb.NewNullValue(), structpb.NewBoolValue(true)}},
		Any:           anyInner,
		Int64Wrapper:  wrapperspb.Int64(math.MinInt64),
		Uint64Wrapper: wrapperspb.UInt64(math.MaxUint64),
		StringWrapper: wrapperspb.String(""),
		BytesWrapper:  wrapperspb.Bytes([]byte{0x00, 0xff}),
		BoolWrapper:   wrapperspb.Bool(false),
		DoubleWrapper: wrapperspb.Double(math.NaN()),
	}
	return []*testv1.All{
		extremes,
		{}, // nothing set: the optional fields unset
		{
			Int32S: math.MaxInt32, Int64S: math.MaxInt64, Sint32S: math.MaxInt32, Sint64S: math.MinInt64,
			Sfixed32S: math.MaxInt32, Sfixed64S: math.MaxInt64, Floats: math.SmallestNonzeroFloat32,
			Doubles: math.Inf(-1), Choice: &testv1.All_ChoiceInt64{ChoiceInt64: math.MinInt64},
			OptInt32: proto.Int32(math.MinInt32), OptString: proto.String("ü"), OptBool: proto.Bool(true),
			OptKind:       testv1.Kind_KIND_MINUS.Enum(),
			Timestamp:     &timestamppb.Timestamp{Seconds: 253402300799, Nanos: 999999999}, // 9999-12-31T23:59:59.999999999Z
			Duration:      &durationpb.Duration{Seconds: 315576000000, Nanos: 999999999},
			Value:         structpb.NewNullValue(),
			ListValue:     &structpb.ListValue{},
			Struct_:       &structpb.Struct{},
			Any:           anyDuration,
			DoubleWrapper: wrapperspb.Double(math.Inf(1)),
			Uint64Wrapper: wrapperspb.UInt64(0),
		},
		{Doubles: math.NaN(), Floats: float32(math.Inf(-1)), Choice: &testv1.All_ChoiceInner{ChoiceInner: deep}},
		{Choice: &testv1.All_ChoiceKind{ChoiceKind: testv1.Kind_KIND_UNSPECIFIED}, Floats: float32(math.Copysign(0, -1))},
		{Choice: &testv1.All_ChoiceKind{ChoiceKind: testv1.Kind_KIND_MINUS}, Any: &anypb.Any{}},
	}
}

// same fails t unless got is exactly want: proto.Equal (for which NaN
// equals NaN) and the same sign of every zero double and float.
func same(t *testing.T, what string, got, want *testv1.All) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("%s: got\n%v\nwant\n%v", what, got, want)
	}
	if math.Signbit(got.Doubles) != math.Signbit(want.Doubles) || math.Signbit(float64(got.Floats)) != math.Signbit(float64(want.Floats)) {
		t.Fatalf("%s: the sign of a zero was lost: doubles %v floats %v, want %v %v", what, got.Doubles, got.Floats, want.Doubles, want.Floats)
	}
	for i := range want.DoubleList {
		if math.Signbit(got.DoubleList[i]) != math.Signbit(want.DoubleList[i]) {
			t.Fatalf("%s: double_list[%d] is %v, want %v", what, i, got.DoubleList[i], want.DoubleList[i])
		}
	}
}

// serve serves the methods register adds on a new unix socket until the
// test ends, and returns its address.
func serve(t *testing.T, register func(*rpc.Server)) string {
	t.Helper()
	addr := "unix://" + filepath.Join(t.TempDir(), "e.sock")
	l, err := transport.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(nil)
	register(srv)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return addr
}

// TestEverythingRoundTrip calls every method of warren.test.v1.Everything
// through the generated client, with protobuf binary (the generated
// client's default) and with JSON, and checks that every value comes back
// exactly as sent.
func TestEverythingRoundTrip(t *testing.T) {
	addr := serve(t, registerEverything)
	c, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ec := testv1.NewEverythingClient(c)
	values := everythingValues(t)
	for _, tc := range []struct {
		name string
		opts []rpc.CallOption
	}{{"proto", nil}, {"json", []rpc.CallOption{rpc.WithCodec(codec.JSON)}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i, v := range values {
				got, err := ec.Echo(ctx, v, tc.opts...)
				if err != nil {
					t.Fatalf("Echo %d: %v", i, err)
				}
				same(t, "Echo", got, v)

				rs, err := ec.Repeat(ctx, &testv1.RepeatRequest{Message: v, Count: 3}, tc.opts...)
				if err != nil {
					t.Fatalf("Repeat %d: %v", i, err)
				}
				for j := range 3 {
					m, err := rs.Recv()
					if err != nil {
						t.Fatalf("Repeat %d, message %d: %v", i, j, err)
					}
					// Not proto.Clone, which drops a -0.0 in a double field without presence.
					want := &testv1.All{}
					if b, err := proto.Marshal(v); err != nil || proto.Unmarshal(b, want) != nil {
						t.Fatalf("copying value %d: %v", i, err)
					}
					want.Int32S = int32(j)
					same(t, "Repeat", m, want)
				}
				if _, err := rs.Recv(); err != io.EOF {
					t.Fatalf("Repeat %d: end %v, want io.EOF", i, err)
				}
			}

			cs, err := ec.Collect(ctx, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range values {
				if err := cs.Send(v); err != nil {
					t.Fatal(err)
				}
			}
			list, err := cs.CloseAndRecv()
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Messages) != len(values) {
				t.Fatalf("Collect returned %d messages, want %d", len(list.Messages), len(values))
			}
			for i, v := range values {
				same(t, "Collect", list.Messages[i], v)
			}

			ms, err := ec.Mirror(ctx, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range values {
				if err := ms.Send(v); err != nil {
					t.Fatal(err)
				}
				m, err := ms.Recv()
				if err != nil {
					t.Fatal(err)
				}
				same(t, "Mirror", m, v)
			}
			if err := ms.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := ms.Recv(); err != io.EOF {
				t.Fatalf("Mirror: end %v, want io.EOF", err)
			}
		})
	}
}

// TestEverythingHTTP calls Everything.Echo as a plain HTTP client does
// (Connect unary: POST with JSON or binary protobuf) by its full name and
// by its short name.
func TestEverythingHTTP(t *testing.T) {
	addr := serve(t, registerEverything)
	hc := rpc.HTTPClient(addr, nil)
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		contentType string
		marshal     func(proto.Message) ([]byte, error)
		unmarshal   func([]byte, proto.Message) error
	}{
		{"application/json", protojson.Marshal, protojson.Unmarshal},
		{"application/proto", proto.Marshal, proto.Unmarshal},
	} {
		for _, path := range []string{"/warren.test.v1.Everything/Echo", "/Everything.Echo"} {
			for i, v := range everythingValues(t) {
				body, err := tc.marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := hc.Post("http://warren"+path, tc.contentType, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				out, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s value %d: %s: %s", tc.contentType, path, i, resp.Status, out)
				}
				got := &testv1.All{}
				if err := tc.unmarshal(out, got); err != nil {
					t.Fatalf("%s %s value %d: %v in %s", tc.contentType, path, i, err, out)
				}
				same(t, tc.contentType+" "+path, got, v)
			}
		}
	}
}

// TestEverythingClientCodec: the generated client sends protobuf binary
// unless rpc.WithCodec says otherwise. The server here takes JSON only.
func TestEverythingClientCodec(t *testing.T) {
	addr := serve(t, func(srv *rpc.Server) {
		rpc.Handle(srv, "warren.test.v1.Everything.Echo", func(ctx context.Context, req *struct{}) (*struct{}, error) { return req, nil })
	})
	c, err := rpc.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ec := testv1.NewEverythingClient(c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = ec.Echo(ctx, &testv1.All{})
	if se, ok := err.(*status.Error); !ok || se.Code != status.InvalidArgument || !strings.Contains(se.Message, "takes JSON, not proto") {
		t.Fatalf("default codec: got %v, want the JSON-only server's refusal of protobuf", err)
	}
	if _, err := ec.Echo(ctx, &testv1.All{}, rpc.WithCodec(codec.JSON)); err != nil {
		t.Fatalf("JSON: %v", err)
	}
}

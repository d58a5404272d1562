package codec_test

import (
	"testing"

	"github.com/warrenipc/warren/codec"
	counter "github.com/warrenipc/warren/examples/counter"
	"github.com/warrenipc/warren/internal/rawio"
)

// TestFlatJSONAllocs checks that JSON for a flat generated message costs
// only what the message needs: itself, its string and its optional int64.
func TestFlatJSONAllocs(t *testing.T) {
	in := []byte(`{"name":"demo","by":"5"}`)
	out := make([]byte, 0, 256)
	e := &counter.Entry{Name: "demo", Value: 1 << 60}
	allocs := testing.AllocsPerRun(200, func() {
		var req counter.IncRequest
		if err := codec.JSON.Unmarshal(in, &req); err != nil || req.GetBy() != 5 {
			t.Fatal(req.GetBy(), err)
		}
		var err error
		if out, err = codec.JSON.Append(out[:0], e); err != nil {
			t.Fatal(err)
		}
	})
	if string(out) != `{"name":"demo","value":"1152921504606846976"}` {
		t.Errorf("got %s", out)
	}
	if allocs > 3 && !rawio.RaceEnabled { // the race detector's sync.Pool drops buffers
		t.Errorf("%v allocations per request and reply, want 3", allocs)
	}
}

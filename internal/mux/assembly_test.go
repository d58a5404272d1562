package mux_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/wire"
)

// TestAssemblyBudget has a peer start more chunked messages than the
// session's assembly budget (its connection window) covers, each declaring
// its full size in a small first chunk: the session takes buffers at the
// declared size only within the budget, grows the others as their chunks
// arrive, and every message arrives whole.
func TestAssemblyBudget(t *testing.T) {
	const (
		streams = 24
		size    = 1 << 20 // the default stream window: each can be sent whole
		first   = 1 << 10
		frame   = 60 << 10
	)
	got := make(chan []byte, streams)
	ts := newServer(t, func(ctx context.Context, st *mux.Stream, c callInfo) {
		m, err := st.Recv(ctx)
		if err != nil {
			t.Errorf("stream %d: %v", st.ID(), err)
			got <- nil
			return
		}
		got <- bytes.Clone(m.B)
	})
	raw, s := rawClient(t, connKinds[1], ts.config(wire.Settings{}), wire.Settings{})
	budget := int64(wire.DefaultInitialWindow) * 16
	msgs := make([][]byte, streams)
	for i := range streams {
		id := uint32(2*i + 1)
		msgs[i] = payload(uint64(i), size)
		raw.mustWrite(headersFrame(id, 0, "m"), firstChunk(id, size, msgs[i][:first]))
	}
	// Every first chunk was read once a ping sent after them is answered.
	raw.ping(7)
	if r := mux.AsmReserved(s); r > budget || r < budget-size {
		t.Fatalf("%d bytes taken at declared size with %d messages of %d started; budget %d", r, streams, size, budget)
	}
	for i := range streams {
		id := uint32(2*i + 1)
		for off := first; off < size; off += frame {
			end, fl := off+frame, wire.FlagMore
			if end >= size {
				end, fl = size, wire.FlagEnd
			}
			raw.mustWrite(dataFrame(id, fl, msgs[i][off:end]))
		}
	}
	seen := 0
	for range streams {
		m := <-got
		for i := range msgs {
			if msgs[i] != nil && bytes.Equal(m, msgs[i]) {
				msgs[i] = nil
				seen++
				break
			}
		}
	}
	if seen != streams {
		t.Fatalf("%d of %d messages arrived whole", seen, streams)
	}
	if r := mux.AsmReserved(s); r != 0 {
		t.Fatalf("%d bytes of the budget still held after every message arrived", r)
	}
}

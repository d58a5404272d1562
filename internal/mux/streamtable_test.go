package mux

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestStreamTable: streams whose slots collide go to the map, every open
// stream is found by its id and only by it, removal takes the right one
// (and only if it is the one recorded), and close returns them all.
func TestStreamTable(t *testing.T) {
	var tb streamTable
	open := map[uint32]*Stream{}
	newStream := func(id uint32) *Stream {
		st := new(Stream)
		st.idv.Store(id)
		return st
	}
	check := func() {
		t.Helper()
		if tb.count() != len(open) {
			t.Fatalf("count = %d, want %d", tb.count(), len(open))
		}
		for id, st := range open {
			if got := tb.getLocked(id); got != st {
				t.Fatalf("getLocked(%d) = %p, want %p", id, got, st)
			}
		}
		var seen []uint32
		tb.each(func(id uint32, st *Stream) {
			if open[id] != st {
				t.Fatalf("each gave %d -> %p, want %p", id, st, open[id])
			}
			seen = append(seen, id)
		})
		if len(seen) != len(open) {
			t.Fatalf("each gave %d streams, want %d", len(seen), len(open))
		}
	}
	// Three times as many streams as slots: most ids share a slot.
	for id := uint32(1); id < 6*tableSlots; id += 2 {
		st := newStream(id)
		if !tb.addLocked(id, st) {
			t.Fatal("add refused before close")
		}
		open[id] = st
	}
	check()
	if len(tb.more) == 0 {
		t.Fatal("no stream went to the map")
	}
	for _, id := range []uint32{1 + 2*tableSlots, 3 + 4*tableSlots, 5} {
		if tb.getLocked(id+2*tableSlots*3) != nil {
			t.Fatalf("id %d found though never added", id+2*tableSlots*3)
		}
	}
	// A stream recorded under another id, or an impostor, is not removed.
	if tb.removeLocked(7, open[9]) || tb.removeLocked(9, newStream(9)) {
		t.Fatal("removed a stream not recorded under that id")
	}
	// Remove every other stream, slot holders and map entries alike, then
	// reuse the freed slots.
	for id := uint32(1); id < 6*tableSlots; id += 4 {
		if !tb.removeLocked(id, open[id]) {
			t.Fatalf("remove %d failed", id)
		}
		delete(open, id)
	}
	check()
	for id := 6 * uint32(tableSlots); id < 8*tableSlots; id += 2 { // even: server-opened ids
		st := newStream(id + 1)
		tb.addLocked(id+1, st)
		open[id+1] = st
	}
	check()
	// A stream whose id changed (released and reused) is not found under
	// the old one.
	for id, st := range open {
		st.idv.Store(0)
		if tb.fast(id) != nil {
			t.Fatalf("fast lookup found stream %d under an id it no longer has", id)
		}
		st.idv.Store(id)
	}

	all := tb.closeLocked()
	if len(all) != len(open) || tb.count() != 0 || tb.addLocked(1, newStream(1)) {
		t.Fatalf("close returned %d of %d streams (count %d) or still accepts", len(all), len(open), tb.count())
	}
	for _, st := range all {
		if open[st.ID()] != st {
			t.Fatalf("close returned stream %d that was not open", st.ID())
		}
	}
	ids := make([]uint32, 0, len(all))
	for _, st := range all {
		ids = append(ids, st.ID())
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != len(all) {
		t.Fatal("close returned a stream twice")
	}
}

// TestStreamTableConcurrentRemove: removals without the lock, racing with
// removals under it and with close, account for every stream exactly once.
func TestStreamTableConcurrentRemove(t *testing.T) {
	for round := range 50 {
		var tb streamTable
		var mu sync.Mutex // plays Session.mu
		var streams []*Stream
		for id := uint32(1); id < 4*tableSlots; id += 2 {
			st := new(Stream)
			st.idv.Store(id)
			tb.addLocked(id, st)
			streams = append(streams, st)
		}
		var removed atomic.Int32
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := g; i < len(streams); i += 4 {
					st := streams[i]
					ok := tb.removeFast(st.ID(), st)
					if !ok {
						mu.Lock()
						ok = tb.removeLocked(st.ID(), st)
						mu.Unlock()
					}
					if ok {
						removed.Add(1)
					}
				}
			})
		}
		var closed []*Stream
		if round%2 == 0 {
			mu.Lock()
			closed = tb.closeLocked()
			mu.Unlock()
		}
		wg.Wait()
		if round%2 == 1 {
			closed = tb.closeLocked()
		}
		if got := int(removed.Load()) + len(closed); got != len(streams) {
			t.Fatalf("round %d: %d removed + %d closed, want %d", round, removed.Load(), len(closed), len(streams))
		}
		if tb.count() != 0 {
			t.Fatalf("round %d: count %d after all were removed", round, tb.count())
		}
	}
}

package mux

import "sync/atomic"

// streamTable maps the ids of a session's open streams to the streams. Most
// live in a small array indexed by the low bits of id/2, which the reader
// consults without the session's lock (Session.lookup), one atomic load per
// frame, and from which a stream is removed with one compare-and-swap
// (removeFast); a stream whose slot is taken by an older one goes in a map.
// Ids grow by two per stream, so the streams open at one time rarely
// collide. Additions, and everything that touches the map, are made with
// Session.mu held.
type streamTable struct {
	slots  [tableSlots]atomic.Pointer[Stream]
	more   map[uint32]*Stream // streams whose slot was taken
	n      atomic.Int32       // streams in slots and more
	closed bool               // the session ended: nothing is added
}

// tableSlots is the size of a streamTable's array: 512 bytes per session.
const tableSlots = 64

func (t *streamTable) slot(id uint32) *atomic.Pointer[Stream] {
	return &t.slots[(id>>1)&(tableSlots-1)]
}

// count returns the number of streams in the table.
func (t *streamTable) count() int { return int(t.n.Load()) }

// fast returns the stream with the given id if it is in the array.
func (t *streamTable) fast(id uint32) *Stream {
	if st := t.slot(id).Load(); st != nil && st.ID() == id {
		return st
	}
	return nil
}

func (t *streamTable) getLocked(id uint32) *Stream {
	if st := t.fast(id); st != nil {
		return st
	}
	return t.more[id]
}

// addLocked records st under id, unless the table is closed.
func (t *streamTable) addLocked(id uint32, st *Stream) bool {
	if t.closed {
		return false
	}
	if p := t.slot(id); p.Load() == nil {
		p.Store(st)
	} else {
		if t.more == nil {
			t.more = make(map[uint32]*Stream)
		}
		t.more[id] = st
	}
	t.n.Add(1)
	return true
}

// removeFast removes st, recorded under id, if it is in the array, without
// the lock, and reports whether it did.
func (t *streamTable) removeFast(id uint32, st *Stream) bool {
	if st != nil && t.slot(id).CompareAndSwap(st, nil) {
		t.n.Add(-1)
		return true
	}
	return false
}

// removeLocked removes st, recorded under id, and reports whether it was
// there (and not removed meanwhile by another goroutine).
func (t *streamTable) removeLocked(id uint32, st *Stream) bool {
	if t.removeFast(id, st) {
		return true
	}
	if st != nil && t.more[id] == st {
		delete(t.more, id)
		t.n.Add(-1)
		return true
	}
	return false
}

// each calls fn for every stream in the table; fn may remove the stream it
// is given.
func (t *streamTable) each(fn func(id uint32, st *Stream)) {
	for i := range t.slots {
		if st := t.slots[i].Load(); st != nil {
			fn(st.ID(), st)
		}
	}
	for id, st := range t.more {
		fn(id, st)
	}
}

// closeLocked empties the table, closes it, and returns what it held.
func (t *streamTable) closeLocked() []*Stream {
	var all []*Stream
	for i := range t.slots {
		if st := t.slots[i].Swap(nil); st != nil {
			all = append(all, st) // (one that removeFast took meanwhile is not here)
		}
	}
	for _, st := range t.more {
		all = append(all, st)
	}
	t.n.Add(-int32(len(all)))
	t.more, t.closed = nil, true
	return all
}

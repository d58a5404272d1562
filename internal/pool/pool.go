// Package pool recycles message buffers in power-of-two size classes.
//
// Buffers of 64 KiB or more are also kept, a few per class, in a stack
// that hands out the most recently returned one first. A large buffer that
// was just written or read is still in the processor's caches; sync.Pool
// alone may hand out an older one (it takes from another processor's list
// oldest first), and copying a message into memory that is no longer
// cached costs more than the copy itself: a bare socket echoing 1 MiB
// messages runs at two thirds of its speed when it cycles through four
// buffers instead of reusing one (BENCHMARKS.md, "Hot buffers").
package pool

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// Buf is a pooled byte buffer. B's length is what Get was asked for.
type Buf struct {
	B        []byte
	borrowed bool // B is someone else's memory (Borrow): Put ignores it
}

// Borrow returns a Buf of b, memory that is not the pool's: Put never
// pools it.
func Borrow(b []byte) Buf { return Buf{B: b, borrowed: true} }

const (
	minShift = 9  // 512 B
	maxShift = 24 // 16 MiB; larger buffers are not pooled

	hotShift = 16 // 64 KiB: the smallest class with a stack of hot buffers
	hotDepth = 4  // buffers per stack
)

var classes [maxShift - minShift + 1]sync.Pool

// hot holds the stacks of the classes from hotShift up.
var hot [maxShift - hotShift + 1]hotStack

// hotStack is a class's most recently returned buffers, newest last.
type hotStack struct {
	mu   sync.Mutex
	n    int
	bufs [hotDepth]*Buf
}

func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	return bits.Len(uint(n-1)) - minShift
}

// Get returns a buffer of length n. Its contents are undefined.
func Get(n int) *Buf {
	c := class(n)
	if c >= len(classes) {
		return &Buf{B: make([]byte, n)}
	}
	if c >= hotShift-minShift {
		h := &hot[c-(hotShift-minShift)]
		h.mu.Lock()
		if h.n > 0 {
			h.n--
			b := h.bufs[h.n]
			h.bufs[h.n] = nil
			h.mu.Unlock()
			b.B = b.B[:n]
			return b
		}
		h.mu.Unlock()
	}
	if v := classes[c].Get(); v != nil {
		b := v.(*Buf)
		b.B = b.B[:n]
		return b
	}
	return &Buf{B: make([]byte, n, 1<<(c+minShift))}
}

// Put gives b back for reuse. b must not be used afterwards. Buffers of
// another capacity than Get's (or nil) are ignored, as is borrowed memory.
func Put(b *Buf) {
	if b == nil || b.borrowed {
		return
	}
	c := cap(b.B)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	k := class(c)
	if k >= hotShift-minShift {
		h := &hot[k-(hotShift-minShift)]
		h.mu.Lock()
		if h.n == hotDepth { // the oldest goes to the sync.Pool
			old := h.bufs[0]
			copy(h.bufs[:], h.bufs[1:])
			h.bufs[hotDepth-1] = b
			h.mu.Unlock()
			classes[k].Put(old)
			return
		}
		h.bufs[h.n] = b
		h.n++
		h.mu.Unlock()
		return
	}
	classes[k].Put(b)
}

// The stacks are emptied into the sync.Pools after every garbage
// collection, so that buffers nobody asks for are freed as sync.Pool frees
// them: a stack holds memory only while its class is in use.
func init() { watchGC() }

type gcSentinel struct{ _ *byte }

func watchGC() {
	runtime.AddCleanup(new(gcSentinel), func(struct{}) {
		drainHot()
		watchGC()
	}, struct{}{})
}

// drains counts drainHot's runs (for tests).
var drains atomic.Uint64

func drainHot() {
	drains.Add(1)
	for i := range hot {
		h := &hot[i]
		h.mu.Lock()
		bufs := h.bufs
		n := h.n
		h.bufs, h.n = [hotDepth]*Buf{}, 0
		h.mu.Unlock()
		for _, b := range bufs[:n] {
			classes[i+hotShift-minShift].Put(b)
		}
	}
}

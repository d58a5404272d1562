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
	"slices"
	"sync"
	"sync/atomic"
)

// Buf is a pooled byte buffer. B's length is what Get was asked for.
type Buf struct {
	B        []byte
	borrowed bool // B is someone else's memory (Borrow): Put ignores it

	// Free, if set on a borrowed Buf, is called once by Put: it releases
	// what the Buf holds that is not the pool's (a mapping, descriptors).
	Free func(*Buf)
	// Files are descriptors that came with the message in B; whoever
	// takes one removes it, and Free closes the rest.
	Files []int
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

// hotFor returns the stack of class c, or nil for a class without one.
func hotFor(c int) *hotStack {
	if c < hotShift-minShift {
		return nil
	}
	return &hot[c-(hotShift-minShift)]
}

// pop returns the newest buffer, or nil.
func (h *hotStack) pop() *Buf {
	var b *Buf
	h.mu.Lock()
	if h.n > 0 {
		h.n--
		b, h.bufs[h.n] = h.bufs[h.n], nil
	}
	h.mu.Unlock()
	return b
}

// push adds b as the newest buffer and returns the oldest if the stack was
// full (nil otherwise).
func (h *hotStack) push(b *Buf) (evicted *Buf) {
	h.mu.Lock()
	if h.n == hotDepth {
		evicted = h.bufs[0]
		copy(h.bufs[:], h.bufs[1:])
		h.n--
	}
	h.bufs[h.n] = b
	h.n++
	h.mu.Unlock()
	return evicted
}

// take empties the stack and returns what it held.
func (h *hotStack) take() []*Buf {
	h.mu.Lock()
	defer h.mu.Unlock()
	bufs := slices.Clone(h.bufs[:h.n])
	h.bufs, h.n = [hotDepth]*Buf{}, 0
	return bufs
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
	if h := hotFor(c); h != nil {
		if b := h.pop(); b != nil {
			b.B = b.B[:n]
			return b
		}
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
		if b != nil && b.Free != nil {
			f := b.Free
			b.Free = nil
			f(b)
		}
		return
	}
	c := cap(b.B)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	k := class(c)
	if h := hotFor(k); h != nil {
		b = h.push(b) // the oldest, if any, goes to the sync.Pool
		if b == nil {
			return
		}
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
	for c := range classes {
		if h := hotFor(c); h != nil {
			for _, b := range h.take() {
				classes[c].Put(b)
			}
		}
	}
}

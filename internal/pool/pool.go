// Package pool recycles message buffers in power-of-two size classes.
package pool

import (
	"math/bits"
	"sync"
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
)

var classes [maxShift - minShift + 1]sync.Pool

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
	if v := classes[c].Get(); v != nil {
		b := v.(*Buf)
		b.B = b.B[:n]
		return b
	}
	return &Buf{B: make([]byte, n, 1<<(c+minShift))}
}

// Put returns b to the pool. The caller must not use b afterwards.
func Put(b *Buf) {
	if b == nil || b.borrowed {
		return
	}
	c := cap(b.B)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	classes[class(c)].Put(b)
}

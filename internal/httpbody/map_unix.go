//go:build unix

package httpbody

import (
	"syscall"

	"github.com/warrenipc/warren/internal/pool"
)

// mapBody returns a buffer of n bytes in an anonymous mapping of its own:
// its pages cost memory once written, and pool.Put unmaps it.
func mapBody(n int) *pool.Buf {
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return pool.Get(n)
	}
	b := pool.Borrow(m)
	b.Free = func(*pool.Buf) { syscall.Munmap(m) }
	return &b
}

package shm

import (
	"sync"
	"unsafe"
)

// The memfds behind the mappings of received shared messages, by the
// mapping's address, so that a message sent on unchanged (an echo, a
// proxy) travels as the same sealed memfd, without a copy.
var (
	regMu sync.Mutex
	reg   = map[uintptr]mapped{}
)

type mapped struct {
	fd int
	n  int
}

// Register records that b, a mapping of Map, is of the memfd fd.
func Register(b []byte, fd int) {
	regMu.Lock()
	reg[uintptr(unsafe.Pointer(unsafe.SliceData(b)))] = mapped{fd, len(b)}
	regMu.Unlock()
}

// Unregister forgets b and returns its memfd.
func Unregister(b []byte) int {
	k := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	regMu.Lock()
	m := reg[k]
	delete(reg, k)
	regMu.Unlock()
	return m.fd
}

// DupOf returns a duplicate of the memfd whose whole mapping b is, if b
// is one: the caller closes it.
func DupOf(b []byte) (int, bool) {
	if len(b) == 0 {
		return -1, false
	}
	regMu.Lock()
	defer regMu.Unlock()
	m, ok := reg[uintptr(unsafe.Pointer(unsafe.SliceData(b)))]
	if !ok || m.n != len(b) {
		return -1, false
	}
	fd, err := Dup(m.fd)
	return fd, err == nil
}

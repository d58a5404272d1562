package shm

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A region is a mapping of a memfd that this process holds: a shared
// message received (read-only, sealed), or a buffer of NewBuffer (writable
// until it is first sent, then read-only and sealed). Regions are found by
// the address of their mapping, so that a message that is a whole region
// is sent as its memfd, without a copy; and by the memfd's inode, so that
// a memfd that arrives while this process has it mapped (an echo of a
// buffer it sent) is not mapped again: mapping 16 MiB costs 4096 page
// faults or a MAP_POPULATE, reusing the mapping none.
type region struct {
	fd       int
	b        []byte
	ino      inode
	refs     int  // the owner of a buffer, and each message viewing it
	writable bool // a buffer not yet sealed
}

type inode struct{ dev, ino uint64 }

var (
	regMu  sync.Mutex // protects the following
	byAddr = map[uintptr]*region{}
	byIno  = map[inode]*region{}
)

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func (r *region) add() {
	byAddr[addrOf(r.b)] = r
	byIno[r.ino] = r
}

// NewBuffer returns a writable mapping of a new memfd of n bytes, whose
// pages are allocated (MAP_POPULATE: one call rather than a fault per
// page). The first send of the whole buffer seals it (Sendable): it
// becomes read-only. Release frees it.
func NewBuffer(n int) ([]byte, error) {
	if n <= 0 || n > 1<<40 {
		return nil, fmt.Errorf("warren: shared buffer of %d bytes", n)
	}
	fd, err := unix.MemfdCreate("warren", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	var st unix.Stat_t
	if err = unix.Ftruncate(fd, int64(n)); err != nil {
		err = fmt.Errorf("ftruncate memfd: %w", err)
	} else if err = unix.Fstat(fd, &st); err != nil {
		err = fmt.Errorf("fstat memfd: %w", err)
	}
	var b []byte
	if err == nil {
		if b, err = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			err = fmt.Errorf("mmap memfd: %w", err)
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	regMu.Lock()
	(&region{fd: fd, b: b, ino: inode{st.Dev, st.Ino}, refs: 1, writable: true}).add()
	regMu.Unlock()
	return b, nil
}

// Open checks that fd is a memfd sealed with at least Seals whose size is
// exactly length (Check), then returns a read-only view of it: the
// mapping this process already has of the same memfd if there is one,
// else a new mapping (MAP_POPULATE if populate). On success fd belongs to
// the view (it may be closed at once); Release frees the view.
func Open(fd int, length uint64, populate bool) ([]byte, error) {
	st, err := check(fd, length)
	if err != nil {
		return nil, err
	}
	ino := inode{st.Dev, st.Ino}
	regMu.Lock()
	if r := byIno[ino]; r != nil && !r.writable && uint64(len(r.b)) == length {
		r.refs++
		regMu.Unlock()
		unix.Close(fd)
		return r.b, nil
	}
	regMu.Unlock()
	b, err := mapRO(fd, length, populate)
	if err != nil {
		return nil, err
	}
	regMu.Lock()
	r := &region{fd: fd, b: b, ino: ino, refs: 1}
	byAddr[addrOf(b)] = r
	if byIno[ino] == nil {
		byIno[ino] = r
	}
	regMu.Unlock()
	return b, nil
}

// Release drops a reference to the region b starts (a view of Open, a
// buffer of NewBuffer); the last one unmaps it and closes its memfd. It
// reports false if b starts no region.
func Release(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	regMu.Lock()
	r := byAddr[addrOf(b)]
	if r == nil {
		regMu.Unlock()
		return false
	}
	if r.refs--; r.refs > 0 {
		regMu.Unlock()
		return true
	}
	delete(byAddr, addrOf(r.b))
	if byIno[r.ino] == r {
		delete(byIno, r.ino)
	}
	regMu.Unlock()
	unix.Munmap(r.b)
	unix.Close(r.fd)
	return true
}

// Sendable returns a duplicate of the memfd of the region msg is, whole,
// if it is one: the caller sends and closes it. A buffer of NewBuffer is
// sealed first: its mapping is replaced by a read-only one at the same
// address, since a memfd cannot be sealed against writes while a writable
// shared mapping of it exists. ok is false if msg is not a whole region,
// or if sealing failed (the message is then copied).
func Sendable(msg []byte) (fd int, ok bool) {
	if len(msg) == 0 {
		return -1, false
	}
	regMu.Lock()
	defer regMu.Unlock()
	r := byAddr[addrOf(msg)]
	if r == nil || len(r.b) != len(msg) {
		return -1, false
	}
	if r.writable {
		if seal(r) != nil {
			return -1, false
		}
		r.writable = false
	}
	fd, err := Dup(r.fd)
	return fd, err == nil
}

// seal makes r's mapping read-only and seals its memfd. The read-only
// mapping is of a read-only descriptor of the memfd (reopened through
// /proc/self/fd): a read-only mapping of a writable descriptor could be
// made writable again, so the kernel would still refuse F_SEAL_WRITE.
// MAP_FIXED replaces the writable mapping in one step: the buffer's
// address never becomes unmapped.
func seal(r *region) error {
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", r.fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reopen memfd: %w", err)
	}
	defer unix.Close(ro)
	if _, err := unix.MmapPtr(ro, 0, unsafe.Pointer(unsafe.SliceData(r.b)), uintptr(len(r.b)), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("remap memfd read-only: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(r.fd), unix.F_ADD_SEALS, Seals); err != nil {
		return fmt.Errorf("seal memfd: %w", err)
	}
	return nil
}

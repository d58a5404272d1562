package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Seals are the seals a shared message's memfd must carry: its size and
// contents can no longer change, nor can the seals.
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL

// ErrRefused is wrapped by the errors of Map: the descriptor is not a
// sealed memfd of the declared size.
var ErrRefused = errors.New("warren: shared message refused")

// NewSealed returns a memfd holding a copy of msg, sealed with Seals. The
// caller closes it.
func NewSealed(msg []byte) (int, error) {
	fd, err := unix.MemfdCreate("warren", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := fill(fd, msg); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func fill(fd int, msg []byte) error {
	if err := unix.Ftruncate(fd, int64(len(msg))); err != nil {
		return fmt.Errorf("ftruncate memfd: %w", err)
	}
	for off := 0; off < len(msg); {
		n, err := unix.Pwrite(fd, msg[off:], int64(off))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("write memfd: %w", err)
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals); err != nil {
		return fmt.Errorf("seal memfd: %w", err)
	}
	return nil
}

// Map checks that fd is a memfd sealed with at least Seals whose size is
// exactly length, then maps it read-only. It checks before it maps, so
// that the file can neither change nor shrink under the mapping (a read
// past the end of a shrunk file would raise SIGBUS). fd is not closed.
func Map(fd int, length uint64, populate bool) ([]byte, error) {
	if _, err := check(fd, length); err != nil {
		return nil, err
	}
	return mapRO(fd, length, populate)
}

func mapRO(fd int, length uint64, populate bool) ([]byte, error) {
	flags := unix.MAP_SHARED
	if populate {
		flags |= unix.MAP_POPULATE
	}
	b, err := unix.Mmap(fd, 0, int(length), unix.PROT_READ, flags)
	if err != nil {
		return nil, fmt.Errorf("mmap shared message: %w", err)
	}
	return b, nil
}

// check checks that fd is a memfd sealed with at least Seals whose size
// is exactly length, and returns its fstat.
func check(fd int, length uint64) (unix.Stat_t, error) {
	var st unix.Stat_t
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return st, fmt.Errorf("%w: not a memfd (F_GET_SEALS: %v)", ErrRefused, err)
	}
	if seals&Seals != Seals {
		return st, fmt.Errorf("%w: seals %#x, want %#x", ErrRefused, seals, Seals)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return st, fmt.Errorf("%w: fstat: %v", ErrRefused, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%w: not a regular file", ErrRefused)
	}
	if st.Size < 0 || uint64(st.Size) != length {
		return st, fmt.Errorf("%w: file of %d bytes, message of %d", ErrRefused, st.Size, length)
	}
	if length > 1<<40 {
		return st, fmt.Errorf("%w: %d bytes", ErrRefused, length)
	}
	return st, nil
}

// Unmap unmaps a mapping of Map.
func Unmap(b []byte) { unix.Munmap(b) }

// Dup returns a duplicate of fd (close-on-exec).
func Dup(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// CloseAll closes fds.
func CloseAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

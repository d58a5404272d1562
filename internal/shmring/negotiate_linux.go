package shmring

import (
	"errors"
	"fmt"
	"math/bits"
	"net"

	"github.com/warrenipc/warren/internal/shm"
	"golang.org/x/sys/unix"
)

// The byte a client sends on the socket after the prefaces when both
// sides announced a ring.
const (
	byteRing   = 'R' // with the memfd (SCM_RIGHTS): frames go on the rings
	byteSocket = 'S' // no memfd: frames stay on the socket
)

// Seals are the seals the memfd must carry: its size cannot change, nor
// can its seals (no seal against writing can be added later).
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Ask returns the ShmRing a side announces on conn for a configured
// want: want on a unix socket, 0 elsewhere.
func Ask(conn net.Conn, want uint32) uint32 {
	if want == 0 || shm.UnixOf(conn) == nil {
		return 0
	}
	return want
}

// Answer returns the ShmRing a server that wants want announces to a
// client that announced ask: the smaller, rounded down to a power of
// two; 0 if either is 0, the result is under MinSize, or conn is not a
// unix socket.
func Answer(conn net.Conn, want, ask uint32) uint32 {
	n := min(Ask(conn, want), ask, MaxSize)
	if n < MinSize {
		return 0
	}
	return 1 << (bits.Len32(n) - 1)
}

// Client switches a client's connection to the rings once the prefaces
// are exchanged: ask is what it announced, answer what the server did.
// Unless both are set it returns conn. Otherwise it sends the switch byte:
// with a new memfd, and returns the *Conn, or, if the answer is not a
// ring size it asked for or the memfd cannot be made, without one, and
// returns conn. On error conn is not closed.
func Client(conn net.Conn, ask, answer uint32) (net.Conn, error) {
	if ask == 0 || answer == 0 {
		return conn, nil
	}
	uc := shm.UnixOf(conn)
	if uc == nil {
		return nil, errors.New("warren: shared-memory ring on a connection that is not a unix socket")
	}
	size := int(answer)
	if answer > ask || !ValidSize(size) {
		_, err := uc.Write([]byte{byteSocket})
		return conn, err
	}
	fd, mem, err := create(size)
	if err != nil {
		_, err := uc.Write([]byte{byteSocket})
		return conn, err
	}
	_, _, err = uc.WriteMsgUnix([]byte{byteRing}, unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("warren: sending the shared-memory ring: %w", err)
	}
	return newConn(conn, uc, mem, size, true)
}

// create makes the sealed memfd of two rings of size bytes and maps it.
func create(size int) (int, []byte, error) {
	fd, err := unix.MemfdCreate("ring.warren", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, nil, err
	}
	if err = unix.Ftruncate(fd, int64(MapLen(size))); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals)
	}
	var mem []byte
	if err == nil {
		mem, err = unix.Mmap(fd, 0, MapLen(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, mem, nil
}

// Server reads a client's switch byte once the server announced answer
// (not 0) in its preface, and returns the *Conn over the client's memfd,
// or conn if the client keeps the socket. A switch byte that is neither,
// or a descriptor that is not a memfd sealed with Seals (and not against
// writing) of MapLen(answer) bytes, is an error. Set a deadline on conn
// first. On error conn is not closed.
func Server(conn net.Conn, answer uint32) (net.Conn, error) {
	uc := shm.UnixOf(conn)
	if uc == nil {
		return nil, errors.New("warren: shared-memory ring on a connection that is not a unix socket")
	}
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	var fds []int
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer shm.CloseAll(fds)
	switch {
	case err != nil:
		return nil, fmt.Errorf("warren: reading the shared-memory ring switch: %w", err)
	case n != 1:
		return nil, errors.New("warren: reading the shared-memory ring switch: connection closed")
	case b[0] == byteSocket && len(fds) == 0:
		return conn, nil
	case b[0] != byteRing || len(fds) != 1 || flags&unix.MSG_CTRUNC != 0:
		return nil, fmt.Errorf("warren: shared-memory ring switch %q with %d descriptors", b[0], len(fds))
	}
	size := int(answer)
	mem, err := mapPeer(fds[0], size)
	if err != nil {
		return nil, err
	}
	return newConn(conn, uc, mem, size, false)
}

// mapPeer checks the peer's memfd before it maps it: a file that could
// shrink under the mapping would fault the reader (SIGBUS).
func mapPeer(fd, size int) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("warren: shared-memory ring: not a memfd (F_GET_SEALS: %v)", err)
	}
	if seals&Seals != Seals || seals&(unix.F_SEAL_WRITE|unix.F_SEAL_FUTURE_WRITE) != 0 {
		return nil, fmt.Errorf("warren: shared-memory ring: memfd seals %#x, want %#x and no write seal", seals, Seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("warren: shared-memory ring: fstat: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(MapLen(size)) {
		return nil, fmt.Errorf("warren: shared-memory ring: memfd of %d bytes, want %d", st.Size, MapLen(size))
	}
	mem, err := unix.Mmap(fd, 0, MapLen(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("warren: shared-memory ring: mmap: %w", err)
	}
	return mem, nil
}

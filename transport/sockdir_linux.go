package transport

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// fdPath returns a path naming the open directory fd, or "" if /proc is
// not mounted.
func fdPath(fd int) string {
	p := "/proc/self/fd/" + strconv.Itoa(fd)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// chownChmodAt changes the owner and mode of the socket named name in dirfd
// through an O_PATH handle on it, so that both land on the inode id.
// fchmodat(2) with AT_SYMLINK_NOFOLLOW needs fchmodat2 (Linux 6.6); older
// kernels change the mode through /proc/self/fd.
func chownChmodAt(dirfd int, name string, id fileID, perm fs.FileMode, owner *Owner) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open socket file: %w", os.NewSyscallError("openat", err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("inspect socket file: %w", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || (fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}) != id {
		return fmt.Errorf("socket file replaced during Listen")
	}
	if owner != nil && (owner.UID != -1 || owner.GID != -1) {
		if err := unix.Fchownat(fd, "", owner.UID, owner.GID, unix.AT_EMPTY_PATH); err != nil {
			return fmt.Errorf("set owner: %w", os.NewSyscallError("fchownat", err))
		}
	}
	err = unix.Fchmodat(fd, "", uint32(perm.Perm()), unix.AT_EMPTY_PATH)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		err = unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), uint32(perm.Perm()))
	}
	if err != nil {
		return fmt.Errorf("set mode: %w", os.NewSyscallError("fchmodat", err))
	}
	return nil
}

//go:build unix && !linux

package transport

import (
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// fdPath returns "": there is no portable path naming an open directory.
func fdPath(int) string { return "" }

// chownChmodAt changes the owner and mode of the socket named name in dirfd
// without following a symbolic link (the BSDs and macOS support
// AT_SYMLINK_NOFOLLOW for both); setOwnerMode checks the inode before and
// after.
func chownChmodAt(dirfd int, name string, _ fileID, perm fs.FileMode, owner *Owner) error {
	if owner != nil && (owner.UID != -1 || owner.GID != -1) {
		if err := unix.Fchownat(dirfd, name, owner.UID, owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("set owner: %w", os.NewSyscallError("fchownat", err))
		}
	}
	if err := unix.Fchmodat(dirfd, name, uint32(perm.Perm()), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set mode: %w", os.NewSyscallError("fchmodat", err))
	}
	return nil
}

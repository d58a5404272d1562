//go:build unix

package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// dirHandle is an open directory in which Listen creates, inspects and
// changes entries by name, so that no symbolic link anywhere on the way
// redirects what it does.
type dirHandle struct {
	fd   int
	path string // for messages and for binding where /proc is missing
}

// openDir opens dir, after resolving the symbolic links its path has now
// (such as /var/run to /run, or /tmp to /private/tmp), without following
// any link at its last component. It refuses, with ErrUnsafeDir, a
// directory that others may write to without the sticky bit: any user could
// rename the socket away and put their own in its place.
func openDir(dir string) (*dirHandle, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("open directory: %w", err)
	}
	fd, err := unix.Open(resolved, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open directory %s: %w", dir, os.NewSyscallError("open", err))
	}
	d := &dirHandle{fd: fd, path: resolved}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.close()
		return nil, fmt.Errorf("inspect directory %s: %w", dir, os.NewSyscallError("fstat", err))
	}
	if st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0 {
		d.close()
		return nil, fmt.Errorf("%w: directory %s (mode %#o) could have the socket replaced by anyone: remove the write permission of others (chmod o-w) or set the sticky bit (chmod +t)", ErrUnsafeDir, dir, st.Mode&0o777)
	}
	return d, nil
}

func (d *dirHandle) close() { unix.Close(d.fd) }

// mkdirPrivate creates a directory of mode 0700 named .warren-N in d and
// returns its name.
func (d *dirHandle) mkdirPrivate() (string, error) {
	for range 100 {
		var b [8]byte
		rand.Read(b[:])
		name := ".warren-" + strconv.FormatUint(binary.LittleEndian.Uint64(b[:])%1e10, 10)
		err := unix.Mkdirat(d.fd, name, 0o700)
		if err == nil {
			return name, nil
		}
		if err != unix.EEXIST {
			return "", fmt.Errorf("create private directory: %w", os.NewSyscallError("mkdirat", err))
		}
	}
	return "", errors.New("create private directory: too many names taken")
}

// openSub opens the private directory name in d, checks that it is one
// this process owns, and sets its mode to 0700 again (the umask may have
// taken owner bits).
func (d *dirHandle) openSub(name string) (*dirHandle, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open private directory: %w", os.NewSyscallError("openat", err))
	}
	sub := &dirHandle{fd: fd, path: filepath.Join(d.path, name)}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		sub.close()
		return nil, fmt.Errorf("inspect private directory: %w", os.NewSyscallError("fstat", err))
	}
	if int(st.Uid) != os.Geteuid() {
		sub.close()
		return nil, fmt.Errorf("private directory %s was replaced by one of uid %d", sub.path, st.Uid)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		sub.close()
		return nil, fmt.Errorf("set private directory mode: %w", os.NewSyscallError("fchmod", err))
	}
	return sub, nil
}

// bind creates a socket named name in d and listens on it. Where the
// process can name d by its descriptor (/proc/self/fd on Linux), the bind
// goes through it; elsewhere it goes through d's path and setOwnerMode
// checks what it finds there.
func (d *dirHandle) bind(name string) (*net.UnixListener, error) {
	p := filepath.Join(d.path, name)
	if fdp := fdPath(d.fd); fdp != "" && len(fdp)+1+len(name) < sunPathLimit {
		p = fdp + "/" + name
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // the path is the caller's to name
		}
		return nil, fmt.Errorf("bind: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// setOwnerMode gives the socket named name in d its owner, then its mode.
// In this order the file is never more open than requested: before the
// chown it is more closed than perm, and only its creator could connect.
// Both act on the inode found at name without following a symbolic link,
// and it must be a socket and stay the same inode throughout; its id is
// returned (also with an error, once known, so that the caller can remove
// it).
func (d *dirHandle) setOwnerMode(name string, perm fs.FileMode, owner *Owner) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileID{}, fmt.Errorf("inspect socket file: %w", os.NewSyscallError("fstatat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fileID{}, fmt.Errorf("socket file replaced during Listen (found mode %#o)", st.Mode)
	}
	id := fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	if err := chownChmodAt(d.fd, name, id, perm, owner); err != nil {
		return id, err
	}
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return id, fmt.Errorf("inspect socket file: %w", os.NewSyscallError("fstatat", err))
	}
	if (fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}) != id {
		return id, errors.New("socket file replaced during Listen")
	}
	return id, nil
}

//go:build unix

package transport

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Socket file creation techniques, recorded for tests and debugging.
const (
	techLink  = "private directory and link"
	techUmask = "umask"
)

// errFallback asks listenFile to use the umask technique instead.
var errFallback = errors.New("use the umask technique")

// umaskMu serializes the umask changes of the fallback technique: the umask
// belongs to the whole process, and two Listens must not restore each
// other's value.
var umaskMu sync.Mutex // protects the process umask while it is narrowed

// fileID identifies an inode.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	st := fi.Sys().(*syscall.Stat_t)
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
}

func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}

// socketFile is a socket file that Listen created.
type socketFile struct {
	path      string // absolute, so that a later chdir does not matter
	id        fileID // the inode Listen created
	technique string // techLink or techUmask
}

// listenFile creates a socket file at path, as described in the package
// documentation, and returns a listener on it.
func listenFile(path string, perm fs.FileMode, owner *Owner) (*net.UnixListener, *socketFile, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("resolve path: %w", err)
	}
	f := &socketFile{path: abs, technique: techLink}
	ln, id, err := listenLinked(path, perm, owner)
	if errors.Is(err, errFallback) {
		f.technique = techUmask
		ln, id, err = listenUmask(path, perm, owner)
	}
	if err != nil {
		return nil, nil, err
	}
	f.id = id
	return ln, f, nil
}

// listenLinked binds the socket inside a fresh private directory next to
// path, gives it its owner and mode there, and then links it into place.
// Every step works relative to directory handles opened without following
// symbolic links, so that renaming entries of the parent directory during
// Listen cannot redirect the chmod, the chown or the link. It returns
// errFallback when the private path would not fit in sun_path or the file
// system cannot link the socket.
func listenLinked(path string, perm fs.FileMode, owner *Owner) (_ *net.UnixListener, _ fileID, err error) {
	if err := clearPath(path); err != nil {
		return nil, fileID{}, err
	}
	dir := filepath.Dir(path)
	// The private name adds at most 19 bytes and the socket's 2.
	if len(filepath.Join(dir, ".warren-0123456789", "s")) >= sunPathLimit {
		return nil, fileID{}, errFallback
	}
	parent, err := openDir(dir)
	if err != nil {
		return nil, fileID{}, err
	}
	defer parent.close()
	tmpName, err := parent.mkdirPrivate()
	if err != nil {
		return nil, fileID{}, err
	}
	tmp, err := parent.openSub(tmpName)
	if err != nil {
		unix.Unlinkat(parent.fd, tmpName, unix.AT_REMOVEDIR)
		return nil, fileID{}, err
	}
	defer func() {
		// After linking, this removes only the private name.
		unix.Unlinkat(tmp.fd, "s", 0)
		tmp.close()
		unix.Unlinkat(parent.fd, tmpName, unix.AT_REMOVEDIR)
	}()
	ln, err := tmp.bind("s")
	if err != nil {
		return nil, fileID{}, err
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	id, err := tmp.setOwnerMode("s", perm, owner)
	if err != nil {
		return nil, fileID{}, err
	}
	// link(2), unlike rename(2), never replaces what is at path: a file that
	// appeared since clearPath looked is found and judged again.
	base := filepath.Base(path)
	for attempt := 0; ; attempt++ {
		err := unix.Linkat(tmp.fd, "s", parent.fd, base, 0)
		if err == nil {
			return ln, id, nil
		}
		err = os.NewSyscallError("linkat", err)
		if !errors.Is(err, fs.ErrExist) {
			if isLinkUnsupported(err) {
				return nil, fileID{}, errFallback
			}
			return nil, fileID{}, fmt.Errorf("link socket into place: %w", err)
		}
		if attempt == 2 {
			return nil, fileID{}, fmt.Errorf("link socket into place: %w", err)
		}
		if err := clearPath(path); err != nil {
			return nil, fileID{}, err
		}
	}
}

func isLinkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EOPNOTSUPP) ||
		errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EMLINK)
}

// listenUmask binds the socket at path under a umask that lets only the
// owner bits of perm through, then sets the owner and the final mode, on the
// inode it bound, through a handle on the parent directory.
func listenUmask(path string, perm fs.FileMode, owner *Owner) (*net.UnixListener, fileID, error) {
	parent, err := openDir(filepath.Dir(path))
	if err != nil {
		return nil, fileID{}, err
	}
	defer parent.close()
	base := filepath.Base(path)
	var ln *net.UnixListener
	for attempt := 0; ; attempt++ {
		if err := clearPath(path); err != nil {
			return nil, fileID{}, err
		}
		var err error
		umaskMu.Lock()
		old := syscall.Umask(0o077 | int(0o700&^perm.Perm()))
		ln, err = parent.bind(base)
		syscall.Umask(old)
		umaskMu.Unlock()
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 2 {
			return nil, fileID{}, err
		}
	}
	id, err := parent.setOwnerMode(base, perm, owner)
	if err != nil {
		ln.Close()
		if id != (fileID{}) {
			(&socketFile{path: path, id: id}).remove()
		}
		return nil, fileID{}, err
	}
	return ln, id, nil
}

// clearPath makes way for a new socket at path. It returns nil when nothing
// is there or once a stale socket (one nobody accepts on) is removed,
// ErrAddrInUse when a server accepts on the socket there, and ErrNotSocket,
// removing nothing, when something other than a socket is there.
func clearPath(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect existing file: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w (found %s)", ErrNotSocket, describe(fi))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return ErrAddrInUse
	case errors.Is(err, syscall.EAGAIN):
		return ErrAddrInUse // alive, with a full backlog
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("probe existing socket: %w", err)
	}
	// Stale. Remove it only if it is still the socket that was probed.
	return (&socketFile{path: path, id: idOf(fi)}).remove()
}

// remove deletes the socket file if it is still the inode f recorded, and
// leaves alone whatever else (a newer server's socket) is at the path now.
func (f *socketFile) remove() error {
	fi, err := os.Lstat(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect socket file: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket || idOf(fi) != f.id {
		return nil
	}
	if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove socket file: %w", err)
	}
	return nil
}

func describe(fi fs.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeDevice != 0:
		return "a device"
	default:
		return "a file of mode " + fi.Mode().String()
	}
}

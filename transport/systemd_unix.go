//go:build unix

package transport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// listenFDsStart is the first descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// passedSocket is one descriptor passed by socket activation.
type passedSocket struct {
	fd    int
	name  string
	taken bool // by a Listen
}

var passed struct {
	once    sync.Once
	mu      sync.Mutex // protects sockets[i].taken
	sockets []passedSocket
	err     error // why there are none
}

// loadPassed reads the socket activation environment once (sd_listen_fds(3)):
// LISTEN_PID must be this process, LISTEN_FDS the count of descriptors
// from 3, LISTEN_FDNAMES their colon-separated names. It marks the
// descriptors close-on-exec and unsets the variables, so that child
// processes neither inherit the sockets nor believe they were passed them.
func loadPassed() {
	pidStr, fdsStr, names := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS"), os.Getenv("LISTEN_FDNAMES")
	if fdsStr == "" {
		passed.err = errors.New("no sockets were passed (LISTEN_FDS is not set): start the server from a systemd socket unit, or under systemd-socket-activate")
		return
	}
	if pid, err := strconv.Atoi(pidStr); err != nil || pid != os.Getpid() {
		passed.err = fmt.Errorf("the sockets were passed to process %s (LISTEN_PID), not to this one (%d)", pidStr, os.Getpid())
		return
	}
	n, err := strconv.Atoi(fdsStr)
	if err != nil || n < 1 {
		passed.err = fmt.Errorf("LISTEN_FDS=%q: no sockets were passed", fdsStr)
		return
	}
	var nameList []string
	if names != "" {
		nameList = strings.Split(names, ":")
	}
	for i := range n {
		fd := listenFDsStart + i
		syscall.CloseOnExec(fd)
		s := passedSocket{fd: fd, name: "unknown"}
		if i < len(nameList) {
			s.name = nameList[i]
		}
		passed.sockets = append(passed.sockets, s)
	}
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
}

// takePassed returns the passed socket named name (the first one for ""),
// which no Listen has taken yet.
func takePassed(name string) (passedSocket, error) {
	passed.once.Do(loadPassed)
	if passed.err != nil {
		return passedSocket{}, passed.err
	}
	passed.mu.Lock()
	defer passed.mu.Unlock()
	var names []string
	for i := range passed.sockets {
		s := &passed.sockets[i]
		names = append(names, strconv.Quote(s.name))
		if name != "" && s.name != name {
			continue
		}
		if s.taken {
			return passedSocket{}, fmt.Errorf("the passed socket %q (descriptor %d) is already listened on", s.name, s.fd)
		}
		s.taken = true
		return *s, nil
	}
	return passedSocket{}, fmt.Errorf("no socket named %q was passed (the names are %s; a socket unit sets them with FileDescriptorName=)", name, strings.Join(names, ", "))
}

// listenSystemd returns a listener on the passed socket that a names, and
// the warren address it serves (unix or tcp).
func listenSystemd(a Addr) (net.Listener, Addr, error) {
	s, err := takePassed(a.Address)
	if err != nil {
		return nil, Addr{}, err
	}
	f := os.NewFile(uintptr(s.fd), "systemd:"+s.name)
	if t, err := syscall.GetsockoptInt(s.fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err == nil && t != syscall.SOCK_STREAM {
		f.Close()
		return nil, Addr{}, fmt.Errorf("the passed socket %q is not a stream socket (use ListenStream= in the socket unit)", s.name)
	}
	ln, err := net.FileListener(f) // a duplicate of the descriptor
	f.Close()
	if err != nil {
		return nil, Addr{}, fmt.Errorf("the passed socket %q: %w", s.name, err)
	}
	switch l := ln.(type) {
	case *net.UnixListener:
		// The socket file is the unit's: Close must not remove it.
		l.SetUnlinkOnClose(false)
		name := l.Addr().String()
		if name == "" || name == "@" {
			ln.Close()
			return nil, Addr{}, fmt.Errorf("the passed socket %q is an unnamed unix socket", s.name)
		}
		return ln, Addr{Scheme: SchemeUnix, Address: name}, nil
	case *net.TCPListener:
		return ln, Addr{Scheme: SchemeTCP, Address: l.Addr().String()}, nil
	}
	ln.Close()
	return nil, Addr{}, fmt.Errorf("the passed socket %q is neither a unix nor a tcp socket", s.name)
}

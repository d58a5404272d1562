package main

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warrenipc/warren/internal/balance"
	"github.com/warrenipc/warren/peer"
	"github.com/warrenipc/warren/transport"
)

// defaultKeyword names the per-user default address on the command line.
const defaultKeyword = "default"

// defaultDir returns the directory of the per-user default socket:
// $XDG_RUNTIME_DIR/warren, or warren-UID in the temporary directory.
func defaultDir() (string, error) {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "warren"), nil
	}
	tmp, err := filepath.Abs(os.TempDir())
	if err != nil {
		return "", err
	}
	return filepath.Join(tmp, fmt.Sprintf("warren-%d", os.Geteuid())), nil
}

// defaultAddr returns the per-user default address.
func defaultAddr() (string, error) {
	dir, err := defaultDir()
	if err != nil {
		return "", err
	}
	return "unix://" + filepath.Join(dir, "warren.sock"), nil
}

// prepareDefaultDir creates the default socket's directory (mode 0700) if
// needed and checks that it is a directory of ours that no one else can
// write to: in a shared temporary directory, someone else could have
// created it first.
func prepareDefaultDir() (string, error) {
	dir, err := defaultDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cannot create the default socket directory: %w (use --addr to choose another address)", err)
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", err
	}
	return dir, nil
}

func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeDir {
		return fmt.Errorf("the default socket directory %s is not a directory (it is a %v): remove it, or use --addr to choose another address", dir, fi.Mode().Type())
	}
	if uid, ok := fileUID(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("the default socket directory %s belongs to uid %d, not to you (uid %d): someone else created it; remove it, or use --addr to choose another address", dir, uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("the default socket directory %s has mode %#o, writable by others: run chmod 700 %s, or use --addr to choose another address", dir, perm, dir)
	}
	return nil
}

// clientAddr resolves a client's ADDR argument. For the default address
// the client also requires the server to run as this user: whoever answers
// at a per-user path should be that user.
func clientAddr(arg string) (addr string, cfg *transport.DialConfig, err error) {
	if arg == defaultKeyword {
		addr, err := defaultAddr()
		if err != nil {
			return "", nil, err
		}
		return addr, &transport.DialConfig{ServerPolicy: peer.SameUser()}, nil
	}
	if _, err := balance.Parse(arg, nil); err != nil {
		return "", nil, err
	}
	return arg, nil, nil
}

// targetAddr returns the address that stands for a client's target: the
// first of a list; for dns:///HOST:PORT, tls://HOST:PORT with the
// certificate flags (withTLS), tcp:// without.
func targetAddr(target string, withTLS bool) (transport.Addr, error) {
	t, err := balance.Parse(target, nil)
	if err != nil {
		return transport.Addr{}, err
	}
	if t.Host != "" {
		a := transport.Addr{Scheme: transport.SchemeTCP, Address: net.JoinHostPort(t.Host, t.Port)}
		if withTLS {
			a.Scheme = transport.SchemeTLS
		}
		return a, nil
	}
	return transport.ParseAddr(t.Addrs[0])
}

// suggestAddr returns the address arg (given without a scheme) most
// likely meant, or "": a path is a unix socket, HOST:PORT a tcp address.
func suggestAddr(arg string) string {
	if strings.Contains(arg, "://") {
		return ""
	}
	var s string
	if _, port, err := net.SplitHostPort(arg); err == nil {
		if _, err := strconv.ParseUint(port, 10, 16); err == nil {
			s = "tcp://" + arg
		}
	} else if filepath.IsAbs(arg) {
		s = "unix://" + arg
	} else if !strings.Contains(arg, ":") {
		s = "unix:" + arg
	}
	if s == "" {
		return ""
	}
	if _, err := transport.ParseAddr(s); err != nil {
		return ""
	}
	return s
}

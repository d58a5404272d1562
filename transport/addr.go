package transport

import (
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Address schemes.
const (
	SchemeUnix = "unix"
	SchemeTCP  = "tcp"
	SchemeTLS  = "tls"
)

// sunPathLimit is the size of sun_path in struct sockaddr_un on this
// platform, including the terminating NUL: 108 on Linux, 104 on macOS.
const sunPathLimit = len(syscall.RawSockaddrUnix{}.Path)

// abstractNamespace reports whether unix:@name addresses are available.
const abstractNamespace = runtime.GOOS == "linux" || runtime.GOOS == "android"

// Addr is a parsed warren address. It implements net.Addr.
type Addr struct {
	Scheme string // SchemeUnix, SchemeTCP or SchemeTLS
	// Address is a file path (absolute or relative) or "@name" for an
	// abstract Unix socket, or host:port for tcp and tls.
	Address string
}

// ParseAddr parses a warren address. It accepts exactly these forms:
//
//	unix:///absolute/path  a socket file at an absolute path
//	unix:relative/path     a socket file relative to the working directory
//	unix:@name             a socket in Linux's abstract namespace (no file)
//	tcp://host:port        TCP; an empty host means every local address
//	tls://host:port        TLS over TCP
//
// Ports are decimal numbers. Addresses with a query, a fragment, user
// information or a path after host:port are rejected, as are "unix:/path"
// (write "unix:///path") and control characters. Every error is an
// [*AddrError] whose message lists the accepted forms.
func ParseAddr(s string) (Addr, error) {
	bad := func(reason string) (Addr, error) { return Addr{}, &AddrError{Addr: s, Reason: reason} }
	if strings.IndexFunc(s, isControl) >= 0 {
		return bad("control characters are not allowed")
	}
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return bad("missing scheme")
	}
	switch scheme {
	case SchemeUnix:
		return parseUnix(s, rest)
	case SchemeTCP, SchemeTLS:
		hostport, ok := strings.CutPrefix(rest, "//")
		if !ok {
			return bad(scheme + " addresses start with " + scheme + "://")
		}
		addr, reason := parseHostPort(hostport)
		if reason != "" {
			return bad(reason)
		}
		return Addr{Scheme: scheme, Address: addr}, nil
	case "":
		return bad("missing scheme")
	default:
		return bad("unknown scheme " + strconv.Quote(scheme))
	}
}

func parseUnix(s, rest string) (Addr, error) {
	bad := func(reason string) (Addr, error) { return Addr{}, &AddrError{Addr: s, Reason: reason} }
	var path string
	switch {
	case strings.HasPrefix(rest, "//"):
		path = rest[2:]
		if !strings.HasPrefix(path, "/") {
			if path == "" {
				return bad("empty path")
			}
			return bad("unix:// is followed by an absolute path, as in unix:///run/app.sock (a host is not allowed)")
		}
	case strings.HasPrefix(rest, "/"):
		return bad("an absolute path is written with three slashes, as in unix:///run/app.sock")
	case strings.HasPrefix(rest, "@"):
		if !abstractNamespace {
			return bad("abstract sockets (unix:@name) exist only on Linux")
		}
		if len(rest) == 1 {
			return bad("empty abstract socket name")
		}
		path = rest
	default:
		path = rest
	}
	switch {
	case path == "":
		return bad("empty path")
	case strings.ContainsAny(path, "?#"):
		return bad("query strings and fragments (? and #) are not allowed")
	case path[0] != '@' && strings.HasSuffix(path, "/"):
		return bad("the path names a directory (it ends in /)")
	}
	return Addr{Scheme: SchemeUnix, Address: path}, nil
}

// parseHostPort validates host:port and returns it in canonical form, or a
// reason it is not valid.
func parseHostPort(hp string) (string, string) {
	if hp == "" {
		return "", "missing host:port"
	}
	if i := strings.IndexAny(hp, "/?#@"); i >= 0 {
		return "", "unexpected " + strconv.QuoteRune(rune(hp[i])) + " after host:port (paths, queries, fragments and user information are not allowed)"
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		if !strings.Contains(hp, ":") || strings.HasSuffix(hp, "]") {
			return "", "missing port"
		}
		return "", "bad host:port (an IPv6 host is written in brackets, as in [::1]:8080)"
	}
	if port == "" {
		return "", "missing port"
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || strings.TrimLeft(port, "0123456789") != "" {
		return "", "port " + strconv.Quote(port) + " is not a number from 0 to 65535"
	}
	if strings.Contains(host, ":") || strings.HasPrefix(hp, "[") {
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return "", "bad IPv6 address " + strconv.Quote(host)
		}
	} else if host != "" && strings.TrimLeft(strings.ToLower(host), "abcdefghijklmnopqrstuvwxyz0123456789.-_") != "" {
		return "", "bad host name " + strconv.Quote(host)
	}
	return net.JoinHostPort(host, strconv.FormatUint(n, 10)), ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// String returns the address in the canonical form that ParseAddr accepts.
func (a Addr) String() string {
	switch {
	case a.Scheme == SchemeUnix && strings.HasPrefix(a.Address, "/"):
		return "unix://" + a.Address
	case a.Scheme == SchemeUnix:
		return "unix:" + a.Address
	default:
		return a.Scheme + "://" + a.Address
	}
}

// Network returns the network name for the net package: "unix" or "tcp".
func (a Addr) Network() string {
	if a.Scheme == SchemeUnix {
		return "unix"
	}
	return "tcp"
}

// isAbstract reports whether a names a socket in the abstract namespace.
func (a Addr) isAbstract() bool {
	return a.Scheme == SchemeUnix && strings.HasPrefix(a.Address, "@")
}

// isFile reports whether a names a socket file.
func (a Addr) isFile() bool { return a.Scheme == SchemeUnix && !a.isAbstract() }

// checkPathLen returns a *PathTooLongError if a is a Unix socket whose name
// does not fit in sun_path.
func (a Addr) checkPathLen() error {
	if a.Scheme == SchemeUnix && len(a.Address) >= sunPathLimit {
		return &PathTooLongError{Path: a.Address, Len: len(a.Address), Limit: sunPathLimit}
	}
	return nil
}

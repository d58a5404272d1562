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
	SchemeWS   = "ws"  // WebSocket over TCP
	SchemeWSS  = "wss" // WebSocket over TLS
	// SchemeSystemd names a listening socket passed by systemd socket
	// activation; Listen only.
	SchemeSystemd = "systemd"
)

// sunPathLimit is the size of sun_path in struct sockaddr_un on this
// platform, including the terminating NUL: 108 on Linux, 104 on macOS.
const sunPathLimit = len(syscall.RawSockaddrUnix{}.Path)

// abstractNamespace reports whether unix:@name addresses are available.
const abstractNamespace = runtime.GOOS == "linux" || runtime.GOOS == "android"

// Addr is a parsed warren address. It implements net.Addr.
type Addr struct {
	Scheme string // SchemeUnix, SchemeTCP, SchemeTLS, SchemeWS, SchemeWSS or SchemeSystemd
	// Address is a file path (absolute or relative) or "@name" for an
	// abstract Unix socket, host:port for tcp, tls, ws and wss, or the
	// socket's name for systemd ("" for the first socket passed).
	Address string
	// Path is the HTTP path of a ws or wss address, as written (with any
	// percent-encoding) and starting with "/"; empty for other schemes.
	Path string
}

// ParseAddr parses a warren address. It accepts exactly these forms:
//
//	unix:///absolute/path  a socket file at an absolute path
//	unix:relative/path     a socket file relative to the working directory
//	unix:@name             a socket in Linux's abstract namespace (no file)
//	tcp://host:port        TCP; an empty host means every local address
//	tls://host:port        TLS over TCP
//	ws://host:port/path    WebSocket over TCP, upgraded at the HTTP path
//	wss://host:port/path   WebSocket over TLS
//	systemd:               the first socket passed by systemd (Listen only)
//	systemd:NAME           the socket passed by systemd with that name
//
// systemd addresses name listening sockets that systemd socket activation
// passes to the process (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES; the names
// are the units' FileDescriptorName=, by default the socket unit's name).
// Listen serves them as the unix or tcp sockets they are, with the mode and
// owner the socket unit gave them.
//
// Ports are decimal numbers, also for ws and wss. Addresses with a query, a
// fragment or user information are rejected, as are a path after host:port
// for tcp and tls, "unix:/path" (write "unix:///path") and control
// characters. A ws or wss address without a path has the path "/"; a path
// is made of the characters RFC 3986 allows in one (non-ASCII characters
// are percent-encoded) and has no "." or ".." segment. Every error is an
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
	case SchemeWS, SchemeWSS:
		hostport, ok := strings.CutPrefix(rest, "//")
		if !ok {
			return bad(scheme + " addresses start with " + scheme + "://")
		}
		path := ""
		if i := strings.IndexAny(hostport, "/?#"); i >= 0 {
			hostport, path = hostport[:i], hostport[i:]
		}
		addr, reason := parseHostPort(hostport)
		if reason == "" {
			path, reason = parseHTTPPath(path)
		}
		if reason != "" {
			return bad(reason)
		}
		return Addr{Scheme: scheme, Address: addr, Path: path}, nil
	case SchemeSystemd:
		if i := strings.IndexAny(rest, ":/?#"); i >= 0 {
			return bad("a systemd socket name has no " + strconv.QuoteRune(rune(rest[i])) + " (write systemd: or systemd:NAME)")
		}
		if len(rest) > 255 {
			return bad("a systemd socket name has at most 255 characters")
		}
		return Addr{Scheme: SchemeSystemd, Address: rest}, nil
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

// parseHTTPPath validates the path of a ws or wss address and returns it,
// "/" if it is empty, or a reason it is not valid.
func parseHTTPPath(p string) (string, string) {
	if p == "" {
		return "/", ""
	}
	if strings.ContainsAny(p, "?#") {
		return "", "query strings and fragments (? and #) are not allowed"
	}
	for i := 0; i < len(p); i++ {
		switch b := p[i]; {
		case b == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", "bad percent-encoding in the path (% is followed by two hexadecimal digits)"
			}
			i += 2
		case b >= 0x80:
			return "", "non-ASCII characters in the path must be percent-encoded"
		case !isPathChar(b):
			return "", "character " + strconv.QuoteRune(rune(b)) + " is not allowed in a path (percent-encode it)"
		}
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == "." || seg == ".." {
			return "", "dot segments (. and ..) are not allowed in the path"
		}
	}
	return p, ""
}

// isPathChar reports whether b may appear as itself in a URL path (RFC
// 3986: unreserved, sub-delims, ":", "@" and "/").
func isPathChar(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", b) >= 0
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// String returns the address in the canonical form that ParseAddr accepts.
func (a Addr) String() string {
	switch {
	case a.Scheme == SchemeUnix && strings.HasPrefix(a.Address, "/"):
		return "unix://" + a.Address
	case a.Scheme == SchemeUnix:
		return "unix:" + a.Address
	case a.Scheme == SchemeWS || a.Scheme == SchemeWSS:
		return a.Scheme + "://" + a.Address + a.Path
	case a.Scheme == SchemeSystemd:
		return "systemd:" + a.Address
	default:
		return a.Scheme + "://" + a.Address
	}
}

// Network returns the network name for the net package: "unix", or "tcp"
// for tcp, tls, ws and wss.
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

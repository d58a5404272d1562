package transport_test

import (
	"cmp"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/warrenipc/warren/transport"
)

func TestParseAddr(t *testing.T) {
	tests := []struct {
		in        string
		scheme    string
		address   string
		canonical string // String(); "" means in
		network   string
	}{
		{"unix:///run/app.sock", "unix", "/run/app.sock", "", "unix"},
		{"unix:////run/app.sock", "unix", "//run/app.sock", "", "unix"},
		{"unix:///a b/c d.sock", "unix", "/a b/c d.sock", "", "unix"},
		{"unix:app.sock", "unix", "app.sock", "", "unix"},
		{"unix:run/app.sock", "unix", "run/app.sock", "", "unix"},
		{"unix:./app.sock", "unix", "./app.sock", "", "unix"},
		{"unix:../app.sock", "unix", "../app.sock", "", "unix"},
		{"tcp://127.0.0.1:8080", "tcp", "127.0.0.1:8080", "", "tcp"},
		{"tcp://localhost:0", "tcp", "localhost:0", "", "tcp"},
		{"tcp://:8080", "tcp", ":8080", "", "tcp"},
		{"tcp://[::1]:8080", "tcp", "[::1]:8080", "", "tcp"},
		{"tcp://[fe80::1%eth0]:80", "tcp", "[fe80::1%eth0]:80", "", "tcp"},
		{"tcp://example.com:65535", "tcp", "example.com:65535", "", "tcp"},
		{"tcp://my_host-1.example:1", "tcp", "my_host-1.example:1", "", "tcp"},
		{"tcp://127.0.0.1:0080", "tcp", "127.0.0.1:80", "tcp://127.0.0.1:80", "tcp"},
		{"tls://example.com:443", "tls", "example.com:443", "", "tcp"},
		{"tls://[2001:db8::1]:443", "tls", "[2001:db8::1]:443", "", "tcp"},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, []struct {
			in, scheme, address, canonical, network string
		}{
			{"unix:@warren", "unix", "@warren", "", "unix"},
			{"unix:@a/b c", "unix", "@a/b c", "", "unix"},
		}...)
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, err := transport.ParseAddr(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if a.Scheme != tt.scheme || a.Address != tt.address {
				t.Errorf("ParseAddr = %+v, want {%s %s}", a, tt.scheme, tt.address)
			}
			want := tt.canonical
			if want == "" {
				want = tt.in
			}
			if a.String() != want {
				t.Errorf("String() = %q, want %q", a.String(), want)
			}
			if a.Network() != tt.network {
				t.Errorf("Network() = %q, want %q", a.Network(), tt.network)
			}
		})
	}
}

func TestParseAddrWebSocket(t *testing.T) {
	tests := []struct {
		in, scheme, address, path, canonical string
	}{
		{"ws://127.0.0.1:8080/warren", "ws", "127.0.0.1:8080", "/warren", ""},
		{"wss://example.com:443/a/b/", "wss", "example.com:443", "/a/b/", ""},
		{"ws://[::1]:80/x", "ws", "[::1]:80", "/x", ""},
		{"ws://:0/warren", "ws", ":0", "/warren", ""},
		{"ws://localhost:0080/p", "ws", "localhost:80", "/p", "ws://localhost:80/p"},
		{"ws://h:1", "ws", "h:1", "/", "ws://h:1/"},
		{"ws://h:1/", "ws", "h:1", "/", ""},
		{"ws://h:1/a%20b/%C3%A9", "ws", "h:1", "/a%20b/%C3%A9", ""},
		{"ws://h:1/-._~!$&'()*+,;=:@", "ws", "h:1", "/-._~!$&'()*+,;=:@", ""},
		{"ws://h:1//double", "ws", "h:1", "//double", ""},
		{"ws://h:1/.well-known/x", "ws", "h:1", "/.well-known/x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, err := transport.ParseAddr(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if a.Scheme != tt.scheme || a.Address != tt.address || a.Path != tt.path {
				t.Errorf("ParseAddr = %+v, want {%s %s %s}", a, tt.scheme, tt.address, tt.path)
			}
			want := cmp.Or(tt.canonical, tt.in)
			if a.String() != want {
				t.Errorf("String() = %q, want %q", a.String(), want)
			}
			if a.Network() != "tcp" {
				t.Errorf("Network() = %q, want tcp", a.Network())
			}
		})
	}
}

func TestParseAddrErrors(t *testing.T) {
	tests := []struct {
		in     string
		reason string
	}{
		{"", "missing scheme"},
		{"/run/app.sock", "missing scheme"},
		{":8080", "missing scheme"},
		{"http://localhost:80", `unknown scheme "http"`},
		{"UNIX:///run/app.sock", `unknown scheme "UNIX"`},
		{"unix", "missing scheme"},
		{"unix:", "empty path"},
		{"unix://", "empty path"},
		{"unix:///", "directory"},
		{"unix:/run/app.sock", "three slashes"},
		{"unix://run/app.sock", "a host is not allowed"},
		{"unix://localhost/run/app.sock", "a host is not allowed"},
		{"unix:///run/app.sock?mode=0600", "query"},
		{"unix:///run/app.sock#x", "fragments"},
		{"unix:///run/", "directory"},
		{"unix:dir/", "directory"},
		{"unix:///run/app\x00.sock", "control characters"},
		{"unix:///run/app\n.sock", "control characters"},
		{"tcp:127.0.0.1:80", "tcp://"},
		{"tcp://", "missing host:port"},
		{"tcp://127.0.0.1", "missing port"},
		{"tcp://127.0.0.1:", "missing port"},
		{"tcp://[::1]", "missing port"},
		{"tcp://::1:80", "brackets"},
		{"tcp://127.0.0.1:http", "not a number"},
		{"tcp://127.0.0.1:65536", "not a number"},
		{"tcp://127.0.0.1:-1", "not a number"},
		{"tcp://127.0.0.1:+1", "not a number"},
		{"tcp://127.0.0.1:80/path", "paths"},
		{"tcp://127.0.0.1:80?x=1", "queries"},
		{"tcp://127.0.0.1:80#f", "fragments"},
		{"tcp://user@127.0.0.1:80", "user information"},
		{"tcp://[1.2.3.4]:80", "bad IPv6 address"},
		{"tcp://[localhost]:80", "bad IPv6 address"},
		{"tcp://bad host:80", "bad host name"},
		{"tcp://h%st:80", "bad host name"},
		{"tls://:", "missing port"},
		{"tls:///path", "paths"},
		{"ws:127.0.0.1:80/x", "ws://"},
		{"wss//h:1/x", `unknown scheme "wss//h"`},
		{"ws://", "missing host:port"},
		{"ws:///warren", "missing host:port"},
		{"ws://h/warren", "missing port"},
		{"wss://h:https/x", "not a number"},
		{"ws://user@h:1/x", "user information"},
		{"ws://h:1/x?y=1", "query"},
		{"ws://h:1?y=1", "query"},
		{"ws://h:1/x#f", "fragments"},
		{"ws://h:1#f", "fragments"},
		{"ws://h:1/a b", "' ' is not allowed in a path"},
		{"ws://h:1/a\\b", "is not allowed in a path"},
		{"ws://h:1/a\"b", "is not allowed in a path"},
		{"ws://h:1/caf\u00e9", "non-ASCII"},
		{"ws://h:1/%", "percent-encoding"},
		{"ws://h:1/%4", "percent-encoding"},
		{"ws://h:1/%zz", "percent-encoding"},
		{"ws://h:1/a/../b", "dot segments"},
		{"ws://h:1/.", "dot segments"},
		{"ws://h:1/a/..", "dot segments"},
		{"ws://h:1/a\x7f", "control characters"},
		{"WS://h:1/x", `unknown scheme "WS"`},
	}
	if runtime.GOOS == "linux" {
		tests = append(tests, struct{ in, reason string }{"unix:@", "empty abstract socket name"})
	} else {
		tests = append(tests, struct{ in, reason string }{"unix:@warren", "only on Linux"})
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, err := transport.ParseAddr(tt.in)
			if err == nil {
				t.Fatalf("ParseAddr(%q) = %+v, want an error", tt.in, a)
			}
			var ae *transport.AddrError
			if !errors.As(err, &ae) {
				t.Fatalf("error is a %T, want *AddrError", err)
			}
			if ae.Addr != tt.in {
				t.Errorf("AddrError.Addr = %q, want %q", ae.Addr, tt.in)
			}
			msg := err.Error()
			if !strings.Contains(ae.Reason, tt.reason) {
				t.Errorf("reason %q does not contain %q", ae.Reason, tt.reason)
			}
			for _, form := range []string{"unix:///", "unix:relative/path", "unix:@name", "tcp://host:port", "tls://host:port", "ws://host:port/path", "wss://host:port/path"} {
				if !strings.Contains(msg, form) {
					t.Errorf("message %q does not list %q", msg, form)
				}
			}
		})
	}
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{
		"unix:///run/app.sock", "unix:rel/app.sock", "unix:@name", "unix:/x", "unix://x/y",
		"tcp://127.0.0.1:8080", "tcp://:0", "tcp://[::1]:80", "tcp://[fe80::1%eth0]:80",
		"tls://example.com:443", "tls://example.com:0443", "tcp://a:b:c", "http://x",
		"ws://127.0.0.1:8080/warren", "wss://[::1]:443/a%20b/", "ws://h:1", "ws://h:01/x?q", "ws://h:1/a/../b",
		"wss://user@h:1/", "ws://h:1/%zz", "ws://h:1//x/./y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := transport.ParseAddr(s)
		if err != nil {
			var ae *transport.AddrError
			if !errors.As(err, &ae) {
				t.Fatalf("ParseAddr(%q): error is a %T, want *AddrError", s, err)
			}
			return
		}
		b, err := transport.ParseAddr(a.String())
		if err != nil {
			t.Fatalf("ParseAddr(%q) = %+v, whose String %q does not parse: %v", s, a, a.String(), err)
		}
		if a != b {
			t.Fatalf("ParseAddr(%q) = %+v, but ParseAddr(%q) = %+v", s, a, a.String(), b)
		}
		if n := a.Network(); n != "unix" && n != "tcp" {
			t.Fatalf("Network() = %q", n)
		}
		if a.Address == "" {
			t.Fatalf("ParseAddr(%q): empty Address", s)
		}
		if ws := a.Scheme == "ws" || a.Scheme == "wss"; ws != strings.HasPrefix(a.Path, "/") {
			t.Fatalf("ParseAddr(%q): scheme %q with path %q", s, a.Scheme, a.Path)
		}
	})
}

// Package balance is the client's view of a service: one or more server
// addresses, or a DNS name resolved to them, a connection per server, the
// choice of a server for each call (round robin or least outstanding), and
// the rules for retrying a call elsewhere.
package balance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/warrenipc/warren/transport"
)

// DNSPrefix starts a target resolved with DNS: dns:///host:port.
const DNSPrefix = "dns:///"

// MaxAddrs bounds the addresses of a target, listed or resolved.
const MaxAddrs = 64

// Target is what a client dials: a list of addresses, or a DNS name.
type Target struct {
	Addrs []string // the addresses, for a list
	Host  string   // the name to resolve, for dns:///host:port
	Port  string
}

// Parse reads a target: one warren address, several separated by commas,
// or dns:///host:port. A comma followed by no scheme belongs to a path
// (unix:///a,b.sock). check validates one address (nil:
// transport.ParseAddr).
func Parse(s string, check func(string) error) (Target, error) {
	if check == nil {
		check = func(a string) error { _, err := transport.ParseAddr(a); return err }
	}
	if rest, ok := strings.CutPrefix(s, DNSPrefix); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil || host == "" || port == "" {
			return Target{}, fmt.Errorf("warren: address %q: a dns target is dns:///HOST:PORT", s)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return Target{}, fmt.Errorf("warren: address %q: port %q is not a number from 1 to 65535", s, port)
		}
		return Target{Host: host, Port: port}, nil
	}
	if strings.TrimSpace(s) == "" {
		return Target{}, errors.New("warren: empty address")
	}
	parts := strings.Split(s, ",")
	if len(parts) > 1 {
		// One address with a comma in it, a path: what follows each comma
		// names no scheme.
		if check(s) == nil && !slices.ContainsFunc(parts[1:], func(p string) bool {
			return strings.TrimSpace(p) == "" || strings.Contains(p, ":")
		}) {
			return Target{Addrs: []string{s}}, nil
		}
		if len(parts) > MaxAddrs {
			return Target{}, fmt.Errorf("warren: %d addresses, more than %d", len(parts), MaxAddrs)
		}
	}
	var t Target
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return Target{}, fmt.Errorf("warren: address list %q: entry %d is empty", s, i+1)
		}
		if strings.HasPrefix(p, DNSPrefix) {
			return Target{}, fmt.Errorf("warren: address list %q: a dns target stands alone", s)
		}
		if err := check(p); err != nil {
			if len(parts) > 1 {
				return Target{}, fmt.Errorf("warren: address list, entry %d: %w", i+1, err)
			}
			return Target{}, err
		}
		if !slices.Contains(t.Addrs, p) {
			t.Addrs = append(t.Addrs, p)
		}
	}
	return t, nil
}

// LookupHost resolves a name; tests replace it.
var LookupHost = net.DefaultResolver.LookupHost

// resolve returns the addresses of a dns target, with scheme.
func (t Target) resolve(ctx context.Context, scheme string) ([]string, error) {
	ips, err := LookupHost(ctx, t.Host)
	if err != nil {
		return nil, fmt.Errorf("warren: resolving %s: %w", t.Host, err)
	}
	slices.Sort(ips)
	ips = slices.Compact(ips)
	if len(ips) > MaxAddrs {
		ips = ips[:MaxAddrs]
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("warren: resolving %s: no addresses", t.Host)
	}
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = scheme + "://" + net.JoinHostPort(ip, t.Port)
	}
	return out, nil
}

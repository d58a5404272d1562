package bridgecore

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/warrenipc/warren/status"
)

// CheckHost defends the HTTP bridge of a TCP connection against DNS
// rebinding: a page on evil.example whose name resolves to 127.0.0.1 would
// otherwise reach a loopback server as its own origin, since the browser
// sends "Host: evil.example" and the origin checks compare with it. It
// returns a PermissionDenied error for a Host that is not allowed:
//
//   - IP literals are always allowed (rebinding needs a name);
//   - on a loopback connection, "localhost", names under ".localhost",
//     "warren" (the name HTTPClient's requests use) and
//     allowedHosts (ServerOptions.AllowedHosts) are allowed;
//   - on another connection, only allowedHosts, if set (without it the
//     Host is not checked).
//
// Connections on unix sockets are not checked: browsers cannot open them.
func CheckHost(localAddr net.Addr, allowedHosts []string, r *http.Request) *status.Error {
	local, ok := localAddr.(*net.TCPAddr)
	if !ok {
		return nil
	}
	loopback := local.IP.IsLoopback()
	if !loopback && len(allowedHosts) == 0 {
		return nil
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if loopback && (host == "localhost" || host == "warren" || strings.HasSuffix(host, ".localhost")) {
		return nil
	}
	for _, a := range allowedHosts {
		if strings.EqualFold(strings.TrimSuffix(a, "."), host) {
			return nil
		}
	}
	return status.New(status.PermissionDenied, fmt.Sprintf(
		"Host %q is not allowed on this server (DNS rebinding protection): use localhost or an IP address, or add the name to ServerOptions.AllowedHosts", r.Host))
}

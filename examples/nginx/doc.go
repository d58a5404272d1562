// Package nginx holds an example nginx configuration (warren.conf) that
// terminates TLS in front of a warren server on a unix socket and proxies
// both WebSocket connections and Connect HTTP calls to it, and the test
// that runs it with nginx. See README.md. The package has no API.
package nginx

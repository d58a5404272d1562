// Package nginx holds two example nginx configurations and the tests that
// run them with nginx: warren.conf terminates TLS in front of a warren
// server on a unix socket and proxies both WebSocket connections and
// Connect HTTP calls to it; grpc.conf passes gRPC calls to an upstream of
// three warren servers. See README.md. The package has no API.
package nginx

// Package haproxy holds an example HAProxy configuration (haproxy.cfg) that
// balances gRPC per request and warren's own protocol per connection over
// three warren servers, and the test that runs it with HAProxy. See
// README.md. The package has no API.
package haproxy

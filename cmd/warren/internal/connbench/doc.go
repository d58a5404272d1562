// Package connbench is `warren bench conns`: it holds up to a million live
// warren connections over unix sockets, TCP or WebSocket on the loopback
// (--network), proves in rounds that every one of them still works, and
// reports what each costs the server (user space), the kernel and the
// clients.
//
// The orchestrator spreads the connections over shards, each a server
// process (rpc.Server, event-loop mode by default) on its own socket and a
// client process, because a process may hold only so many descriptors
// (RLIMIT_NOFILE). Over tcp and ws each server listens on a port of its own
// on 127.0.0.1 and each client binds source addresses of its own in
// 127.0.0.0/8, a new one every 12,000 connections (perSource), so that no
// (source, destination) pair needs more than the half of the ephemeral port
// range that connect() tries first. The orchestrator raises the kernel
// settings the run needs (limits_linux.go) and restores them at the end.
//
// Both kinds of child are the same binary re-executed with a hidden
// command (conns-server, conns-client); they talk to the orchestrator over
// their stdin and stdout, one line per command, and exit when their stdin
// closes.
//
// The client is not warren's rpc.Client: it holds each connection as a bare
// blocking socket descriptor (four bytes of state) and speaks just enough of
// the protocol, with package wire, to make one unary call per connection per
// round; over WebSocket it also makes the opening handshake and frames what
// it sends (client_net_linux.go).
package connbench

// Package idle measures what idle connections cost a warren server: its
// resident memory per connection with N connections open and idle, in the
// goroutine-per-connection mode and in the event-loop mode
// (rpc.ServerOptions.EventLoop), over a unix socket, TCP loopback and
// WebSocket over TCP loopback, and the kernel memory they take; and how
// many connections per second the server accepts and handshakes. Over
// WebSocket, other servers are measured the same way for comparison (see
// Systems and RegisterPeer).
//
// The server runs in a child process: this program re-executed with
// WARREN_IDLE_CHILD set in its environment, which the package's init
// function recognizes (so any program importing the package can be the
// child, with no change to its main). The parent opens the connections with
// raw sockets that send the warren preface, read the server's, and then
// stay idle, so that the client side costs a descriptor each and nothing
// more; over WebSocket, they first make the opening handshake, and send
// the preface in a binary message, which the servers other than warren
// echo. Linux only.
package idle

// Package idle measures what idle connections cost a warren server: its
// resident memory per connection with N connections open and idle, in the
// goroutine-per-connection mode and in the event-loop mode
// (rpc.ServerOptions.EventLoop), over a unix socket and TCP loopback, and
// the kernel memory they take; and how many connections per second the
// server accepts and handshakes.
//
// The server runs in a child process: this program re-executed with
// WARREN_IDLE_CHILD set in its environment, which the package's init
// function recognizes (so any program importing the package can be the
// child, with no change to its main). The parent opens the connections with
// raw sockets that send the warren preface, read the server's, and then
// stay idle, so that the client side costs a descriptor each and nothing
// more. Linux only.
package idle

// Package rawio reads and writes unix and tcp sockets with raw system calls
// inside the runtime poller's callbacks (see IO), for transport's
// connections and for the connections rpc's server accepts from an
// ordinary *net.UnixListener or *net.TCPListener.
package rawio

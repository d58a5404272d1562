// Package stream is a plain bidirectional stream of messages (JSON,
// Protocol Buffers or raw bytes) over one connection, for programs that want
// to exchange messages without RPC.
//
// Both ends call New on their side of any connection, a *transport.Conn from
// transport.Listen or transport.Dial or any other net.Conn, and then Write
// and Read messages in both directions at once. Messages travel in warren
// frames (package wire), so they are bounded by the receiver's
// MaxMessageSize, checked by the sender before it writes and by the
// receiver before it allocates. The format is specified in the section
// "Plain message streams" of PROTOCOL.md.
//
// Ending a stream is a handshake: CloseWrite sends an end-of-stream marker,
// after which the peer's Read returns every message written before it and
// then io.EOF; Close sends the marker, waits (up to Options.CloseTimeout) for
// the peer's, and closes the connection. A connection that ends without the
// marker, for example because the peer died in the middle of a message,
// makes Read fail with a *ConnError, and a partly received message is never
// returned.
package stream

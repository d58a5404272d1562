// Package evloop holds the pieces of an epoll event loop that rpc's
// event-loop server mode is built from: a Poller (an epoll instance with a
// wake-up eventfd), on Linux only, and the Framing seam through which a
// transport that wraps warren's byte stream (WebSocket) plugs into the loop.
package evloop

// Framing converts between the bytes a socket carries and the warren bytes a
// session reads and writes, for a transport that wraps warren's byte stream
// in frames of its own (WebSocket binary messages). A nil Framing is the
// identity: unix and tcp connections carry warren bytes as they are.
//
// The event loop calls Decode on its goroutine with the bytes it read, and
// Encode under the connection's write lock with the bytes a session writes.
// A Framing is per connection and may keep state (masking keys, a message
// being reassembled); it must not block.
//
// This is the seam the WebSocket transport is to implement; rpc's event loop
// does not use it yet (see ARCHITECTURE.md, "Event loop").
type Framing interface {
	// Decode consumes whole transport frames at the start of src, appends
	// the warren bytes they carry to dst, and returns dst, the number of
	// bytes of src consumed (the rest is the start of a frame), and any
	// control reply to write back (a pong, a close frame).
	Decode(dst, src []byte) (out []byte, n int, reply []byte, err error)
	// Encode appends the transport's encoding of the warren bytes p (one
	// binary frame) to dst.
	Encode(dst, p []byte) []byte
}

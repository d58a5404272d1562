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
// AppendHeader and AppendClose under the connection's write lock. A Framing
// is per connection and keeps the decoding state (the frame being read, a
// fragmented message); it must not block. wsframe.Decoder implements it for
// WebSocket.
type Framing interface {
	// Decode parses the transport frames at the start of src and appends
	// the warren bytes they carry to dst, which may be src[:0] (decoding
	// in place). It returns dst, the number of bytes of src consumed (the
	// rest, the start of a frame header or of a control frame, is passed
	// again with the bytes that follow), and a control reply to write back
	// (a pong, a close frame), valid until the next call: Decode returns
	// after each reply. An error ends the connection (io.EOF for a normal
	// close); the reply, if any, goes out first.
	Decode(dst, src []byte) (out []byte, n int, reply []byte, err error)
	// AppendHeader appends the header of one frame that carries the n
	// warren bytes written after it.
	AppendHeader(dst []byte, n int) []byte
	// AppendClose appends the frame that ends the connection with code.
	AppendClose(dst []byte, code int) []byte
	// Idle reports whether the decoder is between frames, so that the
	// loop may drop it while the connection hibernates, and the one bit of
	// state to make its successor with (a fragmented message under way).
	Idle() (state, ok bool)
}

package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/internal/frameio"
	"github.com/warrenipc/warren/wire"
)

// Wire constants of a plain message stream (PROTOCOL.md, "Plain message
// streams").
const (
	// settingMode is the preface setting that tells a plain message stream
	// from a multiplexed session. A side that leaves it out (an RPC client
	// or server) has mode 0.
	settingMode uint16 = 0x10
	// modeStream is the value of settingMode sent by a plain message stream.
	modeStream = 1
	// streamID carries every frame of a plain message stream, in both
	// directions: DATA frames (one message each, or chunked), then one empty
	// TRAILERS frame with END as the end-of-stream marker.
	streamID = 1
)

const (
	// defaultMaxFrameSize is the MaxFrameSize a Stream advertises by
	// default: twice wire.DefaultMaxFrameSize, because a plain stream has
	// no other streams to interleave with, and larger frames mean fewer
	// system calls (1 MiB messages over a Unix socket go about 1.4 times
	// as fast as with 64 KiB frames).
	defaultMaxFrameSize = 128 << 10
	// defaultHandshakeTimeout bounds the preface exchange in New.
	defaultHandshakeTimeout = 10 * time.Second
	// defaultCloseTimeout bounds Close.
	defaultCloseTimeout = 5 * time.Second

	// keepBuffer is the largest reassembly or encoding buffer a Stream keeps
	// for the next message; larger ones are let go after use.
	keepBuffer = 4 << 20
)

// Options configure a Stream. The zero value (or nil) gives the defaults.
type Options struct {
	// Codec encodes the values given to Write and decodes those given to
	// Read: codec.JSON (the default), codec.Proto or codec.Raw. WriteBytes
	// and ReadBytes bypass it.
	Codec codec.Codec

	// MaxMessageSize is the largest message this side accepts, advertised
	// to the peer, which checks it before sending. 0 means
	// wire.DefaultMaxMessageSize (4 MiB); at most 1 GiB.
	MaxMessageSize uint32
	// MaxFrameSize is the largest frame payload this side accepts; larger
	// messages arrive in chunks. 0 means 128 KiB; the
	// allowed range is 1 KiB to 16 MiB.
	MaxFrameSize uint32

	// DisallowUnknownFields makes Read with the JSON codec fail with a
	// *CodecError naming the field when a message has an object key that
	// the target struct (or protobuf message) does not have.
	DisallowUnknownFields bool

	// HandshakeTimeout bounds the preface exchange in New; 0 means
	// 10 s.
	HandshakeTimeout time.Duration
	// CloseTimeout bounds Close: how long it waits for writes in progress
	// and for the peer's end-of-stream marker. 0 means 5 s.
	CloseTimeout time.Duration
}

// settings validates o and returns the settings this side advertises.
func (o *Options) settings() (wire.Settings, error) {
	if o.HandshakeTimeout < 0 || o.CloseTimeout < 0 {
		return wire.Settings{}, errors.New("warren: stream: negative timeout in Options")
	}
	s := wire.Settings{MaxFrameSize: o.MaxFrameSize, MaxMessageSize: o.MaxMessageSize}
	if s.MaxFrameSize == 0 {
		s.MaxFrameSize = defaultMaxFrameSize
	}
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return wire.Settings{}, &opError{"options", err}
	}
	return s, nil
}

// Stream is one end of a plain message stream.
//
// Concurrency: one goroutine may read (Read, ReadBytes) while another writes
// (Write, WriteBytes, CloseWrite): the two directions are independent. Reads
// are serialized with each other, and so are writes; each message is written
// whole, so concurrent writers never interleave their messages. Close may be
// called from any goroutine, at any time and more than once.
type Stream struct {
	conn         net.Conn
	codec        codec.Codec
	strict       bool // Options.DisallowUnknownFields
	closeTimeout time.Duration
	local        wire.Settings // what this side accepts
	peer         wire.Settings // what the peer accepts

	closing   atomic.Bool // Close has been called
	closeOnce sync.Once
	closeErr  error

	rmu  sync.Mutex // protects following: the read side
	r    *frameio.Reader
	part partial      // the chunked message being received
	rbuf []byte       // where Read assembles chunked messages, reused
	rerr error        // sticky: io.EOF after the peer's end marker, or why reading failed
	jr   bytes.Reader // input of the JSON decoder, reused

	wmu    sync.Mutex // protects following: the write side
	w      *frameio.Writer
	wbuf   []byte // encoding buffer, reused
	wended bool   // the end marker was sent
	werr   error  // sticky: why writing failed
}

var _ io.Closer = (*Stream)(nil)

// New starts a plain message stream over conn, which the Stream then owns:
// both ends exchange prefaces (each sends its own without waiting for the
// other's, so New works over unbuffered connections such as net.Pipe as
// well as sockets), bounded by Options.HandshakeTimeout. New sets and then
// clears the connection's deadlines. If New fails, it closes conn.
//
// A peer that is not warren gives an error matching wire.ErrNotWarren; one
// that speaks warren RPC rather than plain streams, one matching
// ErrNotStream; invalid options, a *wire.SettingError.
func New(conn net.Conn, opts *Options) (*Stream, error) {
	if conn == nil {
		return nil, errors.New("warren: stream: nil connection")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	local, err := o.settings()
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &Stream{
		conn:         conn,
		codec:        o.Codec,
		strict:       o.DisallowUnknownFields,
		closeTimeout: o.CloseTimeout,
		local:        local,
	}
	if s.codec == nil {
		s.codec = codec.JSON
	}
	if s.closeTimeout == 0 {
		s.closeTimeout = defaultCloseTimeout
	}
	timeout := o.HandshakeTimeout
	if timeout == 0 {
		timeout = defaultHandshakeTimeout
	}
	if s.peer, err = handshake(conn, local, timeout); err != nil {
		return nil, &opError{"handshake", err}
	}
	s.r = frameio.NewReader(conn, local.MaxFrameSize)
	s.w = frameio.NewWriter(conn, int(min(uint64(wire.HeaderSize)+uint64(s.peer.MaxFrameSize), frameio.DefaultBufferSize)))
	return s, nil
}

// handshake sends this side's preface and reads the peer's. It closes conn
// when it fails.
func handshake(conn net.Conn, local wire.Settings, timeout time.Duration) (wire.Settings, error) {
	// Deadline errors are ignored here and below: a connection without
	// deadlines is still usable, only unbounded.
	conn.SetDeadline(time.Now().Add(timeout))
	preface := appendPreface(make([]byte, 0, 32), local)
	// Write from another goroutine so that neither side waits for the
	// other to read (a net.Pipe has no buffer). It ends before we return.
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(preface)
		sent <- err
	}()
	peer, err := readPreface(conn)
	if err != nil {
		conn.Close() // also ends a write the peer does not read
		<-sent
		return peer, err
	}
	if err := <-sent; err != nil {
		conn.Close()
		return peer, fmt.Errorf("sending preface: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return peer, nil
}

// appendPreface appends the preface of a plain message stream: the settings
// of local, then the mode setting.
func appendPreface(b []byte, local wire.Settings) []byte {
	start := len(b)
	b = wire.AppendPreface(b, local)
	b = append(b, byte(settingMode>>8), byte(settingMode), 0, 0, 0, modeStream)
	b[start+5]++ // the settings count
	return b
}

// recorder keeps the bytes read through it, up to a preface's worth.
type recorder struct {
	r   io.Reader
	n   int
	buf [wire.MaxPrefaceSize]byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += copy(r.buf[r.n:], p[:max(n, 0)])
	return n, err
}

// readPreface reads the peer's preface and checks that it opens a plain
// message stream.
func readPreface(conn net.Conn) (wire.Settings, error) {
	rec := recorder{r: conn}
	peer, err := wire.ReadPreface(&rec) // reads exactly the preface
	if err != nil {
		return peer, err
	}
	var mode uint32
	for p := rec.buf[6:rec.n]; len(p) >= 6; p = p[6:] {
		if uint16(p[0])<<8|uint16(p[1]) == settingMode {
			mode = uint32(p[2])<<24 | uint32(p[3])<<16 | uint32(p[4])<<8 | uint32(p[5])
		}
	}
	switch mode {
	case modeStream:
		return peer, nil
	case 0:
		return peer, fmt.Errorf("%w: it opened a multiplexed (RPC) session", ErrNotStream)
	}
	return peer, fmt.Errorf("%w: it asked for mode %d", ErrNotStream, mode)
}

// Conn returns the connection under s, for example to read the peer's
// identity from a *transport.Conn. Reading or writing it directly breaks the
// stream. A read deadline set on it makes a blocked Read fail with a
// *ConnError whose Timeout() is true and leaves the stream usable; a write
// timeout ends the write side.
func (s *Stream) Conn() net.Conn { return s.conn }

// PeerMaxMessageSize returns the largest message the peer accepts. Write and
// WriteBytes fail with a *wire.MessageTooLargeError for a larger one.
func (s *Stream) PeerMaxMessageSize() int { return int(s.peer.MaxMessageSize) }

// Close ends the stream and closes the connection. It sends the
// end-of-stream marker (after writes in progress), waits for the peer's
// marker, dropping any messages that arrive meanwhile, and then closes the
// connection. So the peer reads every message written before Close, and the
// connection never closes with data unread, which on TCP would reset it and
// could make the peer lose the last messages. A Read blocked in another
// goroutine returns ErrClosed at once. After a read error other than io.EOF
// (the connection failed, or the peer broke the protocol) Close just closes
// the connection.
//
// Close waits at most Options.CloseTimeout; if the peer has not ended its
// side by then it returns ErrCloseTimeout. A peer ends its side when it
// calls Close, or CloseWrite; one that only writes and never reads does not
// notice the end marker. To read the peer's last messages, call CloseWrite
// and Read until io.EOF before Close. To abort without the handshake, close
// the connection itself: the peer then gets a *ConnError.
//
// Close returns nil when the handshake completed or the peer closed the
// connection, a *ConnError if the end marker could not be sent, and the
// same result on every call; a second call waits for the first to finish.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

// aLongTimeAgo is a deadline in the past, which makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

func (s *Stream) close() error {
	s.closing.Store(true)
	deadline := time.Now().Add(s.closeTimeout)
	s.conn.SetWriteDeadline(deadline)    // writes in progress get until then
	s.conn.SetReadDeadline(aLongTimeAgo) // a blocked Read returns now

	s.rmu.Lock()
	ended := s.rerr != nil // the read side already ended, and said why
	var endErr, err error
	switch {
	case ended && s.rerr != io.EOF:
		// The connection failed or the peer broke the protocol: there is
		// no one to tell.
	case ended:
		s.wmu.Lock()
		endErr = s.endLocked()
		s.wmu.Unlock()
	default:
		// Send the end marker while reading: if both sides close at once
		// over full (or unbuffered) connections, each must read for the
		// other's write to finish. The goroutine ends before Close returns.
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			s.wmu.Lock()
			endErr = s.endLocked()
			s.wmu.Unlock()
		}()
		s.conn.SetReadDeadline(deadline)
		err = s.drainLocked()
		<-sent
	}
	peerEnded := s.rerr == io.EOF
	s.rmu.Unlock()

	cerr := s.conn.Close()
	var ce *ConnError
	switch {
	case endErr != nil && !ended && !peerEnded:
		// The end marker did not go out and the peer did not end the
		// stream: it may have missed messages.
		err = endErr
		if isTimeout(err) {
			err = ErrCloseTimeout // writes in progress did not finish in time
		} else if errors.As(err, &ce) {
			err = &ConnError{Op: "close", Partial: ce.Partial, Err: ce.Err}
		}
	case endErr != nil:
		err = nil // the peer ended the stream or left, which a Read reported
	case err == nil && cerr != nil:
		err = &ConnError{Op: "close", Err: cerr}
	}
	return err
}

package systems

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Raw is the floor: bare Go sockets with no framing beyond a 17-byte
// header at the start of each exchange, so a message costs one write and
// one read each way. It is a System so that the harness can run it where it
// runs the others, but with fixed-size messages: the first Echo (or stream
// Send) on a connection fixes the message size for the rest of it.
//
// Protocol, client first: a header (mode byte, n, total as big-endian
// uint64), then
//
//	'e' echo: messages of exactly n bytes, each written back, until EOF;
//	's' sink: total bytes, read n at a time, answered by one byte; then
//	    another header may follow.
type Raw struct{}

func (Raw) Name() string         { return "raw" }
func (Raw) OneCallPerConn() bool { return true }

const (
	rawHeaderLen = 17
	rawMaxN      = 64 << 20
)

func (Raw) Serve(network, address string) (net.Addr, func(), error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, nil, err
	}
	stop := serveConns(l, func(c net.Conn) { rawServe(c) })
	return l.Addr(), stop, nil
}

func rawServe(c net.Conn) error {
	var h [rawHeaderLen]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint64(h[1:])
		total := binary.BigEndian.Uint64(h[9:])
		if n == 0 || n > rawMaxN {
			return fmt.Errorf("raw: message size %d", n)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		switch h[0] {
		case 'e':
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return err
				}
				if _, err := c.Write(buf); err != nil {
					return err
				}
			}
		case 's':
			for total > 0 {
				m, err := c.Read(buf[:min(n, total)])
				if err != nil {
					return err
				}
				total -= uint64(m)
			}
			if _, err := c.Write(h[:1]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("raw: mode %q", h[0])
		}
	}
}

func (Raw) Dial(ctx context.Context, network, address string) (Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &rawConn{c: nc, ready: make(chan struct{})}, nil
}

type rawConn struct {
	c     net.Conn
	once  sync.Once
	n     int           // message size, fixed by the first message
	ready chan struct{} // closed once n is set and the header written
	err   error         // of writing the header
}

// start writes the echo header for messages of n bytes, once.
func (r *rawConn) start(n int) error {
	r.once.Do(func() {
		r.n = n
		r.err = writeRawHeader(r.c, 'e', n, 0)
		close(r.ready)
	})
	if r.err != nil {
		return r.err
	}
	if n != r.n {
		return fmt.Errorf("raw: message of %d bytes on a connection of %d-byte messages", n, r.n)
	}
	return nil
}

func writeRawHeader(w io.Writer, mode byte, n int, total int64) error {
	h := make([]byte, 0, rawHeaderLen)
	h = append(h, mode)
	h = binary.BigEndian.AppendUint64(h, uint64(n))
	h = binary.BigEndian.AppendUint64(h, uint64(total))
	_, err := w.Write(h)
	return err
}

func (r *rawConn) Caller() Caller { return &rawCaller{r: r} }

type rawCaller struct {
	r   *rawConn
	buf []byte
}

func (c *rawCaller) Echo(_ context.Context, req []byte) ([]byte, error) {
	if err := c.r.start(len(req)); err != nil {
		return nil, err
	}
	if _, err := c.r.c.Write(req); err != nil {
		return nil, err
	}
	if cap(c.buf) < len(req) {
		c.buf = make([]byte, len(req))
	}
	c.buf = c.buf[:len(req)]
	_, err := io.ReadFull(c.r.c, c.buf)
	return c.buf, err
}

func (r *rawConn) Close() error { return r.c.Close() }

// EchoStream returns the connection itself as a stream: Send writes a
// message and Recv reads one of the same size.
func (r *rawConn) EchoStream(context.Context) (Stream, error) { return &rawStream{r: r}, nil }

type rawStream struct {
	r   *rawConn
	buf []byte
}

func (s *rawStream) Send(msg []byte) error {
	if err := s.r.start(len(msg)); err != nil {
		return err
	}
	_, err := s.r.c.Write(msg)
	return err
}

// Recv returns a buffer that the next Recv reuses, as a reader loop over a
// bare socket would.
func (s *rawStream) Recv() ([]byte, error) {
	<-s.r.ready
	if s.r.err != nil {
		return nil, s.r.err
	}
	if s.buf == nil {
		s.buf = make([]byte, s.r.n)
	}
	_, err := io.ReadFull(s.r.c, s.buf)
	return s.buf, err
}

// Close does nothing: the raw echo has no end of stream short of closing
// the connection.
func (s *rawStream) Close() error { return nil }

// RawSink writes total bytes in writes of len(buf) bytes on a connection
// from Raw.Dial and waits for the server's acknowledgement that it read them
// all. It is the throughput floor: one-way bytes over a bare socket.
func RawSink(c Conn, buf []byte, total int64) error {
	n := len(buf)
	r, ok := c.(*rawConn)
	if !ok {
		return errors.New("raw: RawSink needs a connection from Raw.Dial")
	}
	if err := writeRawHeader(r.c, 's', n, total); err != nil {
		return err
	}
	for left := total; left > 0; {
		m, err := r.c.Write(buf[:min(int64(n), left)])
		if err != nil {
			return err
		}
		left -= int64(m)
	}
	_, err := io.ReadFull(r.c, buf[:1])
	return err
}

// serveConns accepts connections on l and runs serve on each in its own
// goroutine until the returned stop closes l and every open connection and
// waits for the goroutines. serve's connection is closed after it returns.
func serveConns(l net.Listener, serve func(net.Conn)) (stop func()) {
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				serve(c)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
	return func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

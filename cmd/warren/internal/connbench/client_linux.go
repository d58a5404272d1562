package connbench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/codec"
	"github.com/warrenipc/warren/wire"
)

// The call every connection makes once per round.
const (
	tickMethod  = "Conns.Tick"
	tickPayload = 8 // round (u32) | connection index in its client (u32); echoed back
)

// creditAt is when the client returns connection-window credit: half the
// connection window a default preface grants (16 x InitialWindow), as
// PROTOCOL.md recommends. Stream windows need none: each call is a new
// stream.
const creditAt = 16 * wire.DefaultInitialWindow / 2

// tinyClient holds connections to one server as bare blocking socket
// descriptors, with no goroutine, no net.Conn and no buffer per connection,
// and makes one unary call on each per round, pipelined across connections.
// It is not safe for concurrent use.
type tinyClient struct {
	dst     target
	window  int           // connections with a request or handshake in flight at once
	timeout time.Duration // bound on each blocking read or write
	fds     []int32
	left    map[int32][]byte  // bytes read past a reply, by descriptor (rare)
	wsLeft  map[int32]wsState // WebSocket: a frame under way after a reply (rare)
	buf     []byte            // read buffer, shared by all connections
	wbuf    []byte            // WebSocket: the frame being written
	credit  uint32            // DATA bytes every connection received and has not credited
	preface []byte
	seed    uint64 // WebSocket: makes the handshake keys of this client
}

func newTinyClient(dst target, window int, timeout time.Duration) *tinyClient {
	return &tinyClient{
		dst: dst, window: max(window, 1), timeout: timeout,
		left:    map[int32][]byte{},
		wsLeft:  map[int32]wsState{},
		buf:     make([]byte, wire.HeaderSize+wire.DefaultMaxFrameSize),
		preface: wire.AppendPreface(nil, wire.Settings{}),
		seed:    rand.Uint64(),
	}
}

// Close closes every connection.
func (c *tinyClient) Close() {
	for _, fd := range c.fds {
		unix.Close(int(fd))
	}
	c.fds = nil
}

// Conns returns the number of open connections.
func (c *tinyClient) Conns() int { return len(c.fds) }

// Connect opens n more connections: for each, connect and send the client
// preface (on WebSocket, after the opening handshake's request); the
// server's preface (after its handshake response) is read window
// connections later, so that handshakes overlap.
func (c *tinyClient) Connect(n int) error {
	first := len(c.fds)
	for i := 0; i < n+c.window; i++ {
		if i < n {
			fd, err := c.dial(first + i)
			if err != nil {
				return fmt.Errorf("connection %d: %w", first+i, err)
			}
			c.fds = append(c.fds, int32(fd))
		}
		if j := i - c.window; j >= 0 && j < n {
			if err := c.readPreface(first + j); err != nil {
				return fmt.Errorf("connection %d: %w", first+j, err)
			}
		}
	}
	return nil
}

// dial opens connection i: connects, sets the timeouts and sends the
// client's first bytes.
func (c *tinyClient) dial(i int) (int, error) {
	fd, err := c.dst.connect(i)
	if err != nil {
		return -1, err
	}
	if c.timeout > 0 {
		tv := unix.NsecToTimeval(c.timeout.Nanoseconds())
		if err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err == nil {
			err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		}
		err = os.NewSyscallError("setsockopt", err)
	}
	if err == nil {
		if c.dst.network == netWS {
			c.wbuf = appendUpgrade(c.wbuf[:0], c.dst, c.wsKey(i))
			c.wbuf = appendMasked(c.wbuf, c.preface)
			err = writeAll(int32(fd), c.wbuf)
		} else {
			err = writeAll(int32(fd), c.preface)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// readPreface reads the server's preface on connection i (on WebSocket,
// after the handshake response, which it checks), and keeps any bytes
// that follow it for the first reply.
func (c *tinyClient) readPreface(i int) error {
	fd := c.fds[i]
	var st wsState
	n := 0
	if c.dst.network == netWS {
		var err error
		if n, st, err = c.readUpgrade(fd, c.wsKey(i)); err != nil {
			return fmt.Errorf("WebSocket handshake: %w", err)
		}
	}
	for {
		_, used, ok, err := wire.ParsePreface(c.buf[:n])
		if err != nil {
			return fmt.Errorf("server preface: %w", err)
		}
		if ok {
			if used < n {
				c.left[fd] = bytes.Clone(c.buf[used:n])
			}
			if st.remain != 0 || st.nhdr != 0 {
				c.wsLeft[fd] = st
			}
			return nil
		}
		k, err := c.fill(fd, n, &st)
		if err != nil {
			return fmt.Errorf("server preface: %w", err)
		}
		n += k
	}
}

// fill reads at least one more byte of the warren stream of fd into
// c.buf[n:]: on WebSocket, the payload of the server's frames, with st the
// state of the frame under way.
func (c *tinyClient) fill(fd int32, n int, st *wsState) (int, error) {
	if c.dst.network != netWS {
		return readSome(fd, c.buf[n:])
	}
	for {
		h := copy(c.buf[n:], st.hdr[:st.nhdr])
		if n+h == len(c.buf) {
			return 0, errors.New("frame larger than the read buffer")
		}
		k, err := readSome(fd, c.buf[n+h:])
		if err != nil {
			return 0, err
		}
		out, err := st.unframe(c.buf[n : n+h+k])
		if err != nil {
			return 0, err
		}
		if len(out) > 0 {
			return len(out), nil
		}
	}
}

// send writes b on fd: on WebSocket, as one masked binary frame.
func (c *tinyClient) send(fd int32, b []byte) error {
	if c.dst.network == netWS {
		c.wbuf = appendMasked(c.wbuf[:0], b)
		b = c.wbuf
	}
	return writeAll(fd, b)
}

// Round makes one call of Conns.Tick on every connection, on stream
// 2*round+1, and checks every reply: the request's bytes echoed back, then
// TRAILERS with status OK. Requests go out window connections ahead of the
// replies read.
func (c *tinyClient) Round(round uint32) error {
	stream := 2*round + 1
	var req []byte
	if c.credit >= creditAt {
		req = wire.AppendFrame(req, 0, wire.TypeWindow, 0, wire.AppendWindow(nil, c.credit))
	}
	req = appendTick(req, stream, round, 0)
	idx := req[len(req)-4:] // the connection index in the request
	var want [tickPayload]byte
	binary.BigEndian.PutUint32(want[:], round)
	for i := 0; i < len(c.fds)+c.window; i++ {
		if i < len(c.fds) {
			binary.BigEndian.PutUint32(idx, uint32(i))
			if err := c.send(c.fds[i], req); err != nil {
				return fmt.Errorf("connection %d: sending round %d: %w", i, round, err)
			}
		}
		if j := i - c.window; j >= 0 && j < len(c.fds) {
			binary.BigEndian.PutUint32(want[4:], uint32(j))
			if err := c.readReply(c.fds[j], stream, want[:]); err != nil {
				return fmt.Errorf("connection %d: round %d: %w", j, round, err)
			}
		}
	}
	if c.credit >= creditAt {
		c.credit = 0
	}
	c.credit += tickPayload
	return nil
}

// appendTick appends the frames of one call of Conns.Tick to b: HEADERS with
// the call header (raw codec, no deadline, no metadata), then DATA|END with
// the round and the connection index.
func appendTick(b []byte, stream, round, index uint32) []byte {
	var hdr [32]byte
	b = wire.AppendFrame(b, stream, wire.TypeHeaders, 0, wire.AppendCallHeader(hdr[:0], tickMethod, codec.IDRaw, 0, nil))
	var p [tickPayload]byte
	binary.BigEndian.PutUint32(p[:], round)
	binary.BigEndian.PutUint32(p[4:], index)
	return wire.AppendFrame(b, stream, wire.TypeData, wire.FlagEnd, p[:])
}

// readReply reads frames from fd until the TRAILERS of stream and checks
// the reply. It answers PINGs, ignores WINDOW credit and fails on GOAWAY
// and on anything else.
func (c *tinyClient) readReply(fd int32, stream uint32, want []byte) error {
	b := c.buf[:0]
	if l, ok := c.left[fd]; ok {
		b = append(b, l...)
		delete(c.left, fd)
	}
	st, ok := c.wsLeft[fd]
	if ok {
		delete(c.wsLeft, fd)
	}
	gotData := false
	for {
		for {
			rest, h, p, ok, err := wire.ParseFrame(b, wire.DefaultMaxFrameSize)
			if err != nil {
				return fmt.Errorf("bad frame from the server: %w", err)
			}
			if !ok {
				break
			}
			b = rest
			switch {
			case h.Stream == stream && h.Type == wire.TypeHeaders: // reply metadata
			case h.Stream == stream && h.Type == wire.TypeData:
				if gotData || h.Flags&wire.FlagMore != 0 || !bytes.Equal(p, want) {
					return fmt.Errorf("reply %x (flags %#x), want %x", p, h.Flags, want)
				}
				gotData = true
			case h.Stream == stream && h.Type == wire.TypeTrailers:
				t, err := wire.ParseTrailer(p)
				if err != nil {
					return err
				}
				if t.Code != 0 {
					return fmt.Errorf("status %d: %s", t.Code, t.Message)
				}
				if !gotData || h.Flags&wire.FlagEnd == 0 {
					return fmt.Errorf("TRAILERS without a reply message or END (flags %#x)", h.Flags)
				}
				if len(b) > 0 {
					c.left[fd] = bytes.Clone(b)
				}
				if st.remain != 0 || st.nhdr != 0 {
					c.wsLeft[fd] = st
				}
				return nil
			case h.Stream == 0 && h.Type == wire.TypeWindow:
			case h.Stream == 0 && h.Type == wire.TypePing && h.Flags&wire.FlagAck == 0:
				if err := c.send(fd, wire.AppendFrame(nil, 0, wire.TypePing, wire.FlagAck, p)); err != nil {
					return err
				}
			case h.Type == wire.TypeGoAway:
				_, code, msg, _ := wire.ParseGoAway(p)
				return fmt.Errorf("server sent GOAWAY (code %d): %s", code, msg)
			default:
				return fmt.Errorf("unexpected frame %v", h)
			}
		}
		n := copy(c.buf, b) // b is within c.buf: copy moves it to the start
		if n == len(c.buf) {
			return errors.New("frame larger than the read buffer")
		}
		k, err := c.fill(fd, n, &st)
		if err != nil {
			return err
		}
		b = c.buf[:n+k]
	}
}

// readSome reads at least one byte from fd; the end of the connection is
// io.EOF and an expired SO_RCVTIMEO a timeout error.
func readSome(fd int32, b []byte) (int, error) {
	for {
		n, err := unix.Read(int(fd), b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, errors.New("read timed out")
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func writeAll(fd int32, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(int(fd), b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return errors.New("write timed out")
		case err != nil:
			return os.NewSyscallError("write", err)
		}
		b = b[n:]
	}
	return nil
}

// clientMain is the client child: it connects to one server's socket and
// runs the orchestrator's commands, one per line on stdin, answering each
// with one line ("ok ..." or "err message") on stdout:
//
//	connect N   open N more connections       -> ok CONNS NANOSECONDS
//	round R     one call on every connection  -> ok CONNS NANOSECONDS
//	mem         resident memory               -> ok RSS ANON
//
// It exits when stdin closes.
func clientMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(cmdClient, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "server `address` (unix://PATH, tcp://IP:PORT or ws://IP:PORT/PATH)")
	src := fs.String("source", "", "first IPv4 source `address` to connect from (tcp, ws): connection i from this address + i/12000")
	window := fs.Int("window", 1000, "connections with a request in flight at once")
	timeout := fs.Duration("io-timeout", time.Minute, "bound on each read and write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dst, err := parseTarget(*addr, *src)
	if err != nil {
		return fmt.Errorf("conns-client: --addr: %w", err)
	}
	if _, err := raiseNoFile(); err != nil {
		return err
	}
	base, err := selfMem()
	if err != nil {
		return err
	}
	c := newTinyClient(dst, *window, *timeout)
	defer c.Close()
	fmt.Fprintf(stdout, "ready %d %d\n", base.RSS, base.Anon)
	return serveCommands(stdin, stdout, func(cmd string, arg uint64) (string, error) {
		start := time.Now()
		switch cmd {
		case "connect":
			if err := c.Connect(int(arg)); err != nil {
				return "", err
			}
		case "round":
			if err := c.Round(uint32(arg)); err != nil {
				return "", err
			}
		case "mem":
			m, err := selfMem()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d %d", m.RSS, m.Anon), nil
		default:
			return "", fmt.Errorf("unknown command %q", cmd)
		}
		return fmt.Sprintf("%d %d", c.Conns(), time.Since(start).Nanoseconds()), nil
	})
}

// serveCommands runs a child's command loop: one command per line, with an
// optional numeric argument, answered with "ok RESULT" or "err MESSAGE".
// It returns nil when stdin ends or says "quit".
func serveCommands(stdin io.Reader, stdout io.Writer, do func(cmd string, arg uint64) (string, error)) error {
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "quit" {
			return nil
		}
		var arg uint64
		if len(f) > 1 {
			var err error
			if arg, err = strconv.ParseUint(f[1], 10, 64); err != nil {
				fmt.Fprintf(stdout, "err bad argument %q\n", f[1])
				continue
			}
		}
		res, err := do(f[0], arg)
		if err != nil {
			fmt.Fprintf(stdout, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Fprintf(stdout, "ok %s\n", res)
	}
	return sc.Err()
}

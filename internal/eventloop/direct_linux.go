//go:build linux

package eventloop

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/warrenipc/warren/wire"
)

// Large payloads in place: once a DATA frame's header shows that a large
// payload follows, the loop reads the rest of it from the socket straight
// into the message's buffer (mux.Session.FeedInto), as goroutine mode's
// reader does, instead of through its read buffer and a holding buffer
// with a copy out of each. After such a frame the next reads take just a
// frame header, so that the next large payload goes in place too.

// directRun is how many reads of a lone frame header follow a payload read
// in place, before the loop reads whole buffers again.
const directRun = 4

// directState is an active connection's payload being read in place.
type directState struct {
	dst  []byte      // where the payload goes; nil when none is
	got  int         // dst[:got] is in
	h    wire.Header // the frame's header
	want int         // a.pend needs this many bytes before FeedInto is asked again
	run  uint8       // header-only reads left (see directRun)
}

// startDirect asks rec's session whether the rest of the incomplete frame b
// is to be read in place, and if so starts doing it: it reports whether b
// was taken.
func (l *evLoop) startDirect(rec *loopConn, a *activeConn, b []byte) bool {
	h, dst, k, need := a.sess.FeedInto(b)
	a.d.want = need
	if dst == nil {
		return false
	}
	a.d.dst, a.d.got, a.d.h = dst, k, h
	a.since = l.now // a frame began
	return true
}

// readDirect reads more of the payload being read in place, and hands the
// frame to the session once it is complete.
func (l *evLoop) readDirect(rec *loopConn, a *activeConn) {
	n, err := l.readSock(rec, a.d.dst[a.d.got:]) // recvmsg where descriptors may come with the bytes
	if !l.readOK(rec, n, err, io.ErrUnexpectedEOF) {
		return
	}
	rec.last = l.clock()
	a.lastIO = l.now
	if a.d.got += n; a.d.got < len(a.d.dst) {
		return
	}
	h, dst := a.d.h, a.d.dst
	a.d.dst, a.d.got = nil, 0
	a.d.run = directRun
	if err := a.sess.FeedFrame(h, dst); err != nil {
		l.finalize(rec, err)
		return
	}
	l.updatePause(rec)
}

// readOK reports whether a read of rec's socket that returned n, err
// brought bytes. If not, the connection is closed, with eof if the peer
// closed it, unless the read would have blocked.
func (l *evLoop) readOK(rec *loopConn, n int, err error, eof error) bool {
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return false
	case err != nil:
		l.finalize(rec, os.NewSyscallError("read", err))
		return false
	case n == 0:
		l.finalize(rec, eof)
		return false
	}
	return true
}

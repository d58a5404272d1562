//go:build linux

package eventloop

import (
	"bytes"
	"encoding/binary"
	"net"
	"time"

	"github.com/warrenipc/warren/internal/admit"
	"github.com/warrenipc/warren/internal/mux"
	"github.com/warrenipc/warren/internal/pool"
	"github.com/warrenipc/warren/internal/shm"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// The event loop's connection table: one record per descriptor, in pages,
// and what an active connection has besides its record.

// loopConn is the record of one connection, kept for its whole life in the
// loop's table. Only the loop goroutine touches it.
type loopConn struct {
	act *activeConn    // non-nil while the connection is active
	set *wire.Settings // the peer's settings (interned); nil before the preface
	fed fedState       // the session's state while it hibernates
	// adm is the connection's admission (uid, pid and, as its ID, the
	// file descriptor), counted from open to finalize or handoff. Its
	// activity is admit.Busy while the connection is active, so that only
	// hibernating ones are shed.
	adm   admit.Conn
	last  uint32 // loop clock (ms) when the last byte arrived
	port  uint16 // tcp
	state uint8
	flags uint8
	// ip is the peer's IP address (tcp); with flCred, its first 4 bytes
	// are the peer's gid instead (unix).
	ip [16]byte
}

// fedState is mux.FedState without its padding: GoAwaySent is flGoAway.
type fedState struct {
	lastPeerID, goAwayLast uint32
	sendWin, recvWin       int64
	unacked                int64
}

func (rec *loopConn) fedState() mux.FedState {
	f := &rec.fed
	return mux.FedState{
		LastPeerID: f.lastPeerID, GoAwayLast: f.goAwayLast, GoAwaySent: rec.flags&flGoAway != 0,
		ConnSendWin: f.sendWin, ConnRecvWin: f.recvWin, ConnUnacked: f.unacked,
	}
}

func (rec *loopConn) keepFed(st mux.FedState) {
	rec.fed = fedState{st.LastPeerID, st.GoAwayLast, st.ConnSendWin, st.ConnRecvWin, st.ConnUnacked}
	rec.flags &^= flGoAway
	if st.GoAwaySent {
		rec.flags |= flGoAway
	}
}

// fd returns the connection's file descriptor.
func (rec *loopConn) fd() int { return int(rec.adm.ID) }

// setCred records the peer's credentials, read from the kernel.
func (rec *loopConn) setCred(uid, gid, pid int32) {
	rec.adm.UID, rec.adm.PID = uid, pid
	binary.NativeEndian.PutUint32(rec.ip[:4], uint32(gid))
	rec.flags |= flCred
}

// gid returns the peer's gid (with flCred).
func (rec *loopConn) gid() int32 { return int32(binary.NativeEndian.Uint32(rec.ip[:4])) }

// activeConn is what an active connection has besides its record.
type activeConn struct {
	conn    *fedConn
	sess    *mux.Session // nil until the connection needs one
	se      Session      // with sess
	pend    *pool.Buf    // the start of a frame (or of the preface) read so far
	plen    int
	since   time.Time // when the handshake or the frame in pend began
	lastIO  time.Time // when the last byte arrived
	closeAt time.Time // a refused connection: when to close it
	refuse  string    // why the connection is refused, if it is
	code    status.Code
	idx     int        // in evLoop.active
	ws      *wsConn    // WebSocket connections: the frame decoder
	files   *shm.Queue // descriptors received (files_linux.go)
	d       directState
}

// connTable maps file descriptors to records. Pages are allocated as
// descriptors reach them (the kernel hands out the lowest free one) and
// dropped when their last record is freed; records never move while in
// use, so pointers to them stay valid.
type connTable struct {
	pages []*[1 << pageShift]loopConn
	used  []int32 // records in use per page
}

// get returns the record for fd, a descriptor just accepted, counting it in
// use.
func (t *connTable) get(fd int) *loopConn {
	p := fd >> pageShift
	for len(t.pages) <= p {
		t.pages = append(t.pages, nil)
		t.used = append(t.used, 0)
	}
	if t.pages[p] == nil {
		t.pages[p] = new([1 << pageShift]loopConn)
	}
	t.used[p]++
	return &t.pages[p][fd&(1<<pageShift-1)]
}

// free clears fd's record and drops its page if no record of it is in use.
func (t *connTable) free(fd int) {
	p := fd >> pageShift
	t.pages[p][fd&(1<<pageShift-1)] = loopConn{}
	if t.used[p]--; t.used[p] == 0 {
		t.pages[p] = nil
	}
}

func (t *connTable) lookup(fd int) *loopConn {
	p := fd >> pageShift
	if fd < 0 || p >= len(t.pages) || t.pages[p] == nil {
		return nil
	}
	return &t.pages[p][fd&(1<<pageShift-1)]
}

// each calls fn for every record in use.
func (t *connTable) each(fn func(*loopConn)) {
	for _, pg := range t.pages {
		if pg == nil {
			continue
		}
		for i := range pg {
			if pg[i].state != stFree {
				fn(&pg[i])
			}
		}
	}
}

func (rec *loopConn) ipAddr() net.IP {
	if rec.flags&flIPv4 != 0 {
		return net.IPv4(rec.ip[0], rec.ip[1], rec.ip[2], rec.ip[3])
	}
	return net.IP(bytes.Clone(rec.ip[:]))
}

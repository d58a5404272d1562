package rpc

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// A refused connection (the policy, a limit, a drain) is answered in the
// protocol its peer speaks, told from a bounded prefix of what it sends: a
// warren peer gets the server's preface and a GOAWAY with the reason, an
// HTTP/1.1 or HTTP/2 peer one HTTP answer in its request's protocol
// (bridgecore.WriteProtocolError: Connect's JSON error, 403 for the policy,
// or gRPC's trailers-only status; bridgecore.ServeRefusal bounds what it
// reads). Nothing beyond the prefix is read.

// refusePeekWait bounds the wait for a refused peer's first 4 bytes,
// which tell HTTP from warren; a peer silent that long is answered as a
// warren peer.
const refusePeekWait = 100 * time.Millisecond

// refuseConn answers a connection the policy or a limit refused, with the
// reason and code (PermissionDenied for the policy, Unavailable during a
// drain, ResourceExhausted for a limit), and closes it.
func (s *Server) refuseConn(conn net.Conn, key, reason string, code status.Code) {
	var head [4]byte
	conn.SetReadDeadline(time.Now().Add(refusePeekWait))
	n, _ := io.ReadFull(conn, head[:])
	conn.SetReadDeadline(time.Time{})
	if _, _, _, err := wire.ParsePreface(head[:n]); n == len(head) && err != nil {
		if nw := (*wire.NotWarrenError)(nil); errors.As(err, &nw) && nw.HTTP {
			bridgecore.ServeRefusal(httpbody.NewReplayConn(conn, head[:n]), status.New(code, reason), s.httpErrorLog())
			return
		}
	}
	b := wire.AppendPreface(make([]byte, 0, 128+len(reason)), s.opts.Settings.WithDefaults())
	b = wire.AppendFrame(b, 0, wire.TypeGoAway, 0, wire.AppendGoAway(nil, 0, uint32(code), reason))
	s.adm.Refuse(conn, key, b)
}

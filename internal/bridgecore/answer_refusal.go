package bridgecore

import (
	"errors"
	"io"
	"log"
	"net"
	"time"

	"github.com/warrenipc/warren/internal/httpbody"
	"github.com/warrenipc/warren/status"
	"github.com/warrenipc/warren/wire"
)

// A refused connection (the policy, a limit, a drain) is answered in the
// protocol its peer speaks, told from a bounded prefix of what it sends: a
// warren peer gets the server's preface and a GOAWAY with the reason, an
// HTTP/1.1 or HTTP/2 peer one HTTP answer in its request's protocol
// (WriteProtocolError: Connect's JSON error, 403 for the policy,
// or gRPC's trailers-only status; ServeRefusal bounds what it
// reads). Nothing beyond the prefix is read.

// RefusePeekWait bounds the wait for a refused peer's first 4 bytes,
// which tell HTTP from warren; a peer silent that long is answered as a
// warren peer.
const RefusePeekWait = 100 * time.Millisecond

// AnswerRefusal answers conn, refused with se (PermissionDenied for the
// policy, Unavailable during a drain, ResourceExhausted for a limit), in
// the protocol its first bytes speak: HTTP with ServeRefusal, warren (or
// silence for RefusePeekWait) with warren, which writes the refusal and
// closes conn.
func AnswerRefusal(conn net.Conn, se *status.Error, errLog *log.Logger, warren func()) {
	var head [4]byte
	conn.SetReadDeadline(time.Now().Add(RefusePeekWait))
	n, _ := io.ReadFull(conn, head[:])
	conn.SetReadDeadline(time.Time{})
	if _, _, _, err := wire.ParsePreface(head[:n]); n == len(head) && err != nil {
		if nw := (*wire.NotWarrenError)(nil); errors.As(err, &nw) && nw.HTTP {
			ServeRefusal(httpbody.NewReplayConn(conn, head[:n]), se, errLog)
			return
		}
	}
	warren()
}

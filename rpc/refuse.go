package rpc

import (
	"net"

	"github.com/warrenipc/warren/internal/bridgecore"
	"github.com/warrenipc/warren/status"
)

// refuseConn answers a connection the policy or a limit refused, with the
// reason and code, in the protocol its peer speaks (bridgecore.AnswerRefusal;
// a warren peer gets admit.Core.Refuse's preface and GOAWAY), and closes it.
func (s *Server) refuseConn(conn net.Conn, key, reason string, code status.Code) {
	bridgecore.AnswerRefusal(conn, status.New(code, reason), s.httpErrorLog(), func() {
		s.adm.Refuse(conn, key, s.opts.Settings, reason, code)
	})
}

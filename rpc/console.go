package rpc

import "github.com/warrenipc/warren/internal/console"

// consoleCounts are the console's figures (ServerOptions.Console).
func (s *Server) consoleCounts() console.Counts {
	st := s.Stats()
	c := console.Counts{Conns: st.Conns, Calls: st.Calls, CallsTotal: st.CallsTotal, Refused: st.Refused,
		ConnsRejected: st.ConnsRejected, ConnsShed: st.ConnsShed, Panics: st.Panics,
		ByTransport: map[string]int{}, ByUID: s.adm.ByUID()}
	s.mu.Lock()
	seen := 0
	for _, sc := range s.conns {
		if sc.peer != nil {
			c.ByTransport[sc.peer.Network]++
			seen++
		}
	}
	s.mu.Unlock()
	if n := st.Conns - seen; n > 0 {
		c.ByTransport["hibernated"] = n // event-loop connections without a session
	}
	return c
}

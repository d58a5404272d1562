package rpc

// SendHeader sends the reply headers set so far with SetHeader, at once,
// ahead of the first message (which otherwise carries them). Headers set
// later are not sent. It is idempotent.
func (s *Stream[Req, Resp]) SendHeader() error {
	s.headerOnce.Do(func() {
		c := s.c
		c.mdMu.Lock()
		md := c.header.pairs()
		c.headerSent = true
		c.mdMu.Unlock()
		if md == nil {
			md = []string{}
		}
		s.headerErr = c.sendHeader(md)
	})
	return s.headerErr
}

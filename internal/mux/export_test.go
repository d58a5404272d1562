package mux

// AsmReserved returns the bytes of chunked messages s is assembling at
// their declared sizes.
func AsmReserved(s *Session) int64 { return s.asmReserved.Load() }

// WatchedContext returns the Done channel of the context whose end wakes
// every stream of s (see Session.watching), or nil.
func WatchedContext(s *Session) any {
	if w := s.ctxw.Load(); w != nil {
		return w.done
	}
	return nil
}

// HTTPRejectResponse is what a server without OnHTTP answers an HTTP request.
var HTTPRejectResponse = httpRejectResponse

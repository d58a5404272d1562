package mux

// AsmReserved returns the bytes of chunked messages s is assembling at
// their declared sizes.
func AsmReserved(s *Session) int64 { return s.asmReserved.Load() }

// Package wire is warren's wire layer: the connection preface, the fixed
// frame header, the payload encodings of each frame type and message
// chunking: what another implementation or a tool needs. It starts no
// goroutines and does no I/O but reading a preface.
//
// Encoders append to a caller's buffer; decoders parse from one and report
// "need more bytes" with ok == false rather than an error. Every length read
// off the wire is checked against a limit before anything is allocated for it.
// PROTOCOL.md in the repository root is the specification.
package wire

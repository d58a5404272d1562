// Package frameio is the buffered frame I/O of a warren connection: a
// Reader that returns frames (and can read a payload straight into a
// caller's buffer), a Writer that batches frames into few writes, and a
// Chunker that splits a message into frames as flow-control credit allows.
// The encodings themselves are in package wire; this package holds what
// only a session needs. It starts no goroutines.
package frameio

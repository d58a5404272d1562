// Package shmring carries a warren connection's frames over two byte
// rings in a shared memfd, one per direction, after a handshake on a unix
// socket whose both sides asked for it (wire.Settings.ShmRing). The
// socket stays open: it carries the memfd, the descriptors of frames,
// one-byte wake-ups for a side that sleeps, and the peer's end (EOF).
// PROTOCOL.md, "Shared-memory rings", specifies the layout.
//
// The peer can change any byte of the mapping at any time. A side copies
// each byte out of the ring once, before anything parses it; it keeps its
// own index privately and only publishes it; and the peer's index is
// checked on every load (a bad one is a connection error).
package shmring

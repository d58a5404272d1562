// Package shm carries descriptors with frames over unix sockets
// (SCM_RIGHTS), and large messages in sealed memfd files: the descriptor
// block that starts a DATA frame flagged wire.FlagFiles, a connection
// wrapper that receives descriptors with the bytes (Conn), and the
// creation, checking and read-only mapping of sealed memfds.
package shm

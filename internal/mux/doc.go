// Package mux runs warren sessions: many flow-controlled streams over one
// connection, as PROTOCOL.md specifies, for package rpc.
//
// A Session is created by Client or Server (handshake.go), which exchange
// prefaces. Frames are written by one writer per connection (writer.go)
// and read by a reader goroutine on a server (readloop.go) or, on a
// client, by whichever caller holds the reading role (clientread.go).
// A Stream (stream*.go) is one call: Send and Recv with flow-control
// credit, cancellation, trailers. Handlers may run inline on the reading
// goroutine, watched so that a blocked one hands reading on (inline.go).
// A client may lend the memory of its reply (lend.go). An event loop may
// drive a server session without a reader goroutine (a fed session,
// fed.go) and let an idle one hibernate. ARCHITECTURE.md has a glossary
// of these terms.
package mux

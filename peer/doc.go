// Package peer describes the process or host at the other end of a warren
// connection and decides whether it may talk to us.
//
// A [Peer] carries what the transport learned about the other end: its
// addresses, the uid, gid and pid the kernel reports for a Unix domain socket
// ([ReadCred]: SO_PEERCRED on Linux, LOCAL_PEERCRED and LOCAL_PEERPID on
// macOS), and the TLS connection state for TLS peers. Servers put it into each
// handler's context with [NewContext]; handlers read it with [FromContext].
//
// A [Policy] authorizes a Peer. The built-in policies ([SameUser],
// [AllowUIDs], [AllowGIDs], [AllowAll]) combine with [AnyOf] and [AllOf], and
// any func(*Peer) error becomes one with [PolicyFunc]. A refusal is a
// [*DeniedError], which matches [ErrDenied] with errors.Is. Policies that look
// at kernel credentials deny peers that have none (TCP and TLS peers, or a
// platform that does not report them), so a policy written for a local socket
// fails closed when the address moves to the network.
package peer

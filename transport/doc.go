// Package transport names warren endpoints and listens on and dials them:
// Unix domain sockets (socket files and Linux abstract sockets), TCP and TLS.
// Every connection is a [*Conn] that carries a [peer.Peer] describing the
// other end, and a [Listener] applies a [peer.Policy] to each peer before it
// hands the connection out.
//
// # Addresses
//
// An address is one string: unix:///run/app.sock, unix:rel/app.sock,
// unix:@name (Linux abstract namespace), tcp://host:port or tls://host:port.
// [ParseAddr] checks it and [Addr.String] gives it back in canonical form.
//
// # Socket files
//
// [Listen] never exposes a socket file with more permissions than requested
// (ListenConfig.Mode, 0600 by default, and ListenConfig.Owner). It binds the
// socket inside a fresh directory of mode 0700 created next to the target
// (so on the same file system), sets the owner and then the mode there,
// where no other user can reach it, and then hard-links it to the target
// path. The socket appears at its path complete; link(2), unlike rename(2),
// never replaces a file that appeared at the path in the meantime. The
// private directory is removed at once; one left behind by a process that
// died during Listen (named .warren-*) holds nothing of value and may be
// deleted.
//
// When the private path would not fit in sun_path, or the file system cannot
// link a socket, Listen binds at the target path under a umask that lets
// only the owner bits of the mode through, so that no one but the creating
// user can connect, then sets the owner and the mode. The umask belongs to
// the process: a process-wide mutex serializes these binds, and files that
// other goroutines create during the bind system call get the narrower
// umask too.
//
// Before it binds, Listen looks at the path without following symbolic
// links. A socket that accepts a connection belongs to a running server and
// Listen fails with [ErrAddrInUse]; a socket that refuses connections is
// stale and is replaced; anything else (a regular file, a directory, a
// symbolic link) makes Listen fail with [ErrNotSocket] and is left
// untouched. A path that does not fit in the kernel's socket address is a
// [*PathTooLongError].
//
// [Listener.Close] removes the socket file, and only the one Listen created:
// it compares the device and inode recorded at Listen, so the socket of a
// newer server at the same path survives. Abstract sockets have no file.
//
// # Identity and authorization
//
// For Unix sockets, the Listener reads the peer's uid, gid and pid from the
// kernel ([peer.ReadCred]) as it accepts the connection and applies the
// policy before any byte is read. A refused peer is closed, logged (one
// line, with its uid, gid and pid), counted in [Listener.Stats], and Accept
// goes on to the next connection. The default policy is [peer.SameUser] for
// Unix sockets and [peer.AllowAll] for TCP and TLS. TLS connections are
// returned by Accept before their handshake, so that a slow client cannot
// stall the accept loop; [Conn.Handshake], called by the first Read or
// Write, completes it, records the verified chains in Peer().TLS and applies
// the policy.
//
// A client can require the socket file's owner and mode before it connects
// (DialConfig.RequireOwner and RequireModes) and authorize the server's own
// kernel credentials on the connected socket (DialConfig.ServerPolicy),
// which no one can swap between the check and the connection.
package transport

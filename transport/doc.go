// Package transport names warren endpoints and listens on and dials them:
// Unix domain sockets (socket files and Linux abstract sockets), TCP, TLS
// and WebSocket (over TCP or TLS). Every connection is a [*Conn] that
// carries a [peer.Peer] describing the other end, and a [Listener] applies a
// [peer.Policy] to each peer before it hands the connection out.
//
// # Addresses
//
// An address is one string: unix:///run/app.sock, unix:rel/app.sock,
// unix:@name (Linux abstract namespace), tcp://host:port, tls://host:port,
// ws://host:port/path or wss://host:port/path; for Listen also systemd: and
// systemd:NAME, a socket passed by systemd socket activation. [ParseAddr]
// checks it and [Addr.String] gives it back in canonical form.
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
// Every step works relative to directory handles opened without following
// symbolic links (the parent, then the private directory): the bind goes
// through /proc/self/fd on Linux, the chown and chmod act on an O_PATH
// handle of the inode that was bound (fchownat and fchmodat with
// AT_SYMLINK_NOFOLLOW elsewhere), its device and inode are checked before
// and after, and the link is made with linkat between the two handles. A
// user who can rename entries in the parent directory cannot redirect any
// of them to a file of their choice. Listen refuses, with [ErrUnsafeDir], a
// parent directory that others may write to without the sticky bit: anyone
// could rename the socket away and put their own in its place.
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
// newer server at the same path survives.
//
// Abstract sockets (unix:@name, Linux) have no file and so no permissions:
// any local user (in the same network namespace) can connect to one, and
// any user can bind a free name first and receive the calls of clients
// that expect another server. ListenConfig.Mode and Owner do not apply to
// them; the policy still decides who may call. A client should check the
// server with DialConfig.ServerPolicy (for example peer.AllowUIDs), which
// sees the kernel credentials of the process that bound the name.
//
// # Identity and authorization
//
// For Unix sockets, the Listener reads the peer's uid, gid and pid from the
// kernel ([peer.ReadCred]) as it accepts the connection and applies the
// policy before any byte is read. A refused peer is closed, logged (one
// line, with its uid, gid and pid, for the first refusal of its uid in 10
// seconds, and then one summary line with the count), counted in
// [Listener.Stats], and Accept goes on to the next connection. The default policy is [peer.SameUser] for
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
//
// # WebSocket
//
// ws and wss addresses carry the same byte stream as the other schemes, in
// binary WebSocket messages (RFC 6455), so that browsers can speak warren.
// Each Write sends one message, in one frame, and Read returns the payloads
// of the messages received as one stream: message boundaries mean nothing,
// as segment boundaries mean nothing on TCP. Fragmented messages are
// reassembled. The connection follows RFC 6455 strictly: a client masks its
// frames and refuses masked ones, a server the reverse; text messages are
// refused with close code 1003; reserved bits or opcodes, control frames
// longer than 125 bytes or fragmented, continuation frames out of place, a
// bad close code and a frame length not in its shortest encoding are refused
// with 1002, and a close reason that is not UTF-8 with 1007. A refused frame
// ends Read with a [*WebSocketError] and the connection. Pings are answered
// with a pong carrying the same payload (without waiting for a Write in
// progress: the pong follows its frame); no pings are sent.
//
// Close runs the close handshake: it sends a close frame with code 1000
// and waits for the peer's, dropping any data before it, for at most 5
// seconds, then closes the connection. CloseWrite only sends the close
// frame. A close frame from the peer is answered and the connection
// closed; Read then returns io.EOF if the code was 1000 (normal), 1001
// (going away) or absent, and a [*WebSocketError] with the peer's code
// otherwise. A read deadline that expires leaves the stream intact; a
// write deadline that expires in the middle of a frame breaks it, as with
// TLS.
//
// There are two ways to serve WebSocket, and they do not mix on one
// listener:
//
//   - [Listen] with a ws:// or wss:// address serves WebSocket only, at
//     exactly the address's path. As with TLS, Accept returns a connection
//     at once and its Handshake (called by the first Read or Write, or by
//     rpc.Server) reads the opening handshake and answers 101 Switching
//     Protocols, or refuses it with 404 Not Found (another path), 426
//     Upgrade Required (a request that does not ask for WebSocket), 400 Bad
//     Request (a bad key or version) or 403 Forbidden (the origin check),
//     all bounded by ListenConfig.HandshakeTimeout. It is for programs that
//     only need WebSocket, including an rpc.Server without its HTTP bridge.
//   - An HTTP server upgrades a request it chooses with [UpgradeWebSocket],
//     after [IsWebSocketUpgrade]. The HTTP bridge of package rpc does this
//     on the same listener as warren's own protocol and plain HTTP, so that
//     one tcp://, unix:// or tls:// listener serves all three: listen on
//     that address, not on ws://, and let clients dial
//     ws://host:port/path (the bridge decides which paths it upgrades).
//
// A ws:// listener upgrades every connection itself because a scheme says
// what the bytes on a connection are: ws:// is WebSocket from the first
// byte to the last, while tcp:// is whatever the server on it chooses to
// speak, warren or HTTP or both. Keeping the two apart also keeps the
// listener free of any HTTP routing, which belongs to the bridge.
//
// Browsers send the Origin of the page that opens a WebSocket and let any
// page open one to any server, so a server reachable by browsers should
// set WebSocketOptions.CheckOrigin (ListenConfig.WebSocket, or the
// argument of UpgradeWebSocket), for example to [SameHostOrigin]. No
// extension (such as permessage-deflate) is negotiated.
//
// Connections from Listen and Dial have the Peer network "ws" or "wss";
// one from UpgradeWebSocket keeps the Peer of the connection it was
// hijacked from.
package transport

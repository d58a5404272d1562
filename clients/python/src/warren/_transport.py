"""Addresses and the transports under a connection: unix, tcp, tls, ws, wss."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl as _ssl
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from ._errors import StatusError

SAME_USER = "same"

# The address keyword of the per-user default socket (see default_address).
DEFAULT_ADDRESS = "default"


def default_address() -> str:
    """The per-user default address, where ``warren serve`` listens without
    --addr: unix://$XDG_RUNTIME_DIR/warren/warren.sock when XDG_RUNTIME_DIR
    is an absolute path, else unix://TMP/warren-UID/warren.sock, TMP being
    $TMPDIR or /tmp and UID the effective uid. connect("default") connects
    there and requires the server to run as this user."""
    x = os.environ.get("XDG_RUNTIME_DIR", "")
    if x and os.path.isabs(x):
        d = os.path.join(x, "warren")
    else:
        d = os.path.join(os.path.abspath(os.environ.get("TMPDIR") or "/tmp"), f"warren-{os.geteuid()}")
    return "unix://" + os.path.normpath(os.path.join(d, "warren.sock"))


def check_socket_owner(path: str) -> None:
    """Where the kernel does not tell a unix socket's peer (no
    SO_PEERCRED), requires the socket file and its directory to belong to
    this user, the directory writable by no one else."""
    me = os.geteuid()
    for p, what in ((os.path.dirname(path) or ".", "directory"), (path, "socket file")):
        st = os.lstat(p)
        if st.st_uid != me:
            raise StatusError("permission_denied", f"the {what} {p} belongs to uid {st.st_uid}, not to this user (uid {me})")
        if what == "directory" and st.st_mode & 0o022:
            raise StatusError("permission_denied", f"the directory {p} is writable by others (mode {st.st_mode & 0o777:#o})")


@dataclass(frozen=True)
class Address:
    """A parsed warren address."""

    scheme: str  # unix, tcp, tls, ws or wss
    address: str  # a path, "@name" (abstract unix socket) or host:port
    host: str = ""
    port: int = 0
    path: str = ""  # the HTTP path of ws and wss

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix://{self.address}" if self.address.startswith("/") else f"unix:{self.address}"
        return f"{self.scheme}://{self.address}" + (self.path if self.scheme in ("ws", "wss") and self.path != "/" else "")


def parse_address(addr: str) -> Address:
    """Parses unix:///abs/path, unix:rel/path, unix:@name, tcp://host:port,
    tls://host:port, ws://host:port/path and wss://host:port/path."""
    scheme, sep, rest = addr.partition(":")
    if not sep:
        raise ValueError(f"address {addr!r} has no scheme (unix:, tcp://, tls://, ws://, wss://)")
    if scheme == "unix":
        if rest.startswith("//"):
            path = rest[2:]
            if not path.startswith("/"):
                raise ValueError(f"address {addr!r}: unix:// is followed by an absolute path, as in unix:///run/app.sock")
        elif rest.startswith("/"):
            raise ValueError(f"address {addr!r}: an absolute path is written with three slashes, as in unix:///run/app.sock")
        else:
            path = rest
        if not path or path == "@":
            raise ValueError(f"address {addr!r} has an empty socket path")
        if path.startswith("@") and not sys.platform.startswith("linux"):
            raise ValueError("abstract sockets (unix:@name) exist only on Linux")
        return Address("unix", path)
    if scheme in ("tcp", "tls", "ws", "wss"):
        if not rest.startswith("//"):
            raise ValueError(f"address {addr!r}: write {scheme}://host:port")
        u = urlsplit(addr)
        if u.query or u.fragment or u.username or u.password:
            raise ValueError(f"address {addr!r} may not have a query, fragment or user")
        try:
            port = u.port
        except ValueError as e:
            raise ValueError(f"address {addr!r}: {e}") from None
        if not u.hostname or port is None:
            raise ValueError(f"address {addr!r} needs a host and a port")
        if scheme in ("tcp", "tls") and u.path not in ("", "/"):
            raise ValueError(f"address {addr!r}: {scheme} addresses have no path")
        return Address(scheme, u.netloc, u.hostname, port, u.path or "/")
    raise ValueError(f"address {addr!r}: unknown scheme {scheme!r} (unix, tcp, tls, ws, wss)")


@dataclass(frozen=True)
class PeerCred:
    """The kernel's credentials of the process serving a unix socket."""

    pid: int
    uid: int
    gid: int


def peer_cred(sock: socket.socket) -> PeerCred | None:
    so = getattr(socket, "SO_PEERCRED", None)
    if so is None:
        return None
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, so, struct.calcsize("3i")))
    return PeerCred(pid, uid, gid)


def check_server_uid(cred: PeerCred | None, server_uid: int | str | None, *, validate_only: bool = False) -> None:
    """Checks the server's credentials against server_uid (an int,
    SAME_USER or None); with validate_only, only that server_uid is valid."""
    if server_uid is None:
        return
    want = os.geteuid() if server_uid == SAME_USER else server_uid
    if not isinstance(want, int) or isinstance(want, bool):
        raise ValueError(f"server_uid must be an int, {SAME_USER!r} or None, not {server_uid!r}")
    if validate_only:
        return
    if cred is None:
        raise StatusError("permission_denied", "the server's credentials are not available on this system (SO_PEERCRED)")
    if cred.uid != want:
        raise StatusError("permission_denied", f"the server runs as uid {cred.uid}, not {want} as required (pid {cred.pid})")


def make_ssl_context(ssl: Any, ca: str | None, cert: str | None, key: str | None) -> _ssl.SSLContext:
    if isinstance(ssl, _ssl.SSLContext):
        return ssl
    ctx = _ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


class WSTransport(asyncio.Transport):
    """Carries a warren connection's bytes in binary WebSocket messages
    (PROTOCOL.md, WebSocket), with the ``websockets`` library.

    Like asyncio's own transports it counts the bytes not yet handed to
    the socket (``get_write_buffer_size``), tells its protocol to pause
    writing above a high-water mark and to resume below a low one, and
    stops delivering messages while reading is paused."""

    HIGH_WATER = 64 << 10
    LOW_WATER = 16 << 10

    def __init__(self, ws: Any, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.ws = ws
        self.protocol = protocol
        self.out: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.buffered = 0
        self.writing_paused = False
        self.reading = asyncio.Event()
        self.reading.set()
        self.closing = False
        self.reader = asyncio.ensure_future(self._read())
        self.writer = asyncio.ensure_future(self._write())

    async def _read(self) -> None:
        exc: Exception | None = None
        try:
            async for m in self.ws:
                if isinstance(m, str):
                    await self.ws.close(1003, "warren uses binary messages")
                    exc = ConnectionError("the server sent a text WebSocket message")
                    break
                self.protocol.data_received(m)
                if not self.reading.is_set():
                    # Unread messages wait in the socket: the server feels it.
                    await self.reading.wait()
        except Exception as e:  # websockets' ConnectionClosedError and the like
            exc = e
        if exc is None and self.ws.close_code not in (1000, 1001, None) and not self.closing:
            exc = ConnectionError(f"WebSocket closed with code {self.ws.close_code}")
        self.closing = True
        self.out.put_nowait(None)
        self.protocol.connection_lost(exc)

    async def _write(self) -> None:
        try:
            while True:
                b = await self.out.get()
                if b is None:
                    break
                parts = [b]
                while not self.out.empty():
                    nb = self.out.get_nowait()
                    if nb is None:
                        self.closing = True
                        break
                    parts.append(nb)
                msg = b"".join(parts) if len(parts) > 1 else parts[0]
                await self.ws.send(msg)
                self.buffered -= len(msg)
                if self.writing_paused and self.buffered <= self.LOW_WATER:
                    self.writing_paused = False
                    self.protocol.resume_writing()
                if self.closing:
                    break
        except Exception:
            pass
        finally:
            await self.ws.close()

    def write(self, data: Any) -> None:
        if not self.closing:
            b = bytes(data)
            self.buffered += len(b)
            self.out.put_nowait(b)
            if not self.writing_paused and self.buffered > self.HIGH_WATER:
                self.writing_paused = True
                self.protocol.pause_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    def is_reading(self) -> bool:
        return self.reading.is_set()

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.out.put_nowait(None)
            self.reading.set()

    def abort(self) -> None:
        self.close()
        self.reader.cancel()
        self.writer.cancel()
        t = getattr(self.ws, "transport", None)
        if t is not None:
            t.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    async def wait_closed(self) -> None:
        await asyncio.gather(self.reader, self.writer, return_exceptions=True)


async def open_transport(
    a: Address,
    factory: Callable[[], asyncio.Protocol],
    *,
    ssl_ctx: _ssl.SSLContext | None,
    server_hostname: str | None,
    ws_headers: dict[str, str] | None,
    ws_max_size: int,
) -> tuple[Any, Any]:
    """Connects to a and returns (transport, protocol)."""
    loop = asyncio.get_running_loop()
    try:
        if a.scheme == "unix":
            path = "\0" + a.address[1:] if a.address.startswith("@") else a.address
            return await loop.create_unix_connection(factory, path)
        if a.scheme == "tcp":
            return await loop.create_connection(factory, a.host, a.port)
        if a.scheme == "tls":
            return await loop.create_connection(factory, a.host, a.port, ssl=ssl_ctx, server_hostname=server_hostname or a.host)
    except OSError as e:
        raise StatusError("unavailable", f"cannot connect to {a}: {e}") from e
    except _ssl.SSLError as e:
        raise StatusError("unavailable", f"TLS handshake with {a} failed: {e}") from e
    try:
        import websockets
        from websockets.asyncio.client import connect as ws_connect
    except ImportError as e:  # pragma: no cover
        raise StatusError("unavailable", "ws:// and wss:// need the websockets package") from e
    host = a.host if ":" not in a.host else f"[{a.host}]"
    uri = f"{a.scheme}://{host}:{a.port}{a.path}"
    kw: dict[str, Any] = {"compression": None, "max_size": ws_max_size, "ping_interval": None, "close_timeout": 5, "proxy": None, "additional_headers": ws_headers or {}}
    if a.scheme == "wss":
        kw["ssl"] = ssl_ctx
        if server_hostname:
            kw["server_hostname"] = server_hostname
    try:
        ws = await ws_connect(uri, **kw)
    except (OSError, websockets.exceptions.WebSocketException, _ssl.SSLError) as e:
        raise StatusError("unavailable", f"cannot open WebSocket {uri}: {e}") from e
    proto = factory()
    t = WSTransport(ws, proto)
    proto.connection_made(t)
    return t, proto

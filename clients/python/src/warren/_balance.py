"""Several servers behind one client: an address list or a dns:/// name,
one connection per server, round robin over the healthy ones, and the
servers' connections redialed with backoff."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, Callable, Coroutine

from ._conn import Connection
from ._errors import StatusError
from ._transport import Address, PeerCred, parse_address

DNS_PREFIX = "dns:///"
# Bounds the addresses of a list or of a name's resolution (as the Go client).
MAX_ADDRS = 64
# A dns:/// name is resolved again this often, and after a connection fails.
RESOLVE_EVERY = 30.0

# The delay between connection attempts after failures: doubled from
# _MIN_BACKOFF at each failure up to _MAX_BACKOFF (as the Go client).
_MIN_BACKOFF = 0.05
_MAX_BACKOFF = 5.0

DialResult = tuple[Any, Connection, PeerCred | None]
Dial = Callable[[], Coroutine[Any, Any, DialResult]]


def parse_target(s: str) -> tuple[list[Address], tuple[str, int] | None]:
    """One warren address, several separated by commas, or dns:///host:port
    (returned as (host, port) with no addresses)."""
    if s.startswith(DNS_PREFIX):
        rest = s[len(DNS_PREFIX):]
        host, sep, port = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"address {s!r}: a dns target is dns:///HOST:PORT, PORT from 1 to 65535")
        return [], (host, int(port))
    parts = s.split(",")
    if len(parts) > 1:
        try:
            whole = parse_address(s)
        except ValueError:
            whole = None
        if whole is not None and whole.scheme == "unix" and not all(_parses(p.strip()) for p in parts):
            return [whole], None  # a socket path with a comma in it
        if len(parts) > MAX_ADDRS:
            raise ValueError(f"{len(parts)} addresses, more than {MAX_ADDRS}")
    out: list[Address] = []
    for i, p in enumerate(parts):
        p = p.strip()
        if not p:
            raise ValueError(f"address list {s!r}: entry {i + 1} is empty")
        if p.startswith(DNS_PREFIX):
            raise ValueError(f"address list {s!r}: a dns target stands alone")
        try:
            a = parse_address(p)
        except ValueError as e:
            raise ValueError(f"address list, entry {i + 1}: {e}" if len(parts) > 1 else str(e)) from None
        if a not in out:
            out.append(a)
    return out, None


def _parses(s: str) -> bool:
    try:
        parse_address(s)
    except ValueError:
        return False
    return True


async def resolve(host: str, port: int, scheme: str) -> list[Address]:
    """The addresses of a dns target, sorted, at most MAX_ADDRS."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise StatusError("unavailable", f"resolving {host}: {e}", not_processed=True) from None
    ips = sorted({str(info[4][0]) for info in infos})[:MAX_ADDRS]
    if not ips:
        raise StatusError("unavailable", f"resolving {host}: no addresses", not_processed=True)
    out = []
    for ip in ips:
        h = f"[{ip}]" if isinstance(ipaddress.ip_address(ip), ipaddress.IPv6Address) else ip
        out.append(parse_address(f"{scheme}://{h}:{port}"))
    return out


class Endpoint:
    """One server of a client: its current connection, dialed again after
    it is lost or the server leaves (GOAWAY), with backoff after failures;
    connections left for a new one finish their calls."""

    def __init__(self, address: Address, dial: Dial) -> None:
        self.address = address
        self._dial = dial
        self.transport: Any = None
        self.conn: Connection | None = None
        self.peer: PeerCred | None = None
        self.old: list[tuple[Any, Connection]] = []
        self.dialing: asyncio.Future[None] | None = None
        self.backoff = 0.0
        self.retry_at = 0.0
        self.last_err: StatusError | None = None
        self.removed = False

    @property
    def usable(self) -> bool:
        c = self.conn
        return c is not None and not c.closed and c.goaway is None

    def backing_off(self, now: float) -> bool:
        return self.last_err is not None and now < self.retry_at

    async def connection(self, closing: Callable[[], bool]) -> Connection:
        """The connection for a new call: the current one, or a new one.
        Errors of connecting are marked not_processed: the call was never sent."""
        loop = asyncio.get_running_loop()
        while True:
            if closing() or self.removed:
                raise StatusError("unavailable", "the client was closed", not_processed=True)
            if self.usable:
                assert self.conn is not None
                return self.conn
            if self.dialing is not None:
                await asyncio.shield(self.dialing)
                continue
            if loop.time() < self.retry_at and self.last_err is not None:
                raise StatusError(self.last_err.code, self.last_err.message, not_processed=True)
            done = self.dialing = loop.create_future()
            try:
                transport, conn, cred = await self._dial()
            except StatusError as e:
                self.backoff = min(max(2 * self.backoff, _MIN_BACKOFF), _MAX_BACKOFF)
                self.retry_at = loop.time() + self.backoff
                self.last_err = e
                e.not_processed = True
                raise
            finally:
                self.dialing = None
                done.set_result(None)
            self.backoff = 0.0
            self.last_err = None
            self.old = [(t, c) for t, c in self.old if not c.closed]
            if self.conn is not None and not self.conn.closed:
                self.old.append((self.transport, self.conn))
            self.transport, self.conn, self.peer = transport, conn, cred
            # close() waited for this attempt: it closes the new connection.

    def connections(self) -> list[tuple[Any, Connection]]:
        out, self.old = self.old, []
        if self.conn is not None:
            out.append((self.transport, self.conn))
        return out


class Resolver:
    """A dns:/// target: resolved again every RESOLVE_EVERY seconds and
    after a connection failure; endpoints follow the addresses."""

    def __init__(self, host: str, port: int, scheme: str) -> None:
        self.host, self.port, self.scheme = host, port, scheme
        self.at = 0.0
        self.stale = False
        self.running: asyncio.Task[list[Address]] | None = None

    def due(self, now: float) -> bool:
        return self.stale or now - self.at >= RESOLVE_EVERY

    async def lookup(self) -> list[Address]:
        if self.running is None:
            self.running = asyncio.ensure_future(resolve(self.host, self.port, self.scheme))
        try:
            return await asyncio.shield(self.running)
        finally:
            if self.running is not None and self.running.done():
                self.running = None
            self.at = asyncio.get_running_loop().time()
            self.stale = False

"""The asyncio client: connect(), calls and streams."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Coroutine, Generator, Generic, Mapping, Sequence, TypedDict, TypeVar, Union

from . import _wire as w
from ._balance import Endpoint, Resolver, parse_target
from ._codec import Codec, pick
from ._conn import CLIENT_MAX_FRAME, CLIENT_WINDOW, CallEnded, Connection, Stream, deadline_error, md_dict
from ._errors import StatusError
from ._otel import with_trace
from ._transport import (
    DEFAULT_ADDRESS,
    SAME_USER,
    Address,
    PeerCred,
    check_server_uid,
    check_socket_owner,
    default_address,
    make_ssl_context,
    open_transport,
    parse_address,
    peer_cred,
)

Metadata = Union[Mapping[str, Union[str, Sequence[str]]], Sequence[tuple[str, str]], None]
CodecArg = Union[str, Codec, None]

T = TypeVar("T")

# How long close() lets buffered output drain before it drops the socket.
_CLOSE_GRACE = 2.0


@dataclass
class Reply(Generic[T]):
    """A unary call's reply with its metadata (see Client.invoke)."""

    message: T
    header: dict[str, list[str]] = field(default_factory=dict)
    trailer: dict[str, list[str]] = field(default_factory=dict)


def _status_error(st: Stream, codec: Codec) -> StatusError:
    t = st.trailer
    assert t is not None
    g = st.conn.goaway
    return StatusError(
        t.code,
        t.message,
        [codec.decode_detail(d) for d in t.details],
        raw_details=t.details,
        trailer=md_dict(t.metadata),
        # 14 on a stream above a drain's last stream id: refused unread.
        not_processed=t.code == 14 and g is not None and g[1] in (0, 14) and st.id > g[0],
    )


class Call:
    """A streaming call in progress. Which methods apply depends on the
    kind: a server stream is read (``async for``), a client stream is written
    and then answers once (``send``, ``close_send``, ``response``), a
    bidirectional stream does both.

    Use it as an async context manager: leaving the block before the call
    ended cancels it (the server is sent CANCEL; the connection stays up).
    """

    def __init__(self, client: Client, method: str, codec: Codec, opener: Callable[[], Coroutine[Any, Any, Stream]]) -> None:
        self._client = client
        self.method = method
        self._codec = codec
        self._opener = opener
        self._st: Stream | None = None
        self._open_lock = asyncio.Lock()

    async def _stream(self) -> Stream:
        if self._st is None:
            async with self._open_lock:
                if self._st is None:
                    self._st = await self._opener()
        return self._st

    def __del__(self) -> None:
        # A call dropped before its end (say, a loop left with break) is
        # cancelled, so that the server stops and the stream's slot is freed.
        st = self._st
        if st is not None and not st.closed and not st.conn.closed:
            try:
                st.cancel()
            except RuntimeError:  # the event loop is closed
                pass

    async def __aenter__(self) -> Call:
        await self._stream()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancels the call if it has not ended."""
        if self._st is not None and not self._st.closed:
            self._st.cancel()

    def cancel(self) -> None:
        """Abandons the call: sends CANCEL; the connection stays up."""
        if self._st is not None:
            self._st.cancel()

    async def send(self, msg: Any) -> None:
        """Sends one message. Raises the call's StatusError if the server
        already ended it."""
        st = await self._stream()
        try:
            await st.send(self._codec.encode(msg), False)
        except CallEnded:
            t = st.trailer
            if t is not None and t.code != 0:
                raise _status_error(st, self._codec) from None
            raise

    async def close_send(self) -> None:
        """Says that no more messages follow (a half-close)."""
        st = await self._stream()
        await st.close_send()

    async def recv(self) -> Any:
        """The next message from the server; raises StopAsyncIteration when
        the call ended with OK, StatusError when it failed."""
        st = await self._stream()
        data = await st.recv()
        if data is None:
            t = st.trailer
            if t is not None and t.code != 0:
                raise _status_error(st, self._codec)
            raise StopAsyncIteration
        return self._codec.decode(data)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self

    async def __anext__(self) -> Any:
        return await self.recv()

    async def response(self) -> Any:
        """Closes the sending side and returns the server's one reply (for
        client streams)."""
        st = await self._stream()
        await st.close_send()
        data = await st.recv()
        if data is None:
            t = st.trailer
            if t is not None and t.code != 0:
                raise _status_error(st, self._codec)
            raise StatusError("internal", f"{self.method}: no reply message")
        end = await st.recv()
        if end is not None:
            st.cancel()
            raise StatusError("internal", "the server sent more than one reply")
        if st.trailer is not None and st.trailer.code != 0:
            raise _status_error(st, self._codec)
        return self._codec.decode(data)

    async def header(self) -> dict[str, list[str]]:
        """The reply metadata (waits for it)."""
        st = await self._stream()
        while st.header is None and not st.closed:
            f = st.conn.loop.create_future()
            if st.header_waiters is None:
                st.header_waiters = []
            st.header_waiters.append(f)
            await f
        if st.header is None and st.error is not None:
            raise st.error
        return md_dict(st.header or [])

    @property
    def trailer(self) -> dict[str, list[str]]:
        """The trailing metadata, once the call ended."""
        st = self._st
        return md_dict(st.trailer.metadata) if st is not None and st.trailer is not None else {}


_Dial = Callable[[], Coroutine[Any, Any, tuple[Any, Connection, PeerCred | None]]]


class Client:
    """A client of one warren server, or of several. Create it with :func:`connect`.

    Calls to a server share one connection. When it is lost, the calls in
    flight fail with ``unavailable`` and the next call dials again; after a
    failed attempt, calls fail at once with that attempt's error until a
    backoff (50 ms, doubling up to 5 s) has passed. A connection the server
    is leaving (GOAWAY) finishes its calls while new calls go to a new one.

    With several servers (an address list or a ``dns:///`` name), calls go
    round robin over those whose connection is up and not draining; a
    unary call that failed as never processed (``StatusError.not_processed``)
    is sent again, on another server when there is one, within its deadline.
    """

    def __init__(self, endpoints: list[Endpoint], codec: CodecArg, resolver: Resolver | None = None, make: Callable[[Address], Endpoint] | None = None) -> None:
        self._eps = endpoints
        self._last = endpoints[0]
        self._rr = 0
        self._resolver = resolver
        self._make = make
        self._codec: str | Codec = codec or "json"
        self._closing = False
        self._gone: list[Endpoint] = []  # servers a dns:/// name no longer lists

    @property
    def address(self) -> Address:
        """The address of the server of the last call (the first server before any)."""
        return self._last.address

    @property
    def addresses(self) -> list[Address]:
        """The servers' addresses (a dns:/// name's, as last resolved)."""
        return [ep.address for ep in self._eps]

    @property
    def peer(self) -> PeerCred | None:
        """The server process's credentials (unix sockets on Linux), else None;
        those of the last call's server."""
        return self._last.peer

    @property
    def _conn(self) -> Connection:
        c = self._last.conn
        if c is None:
            c = next((ep.conn for ep in self._eps if ep.conn is not None), None)
        assert c is not None
        return c

    @property
    def server_settings(self) -> w.Settings:
        """The limits the server announced in its preface."""
        return self._conn.peer

    @property
    def closed(self) -> bool:
        """Whether every connection is closed (by close(), by the server or
        by an error). Unless close() was called, the next call dials again."""
        return all(ep.conn is None or ep.conn.closed for ep in self._eps)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections; calls in progress fail with unavailable,
        later calls too."""
        self._closing = True
        for ep in self._eps:
            if ep.dialing is not None:
                await asyncio.shield(ep.dialing)
        conns = [tc for ep in self._eps + self._gone for tc in ep.connections()]
        await asyncio.gather(*(_close_conn(t, c) for t, c in conns))

    async def _refresh(self) -> None:
        """Resolves a dns:/// name again when due; endpoints follow its addresses."""
        r = self._resolver
        if r is None or self._make is None or not r.due(asyncio.get_running_loop().time()):
            return
        try:
            addrs = await r.lookup()
        except StatusError:
            return  # keep the servers we know
        if self._closing:
            return
        keep = [ep for ep in self._eps if ep.address in addrs]
        gone = [ep for ep in self._eps if ep.address not in addrs]
        known = {ep.address for ep in keep}
        self._eps = keep + [self._make(a) for a in addrs if a not in known]
        if self._last not in self._eps:
            self._last = self._eps[0]
        for ep in gone:
            # Their calls in flight finish; no new ones go there, and
            # close() closes them.
            ep.removed = True
            self._gone.append(ep)

    def _pick(self, avoid: Endpoint | None = None) -> Endpoint:
        """The next server, round robin: one whose connection is up and not
        draining, else one not backing off, else the next one."""
        eps = self._eps
        n = len(eps)
        now = asyncio.get_running_loop().time()
        fallback = None
        for i in range(n):
            k = (self._rr + i) % n
            ep = eps[k]
            if ep is avoid and n > 1:
                continue
            if ep.usable:
                self._rr = (k + 1) % n
                return ep
            if fallback is None and not ep.backing_off(now):
                fallback = k
        if fallback is None:
            fallback = self._rr % n
            if eps[fallback] is avoid and n > 1:
                fallback = (fallback + 1) % n
        self._rr = (fallback + 1) % n
        return eps[fallback]

    async def _connection(self, ep: Endpoint, deadline: float | None, timeout: float | None) -> Connection:
        """The connection of ep for a new call: the current one, or a new one."""
        self._last = ep
        if ep.usable and not self._closing:
            assert ep.conn is not None
            return ep.conn
        try:
            if deadline is None:
                return await ep.connection(lambda: self._closing)
            left = deadline - asyncio.get_running_loop().time()
            try:
                return await asyncio.wait_for(ep.connection(lambda: self._closing), max(left, 0))
            except asyncio.TimeoutError:
                raise deadline_error(timeout) from None
        except StatusError:
            if self._resolver is not None:
                self._resolver.stale = True
            raise

    async def call(
        self,
        method: str,
        request: Any = None,
        *,
        metadata: Metadata = None,
        timeout: float | None = None,
        codec: CodecArg = None,
        response_type: Any = None,
    ) -> Any:
        """Calls a unary method and returns its reply.

        method is ``Service.Method``; request None sends ``{}``. The codec
        is JSON unless request is bytes (raw), a protobuf message or
        response_type (a protobuf class) is given (proto), or codec says
        otherwise (``"json"``, ``"raw"``, ``"proto"`` or a Codec).
        metadata is a dict of strings or lists of strings, or a list of
        pairs. timeout is the call's deadline in seconds, which the server
        sees too: it covers the whole call, waiting for a connection, a
        stream slot or flow-control credit included. Raises StatusError.
        """
        return (await self.invoke(method, request, metadata=metadata, timeout=timeout, codec=codec, response_type=response_type)).message

    async def invoke(
        self,
        method: str,
        request: Any = None,
        *,
        metadata: Metadata = None,
        timeout: float | None = None,
        codec: CodecArg = None,
        response_type: Any = None,
    ) -> Reply[Any]:
        """Like :meth:`call`, and returns the reply metadata too."""
        if request is None:
            request = {}
        cd = pick(codec, request, response_type, self._codec)
        payload = cd.encode(request)
        metadata = with_trace(metadata)  # once: every attempt is the same call
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0)
        tries = max(2, len(self._eps))
        ep = None
        while True:
            await self._refresh()
            ep = self._pick(ep)
            try:
                return await self._invoke_on(ep, method, cd, payload, metadata, deadline, timeout)
            except StatusError as e:
                tries -= 1
                if not e.not_processed or tries <= 0 or self._closing or (deadline is not None and loop.time() >= deadline):
                    raise

    async def _invoke_on(self, ep: Endpoint, method: str, cd: Codec, payload: bytes, metadata: Metadata, deadline: float | None, timeout: float | None) -> Reply[Any]:
        conn = await self._connection(ep, deadline, timeout)
        st = await conn.open_stream(method, cd.id, 0, metadata, payload, True, deadline=deadline, timeout=timeout)
        data = await st.recv()
        if data is not None:
            end = await st.recv()
            if end is not None:
                st.cancel()
                raise StatusError("internal", f"{method}: more than one reply message")
        t = st.trailer
        if t is not None and t.code != 0:
            raise _status_error(st, cd)
        if data is None:
            raise StatusError("internal", f"{method}: no reply message")
        return Reply(cd.decode(data), md_dict(st.header or []), md_dict(t.metadata) if t is not None else {})

    def _opener(self, method: str, cd: Codec, timeout: float | None, metadata: Metadata, payload: bytes | None, end: bool) -> Callable[[], Coroutine[Any, Any, Stream]]:
        metadata = with_trace(metadata)  # the context of the call's creation

        async def opener() -> Stream:
            deadline = None if timeout is None else asyncio.get_running_loop().time() + max(timeout, 0)
            await self._refresh()
            conn = await self._connection(self._pick(), deadline, timeout)
            return await conn.open_stream(method, cd.id, 0, metadata, payload, end, deadline=deadline, timeout=timeout)

        return opener

    def stream(
        self,
        method: str,
        request: Any = None,
        *,
        metadata: Metadata = None,
        timeout: float | None = None,
        codec: CodecArg = None,
        response_type: Any = None,
    ) -> Call:
        """Calls a server-streaming method: iterate the returned call with
        ``async for`` for the replies. timeout counts from the call's
        first use."""
        if request is None:
            request = {}
        cd = pick(codec, request, response_type, self._codec)
        return Call(self, method, cd, self._opener(method, cd, timeout, metadata, cd.encode(request), True))

    def client_stream(
        self,
        method: str,
        *,
        metadata: Metadata = None,
        timeout: float | None = None,
        codec: CodecArg = None,
        response_type: Any = None,
    ) -> Call:
        """Opens a client-streaming call: ``send`` messages, then await
        ``response()``."""
        cd = pick(codec, None, response_type, self._codec)
        return Call(self, method, cd, self._opener(method, cd, timeout, metadata, None, False))

    def bidi_stream(
        self,
        method: str,
        *,
        metadata: Metadata = None,
        timeout: float | None = None,
        codec: CodecArg = None,
        response_type: Any = None,
    ) -> Call:
        """Opens a bidirectional call: ``send`` and ``recv`` (or ``async
        for``) at will, ``close_send`` when done sending."""
        cd = pick(codec, None, response_type, self._codec)
        return Call(self, method, cd, self._opener(method, cd, timeout, metadata, None, False))

    async def ping(self, timeout: float | None = 10) -> float:
        """Sends a PING and returns the round-trip time in seconds."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            await self._refresh()
            conn = await self._connection(self._pick(), None if timeout is None else t0 + timeout, timeout)
            await asyncio.wait_for(conn.ping(), None if timeout is None else max(t0 + timeout - loop.time(), 0))
        except asyncio.TimeoutError:
            raise StatusError("deadline_exceeded", "no answer to PING") from None
        return loop.time() - t0


async def _close_conn(transport: Any, conn: Connection) -> None:
    conn.close()
    # What is still buffered gets a moment to go out; a server that
    # does not read does not keep the connection open.
    wc = getattr(transport, "wait_closed", None)
    done = asyncio.ensure_future(wc()) if wc is not None else conn.lost
    try:
        await asyncio.wait_for(asyncio.shield(done), _CLOSE_GRACE)
    except asyncio.TimeoutError:
        transport.abort()
        await asyncio.wait({done}, timeout=_CLOSE_GRACE)


class CallOptions(TypedDict, total=False):
    """The keyword options of a call (see :meth:`Client.call`)."""

    metadata: Metadata
    timeout: float | None
    codec: CodecArg
    response_type: Any


class ConnectOptions(TypedDict, total=False):
    """The keyword options of :func:`connect` (and :func:`connect_sync`)."""

    codec: CodecArg
    token: str | None
    server_uid: int | str | None
    ssl: Any
    ca: str | None
    cert: str | None
    key: str | None
    server_hostname: str | None
    ws_headers: dict[str, str] | None
    max_message_size: int
    max_frame_size: int
    initial_window: int
    handshake_timeout: float


class _Connector:
    """What connect() returns: awaitable (``client = await connect(...)``)
    and an async context manager that closes the client at its end."""

    def __init__(self, coro_fn: Callable[[], Coroutine[Any, Any, Client]]) -> None:
        self._fn = coro_fn
        self._client: Client | None = None

    def __await__(self) -> Generator[Any, None, Client]:
        return self._fn().__await__()

    async def __aenter__(self) -> Client:
        self._client = await self._fn()
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()


def _bearer(headers: dict[str, str] | None) -> str | None:
    """The token of an "Authorization: Bearer TOKEN" header."""
    for k, v in (headers or {}).items():
        if k.lower() == "authorization":
            scheme, _, tok = v.strip().partition(" ")
            if scheme.lower() == "bearer" and tok.strip():
                return tok.strip()
    return None


def connect(
    address: str,
    *,
    codec: CodecArg = "json",
    token: str | None = None,
    server_uid: int | str | None = None,
    ssl: Any = None,
    ca: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    server_hostname: str | None = None,
    ws_headers: dict[str, str] | None = None,
    max_message_size: int = w.DEFAULT_MAX_MESSAGE_SIZE,
    max_frame_size: int = CLIENT_MAX_FRAME,
    initial_window: int = CLIENT_WINDOW,
    handshake_timeout: float = 10.0,
) -> _Connector:
    """Connects to a warren server.

    ``async with warren.connect(addr) as client`` closes the client at the
    end; ``client = await warren.connect(addr)`` leaves that to you.

    address is unix:///abs/path, unix:rel/path, unix:@name, tcp://host:port,
    tls://host:port, ws://host:port/path, wss://host:port/path, or
    "default": the address ``warren serve`` listens on without --addr
    ($XDG_RUNTIME_DIR/warren/warren.sock, else warren-UID/warren.sock in
    the temporary directory; see :func:`default_address`), where the server
    must run as this user (server_uid "same" unless given). Several
    servers: addresses separated by commas, or ``dns:///host:port``, a
    name resolved to ``tcp://`` addresses (``tls://`` with ssl or ca, the
    certificate checked against host), resolved again every 30 s and
    after a connection fails; see :class:`Client` for how calls are spread
    and retried.

    codec is the calls' default codec ("json", "raw", "proto" or a Codec).
    token, for servers that require one (``warren serve`` on a network
    address), is sent with every call as the metadata ``authorization:
    Bearer TOKEN`` and as the header ``Authorization: Bearer TOKEN`` of a
    WebSocket handshake; an Authorization header in ws_headers counts as
    the token too. server_uid (unix sockets): the uid the server process
    must run as, checked with the kernel's credentials (SO_PEERCRED);
    "same" means this process's effective uid. ssl (an ssl.SSLContext) or
    ca, cert, key, server_hostname configure tls:// and wss://; ws_headers
    are added to the WebSocket handshake. max_message_size bounds the
    messages the client accepts; max_frame_size and initial_window are the
    frame size and per-stream window it announces. handshake_timeout
    (seconds) bounds connecting and the server's preface.

    The connections are made before connect returns (it fails when no
    server answers); after one is lost, the next call there dials again.

    Raises ValueError for a bad address or option, StatusError
    (``unavailable``, or ``permission_denied`` for server_uid) when the
    connection fails.
    """

    async def run() -> Client:
        nonlocal server_uid, token
        is_default = address == DEFAULT_ADDRESS
        dns = None
        if is_default:
            addrs = [parse_address(default_address())]
        else:
            addrs, dns = parse_target(address)
        if is_default and server_uid is None:
            server_uid = SAME_USER
        if server_uid is not None and (dns is not None or any(a.scheme != "unix" for a in addrs)):
            raise ValueError("server_uid applies to unix sockets only")
        secure = ssl is not None or ca is not None or cert is not None
        ctx = make_ssl_context(ssl, ca, cert, key) if dns is not None and secure or any(a.scheme in ("tls", "wss") for a in addrs) else None
        for name, v, lo, hi in (
            ("max_message_size", max_message_size, 1, 1 << 30),
            ("max_frame_size", max_frame_size, 1024, 16 << 20),
            ("initial_window", initial_window, 1024, w.MAX_WINDOW),
        ):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name}={v!r} is outside {lo}..{hi}")
        pick(codec, None, None, "json")  # a ValueError now for an unknown codec
        headers = dict(ws_headers or {})
        if token is None:
            token = _bearer(headers)
        elif _bearer(headers) is None:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = f"Bearer {token}"
        if token is not None and (not token or any(c in token for c in "\r\n")):
            raise ValueError("token must be a non-empty string without line breaks")
        base_md = [("authorization", f"Bearer {token}")] if token is not None else None
        if server_uid is not None:
            check_server_uid(None, server_uid, validate_only=True)

        def factory() -> Connection:
            return Connection(max_message_size=max_message_size, max_frame_size=max_frame_size, initial_window=initial_window, metadata=base_md)

        async def dial(a: Address, hostname: str | None) -> tuple[Any, Connection, PeerCred | None]:
            try:
                transport, conn = await asyncio.wait_for(
                    open_transport(
                        a, factory, ssl_ctx=ctx, server_hostname=hostname, ws_headers=headers,
                        ws_max_size=max(64 << 20, 16 * initial_window + (4 << 20)),
                    ),
                    handshake_timeout,
                )
            except asyncio.TimeoutError:
                raise StatusError("unavailable", f"cannot connect to {a} within {handshake_timeout:g} s") from None
            cred = None
            try:
                if a.scheme == "unix":
                    sock = transport.get_extra_info("socket")
                    cred = peer_cred(sock) if sock is not None else None
                    if cred is None and server_uid == SAME_USER:
                        # No SO_PEERCRED here: the socket file must be ours.
                        check_socket_owner(a.address)
                    else:
                        check_server_uid(cred, server_uid)
                try:
                    await asyncio.wait_for(asyncio.shield(conn.ready), handshake_timeout)
                except asyncio.TimeoutError:
                    raise StatusError("unavailable", f"no warren preface from {a} within {handshake_timeout:g} s") from None
            except BaseException:
                transport.close()
                conn._shutdown(StatusError("unavailable", "connection abandoned"))
                wc = getattr(transport, "wait_closed", None)
                if wc is not None:
                    await asyncio.gather(wc(), return_exceptions=True)
                raise
            return transport, conn, cred

        def make(a: Address, hostname: str | None = server_hostname) -> Endpoint:
            return Endpoint(a, lambda: dial(a, hostname))

        resolver = None
        if dns is not None:
            host, port = dns
            resolver = Resolver(host, port, "tls" if ctx is not None else "tcp")
            addrs = await resolver.lookup()
            eps = [make(a, server_hostname or host) for a in addrs]
            mk: Callable[[Address], Endpoint] = lambda a: make(a, server_hostname or host)  # noqa: E731
        else:
            eps = [make(a) for a in addrs]
            mk = make
        # Every server is dialed; connect fails only when none answers.
        got = await asyncio.gather(*(ep.connection(lambda: False) for ep in eps), return_exceptions=True)
        errs = [e for e in got if isinstance(e, BaseException)]
        if len(errs) == len(got):
            for e in errs:
                if not isinstance(e, StatusError):
                    raise e
            raise errs[0]
        up = next(ep for ep, g in zip(eps, got) if not isinstance(g, BaseException))
        c = Client(eps, codec, resolver, mk)
        c._last = up
        return c


    return _Connector(run)

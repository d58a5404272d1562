"""The asyncio client: connect(), calls and streams."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Coroutine, Generator, Generic, Mapping, Sequence, TypedDict, TypeVar, Union

from . import _wire as w
from ._codec import Codec, pick
from ._conn import CLIENT_MAX_FRAME, CLIENT_WINDOW, CallEnded, Connection, Stream, md_dict
from ._errors import StatusError
from ._transport import Address, PeerCred, check_server_uid, make_ssl_context, open_transport, parse_address, peer_cred

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


def _timeout_us(timeout: float | None) -> int:
    if timeout is None:
        return 0
    if timeout <= 0:
        return 1
    return math.ceil(timeout * 1e6)


def _status_error(st: Stream, codec: Codec) -> StatusError:
    t = st.trailer
    assert t is not None
    return StatusError(
        t.code,
        t.message,
        [codec.decode_detail(d) for d in t.details],
        raw_details=t.details,
        trailer=md_dict(t.metadata),
    )


class _Deadline:
    """Fails a stream with deadline_exceeded (sending CANCEL) when its
    timeout passes."""

    __slots__ = ("handle",)

    def __init__(self, st: Stream, timeout: float | None) -> None:
        self.handle: asyncio.TimerHandle | None = None
        if timeout is not None:
            self.handle = st.conn.loop.call_later(max(timeout, 0), self._fire, st, timeout)
            st.on_done = self.cancel

    @staticmethod
    def _fire(st: Stream, timeout: float) -> None:
        st.cancel(StatusError("deadline_exceeded", f"the call's deadline of {timeout:g} s passed"))

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class Call:
    """A streaming call in progress. Which methods apply depends on the
    kind: a server stream is read (``async for``), a client stream is written
    and then answers once (``send``, ``close_send``, ``response``), a
    bidirectional stream does both.

    Use it as an async context manager: leaving the block before the call
    ended cancels it (the server is sent CANCEL; the connection stays up).
    """

    def __init__(self, client: Client, method: str, codec: Codec, opener: Any, timeout: float | None) -> None:
        self._client = client
        self.method = method
        self._codec = codec
        self._opener = opener
        self._timeout = timeout
        self._st: Stream | None = None
        self._deadline: _Deadline | None = None
        self._open_lock = asyncio.Lock()

    async def _stream(self) -> Stream:
        if self._st is None:
            async with self._open_lock:
                if self._st is None:
                    self._st = await self._opener()
                    self._deadline = _Deadline(self._st, self._timeout)
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
        if self._st is not None:
            if not self._st.closed:
                self._st.cancel()
            if self._deadline is not None:
                self._deadline.cancel()

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
            raise StatusError("internal", "the server ended the call without a reply")
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


class Client:
    """A connection to a warren server. Create it with :func:`connect`."""

    def __init__(self, conn: Connection, transport: Any, address: Address, codec: CodecArg, peer: PeerCred | None) -> None:
        self._conn = conn
        self._transport = transport
        self.address = address
        self._codec: str | Codec = codec or "json"
        self.peer = peer
        """The server process's credentials (unix sockets on Linux), else None."""

    @property
    def server_settings(self) -> w.Settings:
        """The limits the server announced in its preface."""
        return self._conn.peer

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (by close(), by the server or
        by an error)."""
        return self._conn.closed

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection; calls in progress fail with unavailable."""
        conn = self._conn
        conn.close()
        # What is still buffered gets a moment to go out; a server that
        # does not read does not keep the connection open.
        wc = getattr(self._transport, "wait_closed", None)
        done = asyncio.ensure_future(wc()) if wc is not None else conn.lost
        try:
            await asyncio.wait_for(asyncio.shield(done), _CLOSE_GRACE)
        except asyncio.TimeoutError:
            self._transport.abort()
            await asyncio.wait({done}, timeout=_CLOSE_GRACE)

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
        sees too. Raises StatusError.
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
        conn = self._conn
        st = await conn.open_stream(method, cd.id, _timeout_us(timeout), metadata, payload, True)
        dl = _Deadline(st, timeout) if timeout is not None else None
        try:
            data = await st.recv()
            if data is not None:
                end = await st.recv()
                if end is not None:
                    st.cancel()
                    raise StatusError("internal", f"{method}: the server sent more than one reply to a unary call")
        finally:
            if dl is not None:
                dl.cancel()
        t = st.trailer
        if t is not None and t.code != 0:
            raise _status_error(st, cd)
        if data is None:
            raise StatusError("internal", f"{method}: the server ended the call without a reply")
        return Reply(cd.decode(data), md_dict(st.header or []), md_dict(t.metadata) if t is not None else {})

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
        ``async for`` for the replies."""
        if request is None:
            request = {}
        cd = pick(codec, request, response_type, self._codec)
        payload = cd.encode(request)

        def opener() -> Any:
            return self._conn.open_stream(method, cd.id, _timeout_us(timeout), metadata, payload, True)

        return Call(self, method, cd, opener, timeout)

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
        return self._open(method, metadata, timeout, codec, response_type)

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
        return self._open(method, metadata, timeout, codec, response_type)

    def _open(self, method: str, metadata: Metadata, timeout: float | None, codec: CodecArg, response_type: Any) -> Call:
        cd = pick(codec, None, response_type, self._codec)

        def opener() -> Any:
            return self._conn.open_stream(method, cd.id, _timeout_us(timeout), metadata, None, False)

        return Call(self, method, cd, opener, timeout)

    async def ping(self, timeout: float | None = 10) -> float:
        """Sends a PING and returns the round-trip time in seconds."""
        loop = self._conn.loop
        t0 = loop.time()
        try:
            await asyncio.wait_for(self._conn.ping(), timeout)
        except asyncio.TimeoutError:
            raise StatusError("deadline_exceeded", "no answer to PING") from None
        return loop.time() - t0


class CallOptions(TypedDict, total=False):
    """The keyword options of a call (see :meth:`Client.call`)."""

    metadata: Metadata
    timeout: float | None
    codec: CodecArg
    response_type: Any


class ConnectOptions(TypedDict, total=False):
    """The keyword options of :func:`connect` (and :func:`connect_sync`)."""

    codec: CodecArg
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


def connect(
    address: str,
    *,
    codec: CodecArg = "json",
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
    tls://host:port, ws://host:port/path or wss://host:port/path.

    codec is the calls' default codec ("json", "raw", "proto" or a Codec).
    server_uid (unix sockets): the uid the server process must run as,
    checked with the kernel's credentials (SO_PEERCRED); "same" means this
    process's effective uid. ssl (an ssl.SSLContext) or ca, cert, key,
    server_hostname configure tls:// and wss://; ws_headers are added to
    the WebSocket handshake. max_message_size bounds the messages the
    client accepts; max_frame_size and initial_window are the frame size
    and per-stream window it announces. handshake_timeout (seconds) bounds
    connecting and the server's preface.

    Raises ValueError for a bad address or option, StatusError
    (``unavailable``, or ``permission_denied`` for server_uid) when the
    connection fails.
    """

    async def run() -> Client:
        a = parse_address(address)
        if server_uid is not None and a.scheme != "unix":
            raise ValueError("server_uid applies to unix sockets only")
        ctx = make_ssl_context(ssl, ca, cert, key) if a.scheme in ("tls", "wss") else None
        for name, v, lo, hi in (
            ("max_message_size", max_message_size, 1, 1 << 30),
            ("max_frame_size", max_frame_size, 1024, 16 << 20),
            ("initial_window", initial_window, 1024, w.MAX_WINDOW),
        ):
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name}={v!r} is outside {lo}..{hi}")
        pick(codec, None, None, "json")  # a ValueError now for an unknown codec

        def factory() -> Connection:
            return Connection(max_message_size=max_message_size, max_frame_size=max_frame_size, initial_window=initial_window)

        try:
            transport, conn = await asyncio.wait_for(
                open_transport(
                    a, factory, ssl_ctx=ctx, server_hostname=server_hostname, ws_headers=ws_headers,
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
                check_server_uid(cred, server_uid)
            try:
                await asyncio.wait_for(asyncio.shield(conn.ready), handshake_timeout)
            except asyncio.TimeoutError:
                raise StatusError("unavailable", f"no warren preface from {address} within {handshake_timeout:g} s") from None
        except BaseException:
            transport.close()
            conn._shutdown(StatusError("unavailable", "connection abandoned"))
            wc = getattr(transport, "wait_closed", None)
            if wc is not None:
                await asyncio.gather(wc(), return_exceptions=True)
            raise
        return Client(conn, transport, a, codec, cred)

    return _Connector(run)

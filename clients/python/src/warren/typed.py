"""Typed calls for the clients protoc-gen-warren-python generates.

Generated ``*_warren.py`` modules call these helpers; messages are the
classes protoc generates (``*_pb2.py``, typed by ``*_pb2.pyi``) and travel
as protobuf binary (codec 2). Needs the ``protobuf`` package only for the
messages themselves.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Generic, Iterator, Protocol, TypeVar

from ._client import Call, Client, Metadata
from ._codec import ProtoCodec
from ._sync import SyncCall, SyncClient

__all__ = [
    "Message",
    "Metadata",
    "Stream",
    "SyncStream",
    "open_stream",
    "server_stream",
    "sync_open_stream",
    "sync_server_stream",
    "sync_unary",
    "unary",
]


class Message(Protocol):
    """What warren needs of a protobuf message class."""

    def SerializeToString(self, *, deterministic: bool = ...) -> bytes: ...

    def ParseFromString(self, serialized: bytes, /) -> int: ...


Req = TypeVar("Req", bound=Message)
Rep = TypeVar("Rep", bound=Message)

_codecs: dict[type[Any], ProtoCodec] = {}


def _codec(reply: type[Any]) -> ProtoCodec:
    c = _codecs.get(reply)
    if c is None:
        c = _codecs[reply] = ProtoCodec(reply)
    return c


async def unary(client: Client, method: str, request: Req, reply: type[Rep], metadata: Metadata, timeout: float | None) -> Rep:
    """Calls a unary method; returns the reply as a reply message."""
    out: Rep = await client.call(method, request, metadata=metadata, timeout=timeout, codec=_codec(reply))
    return out


def sync_unary(client: SyncClient, method: str, request: Req, reply: type[Rep], metadata: Metadata, timeout: float | None) -> Rep:
    """Calls a unary method with the blocking client."""
    out: Rep = client.call(method, request, metadata=metadata, timeout=timeout, codec=_codec(reply))
    return out


class Stream(Generic[Req, Rep]):
    """A streaming call of a generated asyncio client: a server stream is
    read with ``async for``; a client stream is written with :meth:`send`
    and answers once with :meth:`response`; a bidirectional stream does
    both, with :meth:`close_send` when done sending. As an async context
    manager, leaving the block before the call ended cancels it."""

    def __init__(self, call: Call) -> None:
        self.call = call

    async def __aenter__(self) -> Stream[Req, Rep]:
        await self.call.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.call.aclose()

    async def send(self, msg: Req) -> None:
        """Sends one request message."""
        await self.call.send(msg)

    async def close_send(self) -> None:
        """Says that no more requests follow (a half-close)."""
        await self.call.close_send()

    async def recv(self) -> Rep:
        """The next reply; StopAsyncIteration at the end, StatusError on failure."""
        out: Rep = await self.call.recv()
        return out

    def __aiter__(self) -> AsyncIterator[Rep]:
        return self

    async def __anext__(self) -> Rep:
        return await self.recv()

    async def response(self) -> Rep:
        """Closes the sending side and returns the one reply (client streams)."""
        out: Rep = await self.call.response()
        return out

    async def header(self) -> dict[str, list[str]]:
        """The reply metadata (waits for it)."""
        return await self.call.header()

    @property
    def trailer(self) -> dict[str, list[str]]:
        """The trailing metadata, once the call ended."""
        return self.call.trailer

    def cancel(self) -> None:
        """Abandons the call: sends CANCEL; the connection stays up."""
        self.call.cancel()


class SyncStream(Generic[Req, Rep]):
    """A streaming call of a generated blocking client: :class:`Stream`'s
    methods, blocking, and iteration with ``for``. As a context manager,
    leaving the block before the call ended cancels it."""

    def __init__(self, call: SyncCall) -> None:
        self.call = call

    def __enter__(self) -> SyncStream[Req, Rep]:
        self.call.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.call.close()

    def send(self, msg: Req) -> None:
        """Sends one request message."""
        self.call.send(msg)

    def close_send(self) -> None:
        """Says that no more requests follow (a half-close)."""
        self.call.close_send()

    def recv(self) -> Rep:
        """The next reply; StopIteration at the end, StatusError on failure."""
        out: Rep = self.call.recv()
        return out

    def __iter__(self) -> Iterator[Rep]:
        return self

    def __next__(self) -> Rep:
        return self.recv()

    def response(self) -> Rep:
        """Closes the sending side and returns the one reply (client streams)."""
        out: Rep = self.call.response()
        return out

    def header(self) -> dict[str, list[str]]:
        """The reply metadata (waits for it)."""
        return self.call.header()

    @property
    def trailer(self) -> dict[str, list[str]]:
        """The trailing metadata, once the call ended."""
        return self.call.trailer

    def cancel(self) -> None:
        """Abandons the call: sends CANCEL; the connection stays up."""
        self.call.cancel()

    def close(self) -> None:
        """Cancels the call if it has not ended."""
        self.call.close()


def server_stream(client: Client, method: str, request: Req, reply: type[Rep], metadata: Metadata, timeout: float | None) -> Stream[Req, Rep]:
    """Calls a server-streaming method: iterate the stream for the replies."""
    return Stream(client.stream(method, request, metadata=metadata, timeout=timeout, codec=_codec(reply)))


def open_stream(client: Client, method: str, request: type[Req], reply: type[Rep], metadata: Metadata, timeout: float | None) -> Stream[Req, Rep]:
    """Opens a client or bidirectional stream of request messages."""
    return Stream(client.bidi_stream(method, metadata=metadata, timeout=timeout, codec=_codec(reply)))


def sync_server_stream(client: SyncClient, method: str, request: Req, reply: type[Rep], metadata: Metadata, timeout: float | None) -> SyncStream[Req, Rep]:
    """:func:`server_stream` for the blocking client."""
    return SyncStream(client.stream(method, request, metadata=metadata, timeout=timeout, codec=_codec(reply)))


def sync_open_stream(client: SyncClient, method: str, request: type[Req], reply: type[Rep], metadata: Metadata, timeout: float | None) -> SyncStream[Req, Rep]:
    """:func:`open_stream` for the blocking client."""
    return SyncStream(client.bidi_stream(method, metadata=metadata, timeout=timeout, codec=_codec(reply)))

"""A blocking wrapper around the asyncio client, for scripts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Coroutine, Iterable, Iterator, TypeVar, Unpack, overload

from . import _wire as w
from ._client import Call, CallOptions, Client, ConnectOptions, Reply, connect
from ._errors import StatusError
from ._otel import with_trace
from ._transport import Address, PeerCred

T = TypeVar("T")


class SyncCall:
    """A streaming call of the blocking client: what
    :meth:`SyncClient.stream`, :meth:`SyncClient.client_stream` and
    :meth:`SyncClient.bidi_stream` return.

    A server stream is read by iterating it (``for msg in call``); a client
    stream is written with :meth:`send` and answers once with
    :meth:`response`; a bidirectional stream does both, with
    :meth:`close_send` when done sending. Use it as a context manager, or
    call :meth:`close`: a call left before it ended is cancelled (the server
    is sent CANCEL; the connection stays up).
    """

    def __init__(self, client: SyncClient, call: Call) -> None:
        self._sc = client
        self._call = call
        self.method = call.method

    def __enter__(self) -> SyncCall:
        self._sc._run(self._call.__aenter__())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        return self.recv()

    def send(self, msg: Any) -> None:
        """Sends one message, blocking while flow control holds it back.
        Raises the call's StatusError if the server already ended it."""
        self._sc._run(self._call.send(msg))

    def close_send(self) -> None:
        """Says that no more messages follow (a half-close)."""
        self._sc._run(self._call.close_send())

    def recv(self) -> Any:
        """The next message from the server. Raises StopIteration when the
        call ended with OK, StatusError when it failed."""
        try:
            return self._sc._run(self._call.recv())
        except StopAsyncIteration:
            raise StopIteration from None

    def response(self) -> Any:
        """Closes the sending side and returns the server's one reply (for
        client streams)."""
        return self._sc._run(self._call.response())

    def header(self) -> dict[str, list[str]]:
        """The reply metadata (waits for it)."""
        return self._sc._run(self._call.header())

    @property
    def trailer(self) -> dict[str, list[str]]:
        """The trailing metadata, once the call ended."""
        return self._call.trailer

    def cancel(self) -> None:
        """Abandons the call: sends CANCEL; the connection stays up."""
        self._sc._call_soon(self._call.cancel)

    def close(self) -> None:
        """Cancels the call if it has not ended."""
        if not self._sc._loop.is_closed():
            self._sc._run(self._call.aclose())

    def __del__(self) -> None:
        # Dropped before its end: cancelled on the client's thread, where
        # the call lives.
        try:
            self._sc._call_soon(self._call.cancel)
        except Exception:
            pass


class SyncClient:
    """A client whose methods block. It runs the asyncio client on an event
    loop of its own, on a private thread; create it with
    :func:`connect_sync`, use it as a context manager or call :meth:`close`.
    Its methods may be called from any thread."""

    def __init__(self, address: str, **options: Unpack[ConnectOptions]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="warren-sync", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._run(_await(connect(address, **options)))
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking warren client cannot be used from its own event loop's thread")
        if self._loop.is_closed():
            coro.close()
            raise StatusError("unavailable", "the client was closed")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except BaseException:
            # Interrupted (KeyboardInterrupt, a timeout): the call is cancelled.
            fut.cancel()
            raise

    def _call_soon(self, fn: Any) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def address(self) -> Address:
        """The address connected to."""
        return self._client.address

    @property
    def peer(self) -> PeerCred | None:
        """The server process's credentials (unix sockets on Linux), else None."""
        return self._client.peer

    @property
    def server_settings(self) -> w.Settings:
        """The limits the server announced in its preface."""
        return self._client.server_settings

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (by close() or by the server)."""
        return self._client.closed

    def call(self, method: str, request: Any = None, **options: Unpack[CallOptions]) -> Any:
        """Calls a unary method and returns its reply; see :meth:`Client.call`
        for the options (metadata, timeout, codec, response_type)."""
        options["metadata"] = with_trace(options.get("metadata"))  # this thread's context
        return self._run(self._client.call(method, request, **options))

    def invoke(self, method: str, request: Any = None, **options: Unpack[CallOptions]) -> Reply[Any]:
        """Like :meth:`call`, with the reply metadata; see :meth:`Client.invoke`."""
        options["metadata"] = with_trace(options.get("metadata"))  # this thread's context
        return self._run(self._client.invoke(method, request, **options))

    def stream(self, method: str, request: Any = None, **options: Unpack[CallOptions]) -> SyncCall:
        """Calls a server-streaming method: iterate the returned call for
        the replies. Closing it early cancels the call."""
        return SyncCall(self, self._client.stream(method, request, **options))

    @overload
    def client_stream(self, method: str, requests: None = None, **options: Unpack[CallOptions]) -> SyncCall: ...

    @overload
    def client_stream(self, method: str, requests: Iterable[Any], **options: Unpack[CallOptions]) -> Any: ...

    def client_stream(self, method: str, requests: Iterable[Any] | None = None, **options: Unpack[CallOptions]) -> Any:
        """Opens a client-streaming call.

        Without requests it returns the call: :meth:`SyncCall.send`
        messages, then :meth:`SyncCall.response`. With requests (any
        iterable) it sends each of them and returns the reply.
        """
        call = SyncCall(self, self._client.client_stream(method, **options))
        if requests is None:
            return call
        with call:
            for m in requests:
                call.send(m)
            return call.response()

    def bidi_stream(self, method: str, **options: Unpack[CallOptions]) -> SyncCall:
        """Opens a bidirectional call: :meth:`SyncCall.send` and
        :meth:`SyncCall.recv` (or iterate it) at will,
        :meth:`SyncCall.close_send` when done sending."""
        return SyncCall(self, self._client.bidi_stream(method, **options))

    def ping(self, timeout: float | None = 10) -> float:
        """Sends a PING and returns the round-trip time in seconds."""
        return self._run(self._client.ping(timeout))

    def close(self) -> None:
        """Closes the connection and stops the client's thread; calls in
        progress fail with unavailable."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._client.close(), 10)
        finally:
            self._stop()

    def _stop(self) -> None:
        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(drain(), self._loop).result(5)
        except Exception:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


async def _await(x: Any) -> Any:
    return await x


def connect_sync(address: str, **options: Unpack[ConnectOptions]) -> SyncClient:
    """Connects with a blocking client; the address and options are those
    of :func:`connect`. Raises StatusError when the connection fails."""
    return SyncClient(address, **options)

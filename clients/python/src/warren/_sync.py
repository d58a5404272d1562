"""A blocking wrapper around the asyncio client, for scripts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterable, Iterator

from ._client import Client, Reply, connect


class SyncClient:
    """A client whose methods block. It runs an event loop on a private
    thread; use it as a context manager, or call close()."""

    def __init__(self, address: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="warren-sync", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._run(_await(connect(address, **options)))
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except BaseException:
            fut.cancel()
            raise

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def peer(self) -> Any:
        return self._client.peer

    def call(self, method: str, request: Any = None, **kw: Any) -> Any:
        """Calls a unary method; see Client.call."""
        return self._run(self._client.call(method, request, **kw))

    def invoke(self, method: str, request: Any = None, **kw: Any) -> Reply[Any]:
        """Like call, with the reply metadata; see Client.invoke."""
        r: Reply[Any] = self._run(self._client.invoke(method, request, **kw))
        return r

    def stream(self, method: str, request: Any = None, **kw: Any) -> Iterator[Any]:
        """Calls a server-streaming method and yields its replies. Closing
        the generator early cancels the call."""
        c = self._client.stream(method, request, **kw)
        try:
            while True:
                try:
                    yield self._run(c.recv())
                except StopAsyncIteration:
                    return
        finally:
            self._run(c.aclose())

    def client_stream(self, method: str, requests: Iterable[Any], **kw: Any) -> Any:
        """Sends every message of requests on a client-streaming call and
        returns the reply."""

        async def run() -> Any:
            async with self._client.client_stream(method, **kw) as c:
                for m in requests:
                    await c.send(m)
                return await c.response()

        return self._run(run())

    def ping(self) -> float:
        rtt: float = self._run(self._client.ping())
        return rtt

    def close(self) -> None:
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


def connect_sync(address: str, **options: Any) -> SyncClient:
    """Connects with a blocking client; the options are those of connect()."""
    return SyncClient(address, **options)

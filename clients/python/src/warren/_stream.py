"""The client's side of one call on a connection: a stream, its receive
queue and its sending paced by flow control (PROTOCOL.md)."""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import TYPE_CHECKING, Callable

from . import _wire as w
from ._errors import StatusError

if TYPE_CHECKING:
    from ._conn import Connection

_u32 = struct.Struct(">I")

TRAILERS = w.TRAILERS
MORE = w.FLAG_MORE
END = w.FLAG_END


def deadline_error(timeout: float | None) -> StatusError:
    if timeout is None:
        return StatusError("deadline_exceeded", "the call's deadline passed")
    return StatusError("deadline_exceeded", f"the call's deadline of {timeout:g} s passed")


def arm_deadline(st: Stream, deadline: float, timeout: float | None) -> None:
    """Fails st with deadline_exceeded (sending CANCEL) at deadline."""
    h = st.conn.loop.call_at(deadline, lambda: st.cancel(deadline_error(timeout)))
    st.on_done = h.cancel


class CallEnded(StatusError):
    """Raised by a send on a stream the server already ended: its status is
    in the stream's trailer."""

    def __init__(self) -> None:
        super().__init__("failed_precondition", "the call has ended")


class Stream:
    """The client's side of one call (a stream with an odd id)."""

    __slots__ = (
        "conn", "id", "queue", "waiter", "header", "trailer", "error", "closed",
        "send_win", "credit_waiter", "recv_avail", "unacked", "held", "asm", "asm_total",
        "got_data", "recv_ended", "send_ended", "send_lock", "on_done", "header_waiters",
    )

    def __init__(self, conn: Connection, sid: int) -> None:
        self.conn = conn
        self.id = sid
        self.queue: deque[tuple[bytes, int]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.header: list[tuple[str, str]] | None = None
        self.trailer: w.Trailer | None = None
        self.error: BaseException | None = None
        self.closed = False
        self.send_win = conn.peer.initial_window
        self.credit_waiter: asyncio.Future[None] | None = None
        self.recv_avail = conn.local.initial_window
        self.unacked = 0
        self.held = 0
        self.asm: bytearray | None = None
        self.asm_total = 0
        self.got_data = False
        self.recv_ended = False
        self.send_ended = False
        self.send_lock: asyncio.Lock | None = None
        self.on_done: Callable[[], None] | None = None
        self.header_waiters: list[asyncio.Future[None]] | None = None

    # Receiving.

    def _wake(self) -> None:
        hw = self.header_waiters
        if hw is not None and (self.header is not None or self.closed):
            self.header_waiters = None
            for h in hw:
                if not h.done():
                    h.set_result(None)
        f = self.waiter
        if f is not None:
            self.waiter = None
            if not f.done():
                f.set_result(None)
        f = self.credit_waiter
        if f is not None and self.closed:
            self.credit_waiter = None
            if not f.done():
                f.set_result(None)

    async def recv(self) -> bytes | None:
        """The next message, or None once the call ended with OK. Raises the
        call's error."""
        while True:
            q = self.queue
            if q:
                msg, cost = q.popleft()
                if not q and self.held:
                    cost += self.held
                    self.held = 0
                if cost:
                    self.conn._credit(self, cost)
                return msg
            if self.error is not None:
                raise self.error
            if self.closed:
                return None
            f = self.waiter = self.conn.loop.create_future()
            try:
                await f
            except asyncio.CancelledError:
                self.cancel()
                raise

    def fail(self, err: BaseException) -> None:
        """Ends the stream locally with err; queued messages are dropped."""
        if self.closed:
            return
        self.error = err
        self._close()

    def _close(self) -> None:
        self.closed = True
        conn = self.conn
        if conn.streams.pop(self.id, None) is not None:
            conn._stream_ended()
        # Messages never delivered and chunks held are credited to the connection.
        credit = self.held + sum(c for _, c in self.queue) if self.error is not None else 0
        if self.error is not None:
            self.queue.clear()
            self.held = 0
        if self.asm is not None:
            credit += len(self.asm)
            self.asm = None
        if credit:
            conn._credit(None, credit)
        self._wake()
        if self.on_done is not None:
            self.on_done()

    def cancel(self, err: BaseException | None = None) -> None:
        """Abandons the stream: sends CANCEL; the connection stays up."""
        if self.closed:
            return
        self.conn._write_frame(self.id, w.CANCEL, 0, b"")
        self.fail(err or StatusError("canceled", "the call was canceled"))

    # Sending.

    async def send(self, payload: bytes, end: bool) -> None:
        """Sends one message on the stream, chunked and paced by flow control."""
        conn = self.conn
        if self.error is not None:
            raise self.error
        if self.closed:
            raise CallEnded()
        if self.send_ended:
            raise StatusError("failed_precondition", "the call's sending side is closed")
        n = len(payload)
        if n > conn.peer.max_message_size:
            raise StatusError("resource_exhausted", f"message of {n} bytes is over the server's MaxMessageSize {conn.peer.max_message_size}")
        if end:
            self.send_ended = True
        lock = self.send_lock
        if n <= self.send_win and n <= conn.send_win and n <= conn.peer.max_frame_size and (lock is None or not lock.locked()):
            self.send_win -= n
            conn.send_win -= n
            conn._write_data(self.id, END if end else 0, payload)
            return
        if lock is None:
            lock = self.send_lock = asyncio.Lock()
        async with lock:
            await self._send_chunked(payload, end)

    async def _send_chunked(self, payload: bytes, end: bool) -> None:
        conn = self.conn
        n = len(payload)
        peer = conn.peer
        limit = min(peer.max_frame_size, max(peer.initial_window // 2, 1024))
        if n <= min(peer.max_frame_size, peer.initial_window):
            # One frame, once the windows hold it.
            await self._wait_credit(need=n)
            self.send_win -= n
            conn.send_win -= n
            conn._write_data(self.id, END if end else 0, payload)
            return
        mv = memoryview(payload)
        i = 0
        first = True
        while i < n:
            await self._wait_credit(need=5 if first else 1)
            room = min(self.send_win, conn.send_win, limit)
            if first:
                k = min(room - 4, n - 1)
                cost = k + 4
                conn._write_data(self.id, MORE, mv[:k], _u32.pack(n))
                first = False
            else:
                k = min(room, n - i)
                cost = k
                last = i + k == n
                conn._write_data(self.id, (END if end else 0) if last else MORE, mv[i : i + k])
            self.send_win -= cost
            conn.send_win -= cost
            i += k
            if conn.paused:
                await conn._drain()

    async def _wait_credit(self, need: int = 1) -> None:
        conn = self.conn
        while True:
            if self.error is not None:
                raise self.error
            if self.closed:
                raise CallEnded()
            if self.send_win >= need and conn.send_win >= need:
                return
            # Woken by credit for the stream or the connection, or by the stream's end.
            f = self.credit_waiter = conn.loop.create_future()
            if conn.send_win < need:
                conn.credit_waiters.append(f)
            try:
                await f
            except asyncio.CancelledError:
                self.cancel()
                raise

    async def close_send(self) -> None:
        """Half-closes the sending side with an empty TRAILERS|END."""
        if self.send_ended or self.closed:
            return
        lock = self.send_lock
        if lock is not None:
            async with lock:
                self._half_close()
        else:
            self._half_close()

    def _half_close(self) -> None:
        if not self.send_ended and not self.closed:
            self.send_ended = True
            self.conn._write_frame(self.id, TRAILERS, END, b"")

"""One warren connection: the preface exchange, multiplexed streams,
chunking, flow control both ways, PING and GOAWAY (PROTOCOL.md).

The connection is an asyncio protocol: bytes are parsed where they arrive
(``data_received``), with no reader task and no per-frame future; frames
written during one turn of the event loop go out in one write.
"""

from __future__ import annotations

import asyncio
import math
import os
import struct
from collections import deque
from typing import Any

from . import _wire as w
from ._errors import ProtocolError, StatusError
from ._stream import CallEnded, Stream, arm_deadline, deadline_error

__all__ = ["BACKLOG_MARGIN", "CLIENT_MAX_FRAME", "CLIENT_WINDOW", "CallEnded", "Connection", "Stream", "deadline_error", "md_dict"]

_header = struct.Struct(">IIBB")
_hpack = _header.pack
_hunpack = _header.unpack_from
_u32 = struct.Struct(">I")

DATA = w.DATA
HEADERS = w.HEADERS
TRAILERS = w.TRAILERS
MORE = w.FLAG_MORE
END = w.FLAG_END

# What this client announces unless told otherwise (as the Go client does).
CLIENT_MAX_FRAME = 512 << 10
CLIENT_WINDOW = 2 << 20

# Payloads up to this size are copied into the batched write; larger ones
# are written on their own, without a copy.
_SMALL = 16 << 10

# Unwritten output beyond what flow control explains (DATA the server has
# not credited back yet, twice over for frame headers) may reach this much
# before the client stops reading from the server until its writes drain:
# a server that floods PINGs, or opens streams, and never reads what it is
# answered cannot grow the client's write buffer without bound.
BACKLOG_MARGIN = 1 << 20


def _md_pairs(md: Any) -> list[tuple[str, str]]:
    if not md:
        return []
    if isinstance(md, dict):
        out: list[tuple[str, str]] = []
        for k, v in md.items():
            if isinstance(v, (list, tuple)):
                out.extend((k, x) for x in v)
            else:
                out.append((k, v))
        return out
    return [(k, v) for k, v in md]


def md_dict(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


class Connection(asyncio.Protocol):
    """A client connection to a warren server."""

    def __init__(
        self,
        *,
        max_message_size: int = w.DEFAULT_MAX_MESSAGE_SIZE,
        max_frame_size: int = CLIENT_MAX_FRAME,
        initial_window: int = CLIENT_WINDOW,
        max_streams: int = w.DEFAULT_MAX_STREAMS,
        metadata: list[tuple[str, str]] | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        # Metadata sent with every call, ahead of the call's own.
        self.base_md: list[tuple[str, str]] = metadata or []
        self.local = w.Settings(max_frame_size, max_message_size, initial_window, max_streams)
        self.local.validate()
        self.peer = w.Settings()
        self.transport: Any = None
        self.buf = bytearray()
        self.ready: asyncio.Future[None] = self.loop.create_future()
        self.streams: dict[int, Stream] = {}
        self.next_id = 1
        self.last_peer_id = 0
        self.open = 0
        self.slot_waiters: deque[asyncio.Future[None]] = deque()
        self.send_win = 0
        self.credit_waiters: list[asyncio.Future[None]] = []
        self.recv_avail = 16 * initial_window
        self.conn_unacked = 0
        self.wbuf: list[bytes] = []
        self.pongs: list[bytes] = []  # PINGs and their answers: written ahead of wbuf
        self.flush_scheduled = False
        self.paused = False
        self.read_paused = False
        self.drain_waiters: list[asyncio.Future[None]] = []
        self.pings: dict[bytes, asyncio.Future[None]] = {}
        self.goaway: tuple[int, int, str] | None = None
        self.hdr_cache: dict[tuple[str, int], bytes] = {}
        self.error: StatusError | None = None
        self.closed = False
        self.closed_future: asyncio.Future[None] = self.loop.create_future()
        self.lost: asyncio.Future[None] = self.loop.create_future()

    # asyncio.Protocol.

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(w.encode_preface(self.local))

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.read_paused:
            # The backlog drained below the transport's low-water mark.
            self.read_paused = False
            if not self.closed:
                self.transport.resume_reading()
        ws, self.drain_waiters = self.drain_waiters, []
        for f in ws:
            if not f.done():
                f.set_result(None)

    async def _drain(self) -> None:
        while self.paused and not self.closed:
            f = self.loop.create_future()
            self.drain_waiters.append(f)
            await f

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        why = "the connection was closed" if exc is None else f"the connection was lost: {exc}"
        if self.goaway is not None and self.goaway[2]:
            why += f" (after GOAWAY: {self.goaway[2]})"
        self._shutdown(StatusError("unavailable", why))

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.buf
        if buf:
            buf += data
        else:
            buf = data  # type: ignore[assignment]
        try:
            used = self._parse(buf)
        except w.WireError as e:
            self._protocol_error(e)
            return
        except ProtocolError as e:
            self._protocol_error(e)
            return
        if used == len(buf):
            self.buf = bytearray()
        elif buf is data:
            self.buf = bytearray(memoryview(data)[used:])
        else:
            del buf[:used]

    def _parse(self, buf: Any) -> int:
        if not self.ready.done():
            r = w.parse_preface(buf)
            if r is None:
                return 0
            # A session ignores the Mode setting like any setting it does
            # not know (PROTOCOL.md, The Mode setting).
            self.peer, pos = r
            self.send_win = 16 * self.peer.initial_window
            self.ready.set_result(None)
        else:
            pos = 0
        n = len(buf)
        max_frame = self.local.max_frame_size
        mv = memoryview(buf)
        try:
            return self._frames(buf, mv, pos, n, max_frame)
        finally:
            mv.release()

    def _frames(self, buf: Any, mv: memoryview, pos: int, n: int, max_frame: int) -> int:
        while n - pos >= 10:
            length, sid, ftype, flags = _hunpack(buf, pos)
            if ftype == DATA and sid and length <= max_frame and not (flags & 3 == 3):
                end = pos + 10 + length
                if end > n:
                    break
                self._on_data(sid, flags, mv[pos + 10 : end], length)
                pos = end
                continue
            w.check_header(length, sid, ftype, flags, max_frame)
            end = pos + 10 + length
            if end > n:
                break
            payload = bytes(buf[pos + 10 : end])
            pos = end
            if ftype == TRAILERS:
                self._on_trailers(sid, flags, payload)
            elif ftype == HEADERS:
                self._on_headers(sid, flags, payload)
            elif ftype == w.WINDOW:
                self._on_window(sid, payload)
            elif ftype == w.CANCEL:
                self._on_cancel(sid)
            elif ftype == w.PING:
                self._on_ping(flags, payload)
            else:
                self._on_goaway(payload)
            if self.closed:
                return n
        return pos

    # Frames received.

    def _known(self, sid: int) -> bool:
        """Whether sid names a stream that was opened at some point."""
        return sid < self.next_id if sid & 1 else sid <= self.last_peer_id

    def _on_data(self, sid: int, flags: int, payload: memoryview, length: int) -> None:
        self.recv_avail -= length
        if self.recv_avail < 0:
            raise ProtocolError("flow control: the server sent more DATA than the connection's window", kind="bad_frame")
        st = self.streams.get(sid)
        if st is None:
            if not self._known(sid):
                raise ProtocolError(f"DATA on stream {sid}, which was never opened", kind="bad_frame")
            if length:
                self._credit(None, length)  # a closed stream: credited at once
            return
        if st.recv_ended:
            raise ProtocolError(f"DATA on stream {sid} after END", kind="bad_frame")
        st.recv_avail -= length
        if st.recv_avail < 0:
            raise ProtocolError(f"flow control: the server sent more DATA than stream {sid}'s window", kind="bad_frame")
        if not st.got_data:
            st.got_data = True
            if st.header is None:
                st.header = []  # no HEADERS before the first DATA: empty reply metadata
        asm = st.asm
        if asm is None and not flags & MORE:
            if length > self.local.max_message_size:
                self._credit(None, length)
                st.cancel(StatusError("resource_exhausted", f"reply message of {length} bytes is over MaxMessageSize {self.local.max_message_size}"))
                return
            st.queue.append((payload.tobytes(), length))
        elif asm is None:
            if length < 4:
                raise ProtocolError("first chunk shorter than its 4-byte length", kind="bad_frame")
            total = _u32.unpack_from(payload)[0]
            if total <= length - 4:
                raise ProtocolError(f"chunked message of {total} bytes not longer than its first chunk", kind="bad_frame")
            if total > self.local.max_message_size:
                # Dropped without allocating; the call fails, the connection stays up.
                self._credit(None, length)
                st.cancel(StatusError("resource_exhausted", f"reply message of {total} bytes is over MaxMessageSize {self.local.max_message_size}"))
                return
            st.asm = bytearray(total)
            st.asm[: length - 4] = payload[4:]
            st.asm_total = length - 4
            self._early(st, length)
        else:
            if length == 0:
                raise ProtocolError("empty continuation frame", kind="bad_frame")
            filled = st.asm_total
            if filled + length > len(asm):
                raise ProtocolError("chunks past the declared message length", kind="bad_frame")
            asm[filled : filled + length] = payload
            filled += length
            st.asm_total = filled
            done = filled == len(asm)
            if flags & MORE:
                if done:
                    raise ProtocolError("MORE on the frame completing the message", kind="bad_frame")
                self._early(st, length)
            else:
                if not done:
                    raise ProtocolError("last chunk short of the declared message length", kind="bad_frame")
                st.asm = None
                st.queue.append((bytes(asm) if len(asm) < (1 << 20) else asm, length))  # type: ignore[arg-type]
        if flags & END:
            st.recv_ended = True
            if st.send_ended:
                st._close()
                return
        if (st.waiter is not None and (st.queue or st.recv_ended)) or st.header_waiters is not None:
            st._wake()

    def _early(self, st: Stream, n: int) -> None:
        # Chunks of a message being assembled are credited as they arrive,
        # unless finished messages wait: then they are held until those are read.
        if st.queue:
            st.held += n
        else:
            self._credit(st, n)

    def _on_headers(self, sid: int, flags: int, payload: bytes) -> None:
        if sid & 1 == 0:
            # A stream the server opens: this client serves no methods.
            if sid <= self.last_peer_id:
                raise ProtocolError(f"HEADERS opening stream {sid}, not above {self.last_peer_id}", kind="bad_frame")
            self.last_peer_id = sid
            try:
                w.decode_call_header(payload)
            except w.WireError:
                self._write_frame(sid, TRAILERS, END, w.encode_trailer(3, "malformed call header"))
                return
            self._write_frame(sid, TRAILERS, END, w.encode_trailer(12, "this client serves no methods"))
            return
        st = self.streams.get(sid)
        if st is None:
            if not self._known(sid):
                raise ProtocolError(f"HEADERS on stream {sid}, which was never opened", kind="bad_frame")
            return
        if st.asm is not None:
            raise ProtocolError(f"HEADERS inside a chunked message on stream {sid}", kind="bad_frame")
        if st.header is not None or st.got_data or st.recv_ended:
            raise ProtocolError(f"a second HEADERS frame, or one after DATA, on stream {sid}", kind="bad_frame")
        st.header = w.decode_metadata(payload)
        if flags & END:
            st.recv_ended = True
        st._wake()

    def _on_trailers(self, sid: int, flags: int, payload: bytes) -> None:
        st = self.streams.get(sid)
        if st is None:
            if not self._known(sid):
                raise ProtocolError(f"TRAILERS on stream {sid}, which was never opened", kind="bad_frame")
            return
        if st.asm is not None:
            raise ProtocolError(f"TRAILERS inside a chunked message on stream {sid}", kind="bad_frame")
        t = w.decode_trailer(payload)
        st.trailer = t
        if st.header is None:
            st.header = []
        st.recv_ended = True
        st._close()

    def _on_window(self, sid: int, payload: bytes) -> None:
        inc = w.decode_window(payload)
        if sid == 0:
            self.send_win += inc
            if self.send_win > 16 * self.peer.initial_window:
                raise ProtocolError("flow control: the server granted more connection credit than it could owe", kind="bad_frame")
            ws, self.credit_waiters = self.credit_waiters, []
            for f in ws:
                if not f.done():
                    f.set_result(None)
            return
        st = self.streams.get(sid)
        if st is None:
            return
        st.send_win += inc
        if st.send_win > self.peer.initial_window:
            raise ProtocolError(f"flow control: the server granted more credit than it could owe on stream {sid}", kind="bad_frame")
        cw = st.credit_waiter
        if cw is not None:
            st.credit_waiter = None
            if not cw.done():
                cw.set_result(None)

    def _on_cancel(self, sid: int) -> None:
        st = self.streams.get(sid)
        if st is not None:
            st.fail(StatusError("canceled", "the server canceled the call"))

    def _on_ping(self, flags: int, payload: bytes) -> None:
        if flags & w.FLAG_ACK:
            f = self.pings.pop(payload, None)
            if f is not None and not f.done():
                f.set_result(None)
            return
        # Answered ahead of queued data.
        self.pongs.append(_hpack(8, 0, w.PING, w.FLAG_ACK) + payload)
        self._schedule()

    def _on_goaway(self, payload: bytes) -> None:
        last, code, msg = w.decode_goaway(payload)
        if self.goaway is not None and last > self.goaway[0]:
            last = self.goaway[0]
        self.goaway = (last, code, msg)
        why = "the server is going away" + (f": {msg}" if msg else "")
        for st in [s for s in self.streams.values() if s.id > last]:
            st.fail(StatusError("unavailable", why + " (the call was not processed; it may be retried)", not_processed=True))
        ws, self.slot_waiters = self.slot_waiters, deque()
        for f in ws:
            if not f.done():
                f.set_result(None)

    # Flow control: credit for what the application consumed.

    def _credit(self, st: Stream | None, n: int) -> None:
        """Records n bytes as consumed and grants them back in batches: a
        window's credit counts from when its WINDOW frame is written."""
        if self.closed:
            return
        if st is not None and not st.recv_ended and not st.closed:
            st.unacked += n
            if st.unacked >= self.local.initial_window // 2:
                self.wbuf.append(_hpack(4, st.id, w.WINDOW, 0) + _u32.pack(st.unacked))
                st.recv_avail += st.unacked
                st.unacked = 0
                self._schedule()
        self.conn_unacked += n
        if self.conn_unacked >= 8 * self.local.initial_window:
            self.wbuf.append(_hpack(4, 0, w.WINDOW, 0) + _u32.pack(self.conn_unacked))
            self.recv_avail += self.conn_unacked
            self.conn_unacked = 0
            self._schedule()

    # Writing.

    def _schedule(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        b = self.wbuf
        if self.pongs:
            b = self.pongs + b
            self.pongs = []
        if not b or self.closed:
            return
        self.wbuf = []
        if len(b) == 1:
            self.transport.write(b[0])
        else:
            self.transport.write(b"".join(b))
        self._check_backlog()

    def backlog_limit(self) -> int:
        """How much unwritten output the client holds before it stops
        reading from the server (see BACKLOG_MARGIN)."""
        in_flight = max(16 * self.peer.initial_window - self.send_win, 0) if self.ready.done() else 0
        return 2 * in_flight + BACKLOG_MARGIN

    def _check_backlog(self) -> None:
        if self.read_paused or self.closed:
            return
        if self.transport.get_write_buffer_size() > self.backlog_limit():
            # Resumed by resume_writing once the transport drained.
            self.read_paused = True
            self.transport.pause_reading()

    def _write_frame(self, sid: int, ftype: int, flags: int, payload: bytes) -> None:
        if self.closed:
            return
        self.wbuf.append(_hpack(len(payload), sid, ftype, flags) + payload)
        self._schedule()

    def _write_data(self, sid: int, flags: int, data: Any, prefix: bytes = b"") -> None:
        """Queues a DATA frame; a large payload is written without a copy."""
        if self.closed:
            return
        n = len(data) + len(prefix)
        if n <= _SMALL:
            self.wbuf.append(_hpack(n, sid, DATA, flags) + prefix + data)
            self._schedule()
            return
        # Keep the order: what is queued goes first.
        self.wbuf.append(_hpack(n, sid, DATA, flags) + prefix)
        self._flush()
        self.transport.write(data)
        self._check_backlog()

    # Streams.

    async def open_stream(
        self, method: str, codec: int, timeout_us: int, metadata: Any, first: bytes | None, end: bool,
        *, deadline: float | None = None, timeout: float | None = None,
    ) -> Stream:
        """Opens a stream with its call header, and the first message if
        given (sent with END when end).

        deadline (the event loop's time) bounds the whole call from here:
        waiting for a stream slot, for flow-control credit, and the stream
        itself, which fails with deadline_exceeded (CANCEL sent) when it
        passes; timeout is the duration it came from, for the message. With
        a deadline, the call header carries the time left instead of
        timeout_us."""
        if self.error is not None:
            raise self.error
        if self.open >= self.peer.max_streams:
            await self._wait_slot(deadline, timeout)
        if self.goaway is not None:
            raise StatusError("unavailable", "the server is going away" + (f": {self.goaway[2]}" if self.goaway[2] else "") + "; no new calls on this connection", not_processed=True)
        if deadline is not None:
            left = deadline - self.loop.time()
            if left <= 0:
                raise deadline_error(timeout)
            timeout_us = math.ceil(left * 1e6)
        if timeout_us or metadata or self.base_md:
            hdr = w.encode_call_header(method, codec, timeout_us, self.base_md + _md_pairs(metadata))
        else:
            # Most calls have neither: their header is the same every time.
            key = (method, codec)
            hdr = self.hdr_cache.get(key)  # type: ignore[assignment]
            if hdr is None:
                hdr = w.encode_call_header(method, codec)
                if len(self.hdr_cache) < 256:
                    self.hdr_cache[key] = hdr
        if len(hdr) > self.peer.max_frame_size:
            raise StatusError("resource_exhausted", f"call header of {len(hdr)} bytes is over the server's MaxFrameSize")
        if first is not None and len(first) > self.peer.max_message_size:
            raise StatusError("resource_exhausted", f"message of {len(first)} bytes is over the server's MaxMessageSize {self.peer.max_message_size}")
        sid = self.next_id
        self.next_id += 2
        st = Stream(self, sid)
        self.streams[sid] = st
        self.open += 1
        if deadline is not None:
            arm_deadline(st, deadline, timeout)
        if first is not None and end and len(first) <= self.peer.max_frame_size and len(first) <= st.send_win and len(first) <= self.send_win:
            # The common unary call: HEADERS and DATA|END in one write.
            n = len(first)
            st.send_win -= n
            self.send_win -= n
            st.send_ended = True
            self.wbuf.append(_hpack(len(hdr), sid, HEADERS, 0) + hdr + _hpack(n, sid, DATA, END) + first)
            self._schedule()
            return st
        self.wbuf.append(_hpack(len(hdr), sid, HEADERS, END if first is None and end else 0) + hdr)
        self._schedule()
        if first is None and end:
            st.send_ended = True
        if first is not None:
            try:
                await st.send(first, end)
            except CallEnded:
                return st  # the server answered before taking the whole request
            except BaseException:
                st.cancel()
                raise
        return st

    async def _wait_slot(self, deadline: float | None, timeout: float | None) -> None:
        """Waits while the server's MaxStreams calls are open, until the
        deadline if there is one."""
        handle = None
        try:
            while self.open >= self.peer.max_streams and self.goaway is None:
                f = self.loop.create_future()
                self.slot_waiters.append(f)
                if deadline is not None and handle is None:
                    handle = self.loop.call_at(deadline, self._expire_slot_wait)
                await f
                if self.error is not None:
                    raise self.error
                if deadline is not None and self.loop.time() >= deadline:
                    raise deadline_error(timeout)
        except BaseException:
            # A slot handed to this waiter passes on to the next.
            if self.open < self.peer.max_streams:
                self._stream_ended(released=False)
            raise
        finally:
            if handle is not None:
                handle.cancel()

    def _expire_slot_wait(self) -> None:
        # Wakes every slot waiter: those past their deadline fail, the
        # others wait again.
        ws, self.slot_waiters = self.slot_waiters, deque()
        for f in ws:
            if not f.done():
                f.set_result(None)

    def _stream_ended(self, released: bool = True) -> None:
        if released:
            self.open -= 1
        while self.slot_waiters:
            f = self.slot_waiters.popleft()
            if not f.done():
                f.set_result(None)
                break

    # Connection-wide.

    async def ping(self) -> None:
        if self.error is not None:
            raise self.error
        data = os.urandom(8)
        f = self.loop.create_future()
        self.pings[data] = f
        self.pongs.append(_hpack(8, 0, w.PING, 0) + data)
        self._schedule()
        try:
            await f
        finally:
            self.pings.pop(data, None)
        if self.error is not None:
            raise self.error

    def _protocol_error(self, e: Exception) -> None:
        kind = getattr(e, "kind", "")
        if isinstance(e, ProtocolError):
            err = e
        elif kind in ("not_warren", "http_request", "bad_version"):
            err = ProtocolError(f"the server does not speak warren: {e}", code="unavailable", kind=kind)
        else:
            err = ProtocolError(f"protocol error from the server: {e}", kind=kind)
        if self.ready.done() and not self.closed:
            # Tell the server why before closing.
            self.wbuf.append(w.encode_frame(0, w.GOAWAY, 0, w.encode_goaway(self.last_peer_id, 13, str(e)[:200])))
            self._flush()
        self._shutdown(err)
        if self.transport is not None:
            self.transport.close()

    def _shutdown(self, err: StatusError) -> None:
        if self.closed:
            return
        self.closed = True
        self.error = err
        if not self.ready.done():
            self.ready.set_exception(err)
            self.ready.exception()  # retrieved here; connect() re-raises it
        for st in list(self.streams.values()):
            st.fail(err)
        for f in list(self.pings.values()) + self.credit_waiters + list(self.slot_waiters) + self.drain_waiters:
            if not f.done():
                f.set_result(None)
        self.credit_waiters = []
        self.slot_waiters.clear()
        self.drain_waiters = []
        if not self.closed_future.done():
            self.closed_future.set_result(None)

    def close(self) -> None:
        """Closes the connection at once; pending calls fail with unavailable."""
        if self.transport is not None and not self.closed:
            self._flush()
            self._shutdown(StatusError("unavailable", "the client was closed"))
            self.transport.close()

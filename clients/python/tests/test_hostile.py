"""Servers that break the protocol, die or go away: every pending call ends
promptly with a clean StatusError, and nothing is allocated on a forged
length."""

from __future__ import annotations

import asyncio
import os
import struct
import time
from pathlib import Path

import pytest

import warren
from warren import _wire as w

pytestmark = pytest.mark.asyncio


def frame(sid: int, ftype: int, flags: int, payload: bytes = b"") -> bytes:
    return w.encode_frame(sid, ftype, flags, payload)


class FakeServer:
    """A unix-socket server whose behaviour the test scripts: script(reader,
    writer) runs for each connection."""

    def __init__(self, path: Path, script, tls=None) -> None:
        self.path = path
        self.script = script
        self.tls = tls  # conftest.TLSFiles: serve tls:// on 127.0.0.1 instead
        self.server: asyncio.AbstractServer | None = None
        self.received = bytearray()
        self.tasks: set[asyncio.Task] = set()

    async def __aenter__(self) -> str:
        if self.tls is not None:
            import ssl

            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(self.tls.cert, self.tls.key)
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=ctx)
            return f"tls://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        self.server = await asyncio.start_unix_server(self._handle, str(self.path))
        return f"unix://{self.path}"

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()
        if self.path.exists():
            self.path.unlink()

    async def _handle(self, r: asyncio.StreamReader, wr: asyncio.StreamWriter) -> None:
        self.tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await self.script(self, r, wr)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            wr.close()

    async def handshake(self, r, wr, preface: bytes = w.encode_preface()) -> w.Settings:
        b = await r.readexactly(6)
        b += await r.readexactly(b[5] * 6)
        s, _ = w.parse_preface(b)
        wr.write(preface)
        await wr.drain()
        return s

    async def read_frame(self, r) -> w.Frame:
        h = await r.readexactly(10)
        n = struct.unpack(">I", h[:4])[0]
        f, _ = w.parse_frame(h + await r.readexactly(n), 16 << 20)
        return f

    async def read_until(self, r, ftype: int) -> w.Frame:
        while True:
            f = await self.read_frame(r)
            if f.type == ftype:
                return f


@pytest.fixture
def sock_path(workdir: Path) -> Path:
    return workdir / f"fake-{os.urandom(4).hex()}.sock"


async def expect_failure(addr: str, code: str, *, call: bool = True, **opts) -> warren.StatusError:
    t0 = time.monotonic()
    with pytest.raises(warren.StatusError) as ei:
        async with warren.connect(addr, handshake_timeout=2, **opts) as c:
            if call:
                await asyncio.wait_for(c.call("Test.Echo", 1), 5)
    assert time.monotonic() - t0 < 4
    assert ei.value.code == code, repr(ei.value)
    return ei.value


async def test_http_server(sock_path):
    async def script(s, r, wr):
        await r.read(100)
        wr.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await wr.drain()

    async with FakeServer(sock_path, script) as addr:
        e = await expect_failure(addr, "unavailable", call=False)
        assert isinstance(e, warren.ProtocolError) and e.kind == "not_warren"


async def test_bad_preface_version_and_settings(sock_path):
    prefaces = {
        "bad_version": b"\xf0WRN\x02\x00",
        "bad_setting": b"\xf0WRN\x01\x01" + struct.pack(">HI", 1, 100),
        "bad_preface": b"\xf0WRN\x01\x11" + bytes(17 * 6),
        "not_warren": b"\x16\x03\x01\x00\xa5\x01",
    }
    for kind, p in prefaces.items():
        async def script(s, r, wr, p=p):
            await r.read(100)
            wr.write(p)
            await wr.drain()
            await asyncio.sleep(5)

        async with FakeServer(sock_path, script) as addr:
            e = await expect_failure(addr, "unavailable" if kind in ("bad_version", "not_warren") else "internal", call=False)
            assert isinstance(e, warren.ProtocolError) and e.kind == kind, repr(e)


async def test_silent_server_hits_handshake_timeout(sock_path):
    async def script(s, r, wr):
        await asyncio.sleep(10)

    async with FakeServer(sock_path, script) as addr:
        e = await expect_failure(addr, "unavailable", call=False)
        assert "preface" in e.message


async def test_server_closes_during_handshake(sock_path):
    async def script(s, r, wr):
        await r.read(6)
        wr.write(b"\xf0WR")
        await wr.drain()

    async with FakeServer(sock_path, script) as addr:
        await expect_failure(addr, "unavailable", call=False)


def forged(name: str):
    """Scripts answering the first call with something malformed."""
    def reply(sid: int) -> bytes:
        return {
            # A frame length far over MaxFrameSize: refused from the header.
            "frame_too_large": struct.pack(">IIBB", 0xFFFFFFF0, sid, w.DATA, 0),
            "unknown_type": frame(sid, 0x9, 0, b"x"),
            "data_on_stream_0": frame(0, w.DATA, 0, b"x"),
            "data_on_unopened_stream": frame(sid + 100, w.DATA, 0, b"x"),
            "window_overflow": frame(sid, w.WINDOW, 0, struct.pack(">I", 0x7FFFFFFF)),
            "window_zero": frame(sid, w.WINDOW, 0, struct.pack(">I", 0)),
            "bad_trailer": frame(sid, w.TRAILERS, w.FLAG_END, b"\x05\x7f"),
            "bad_headers_metadata": frame(sid, w.HEADERS, 0, b"\x05\x01a"),
            "chunk_past_total": frame(sid, w.DATA, w.FLAG_MORE, struct.pack(">I", 8) + b"abcd") + frame(sid, w.DATA, 0, b"efghij"),
            "chunk_short": frame(sid, w.DATA, w.FLAG_MORE, struct.pack(">I", 8) + b"abcd") + frame(sid, w.DATA, 0, b"ef"),
            "trailers_mid_message": frame(sid, w.DATA, w.FLAG_MORE, struct.pack(">I", 8) + b"abcd") + frame(sid, w.TRAILERS, w.FLAG_END),
            "more_and_end": frame(sid, w.DATA, w.FLAG_MORE | w.FLAG_END, b"abcdef"),
            "data_over_window": frame(sid, w.DATA, 0, bytes(100 << 10)),
            "ping_short": frame(0, w.PING, 0, b"1234"),
        }[name]

    async def script(s, r, wr):
        await s.handshake(r, wr)
        f = await s.read_until(r, w.HEADERS)
        wr.write(reply(f.stream))
        await wr.drain()
        await asyncio.sleep(5)

    return script


@pytest.mark.parametrize("name", [
    "frame_too_large", "unknown_type", "data_on_stream_0", "data_on_unopened_stream", "window_overflow",
    "window_zero", "bad_trailer", "bad_headers_metadata", "chunk_past_total", "chunk_short",
    "trailers_mid_message", "more_and_end", "data_over_window", "ping_short",
])
async def test_forged_frames(sock_path, name):
    async with FakeServer(sock_path, forged(name)) as addr:
        # The client grants 64 KiB per stream: one DATA frame of 100 KiB overflows it.
        e = await expect_failure(addr, "internal", initial_window=64 << 10)
        assert isinstance(e, warren.ProtocolError)


async def test_connection_error_sends_goaway(sock_path):
    got: list[w.Frame] = []

    async def script(s, r, wr):
        await s.handshake(r, wr)
        f = await s.read_until(r, w.HEADERS)
        wr.write(frame(f.stream, 0x9, 0))
        await wr.drain()
        got.append(await s.read_until(r, w.GOAWAY))

    async with FakeServer(sock_path, script) as addr:
        await expect_failure(addr, "internal")
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.01)
    last, code, msg = w.decode_goaway(got[0].payload)
    assert code == 13 and "frame type" in msg


async def test_forged_message_length_over_limit_allocates_nothing(sock_path):
    """A chunked reply announcing 1 GiB is refused from its first frame: the
    call fails with resource_exhausted, CANCEL goes out, and the connection
    keeps working."""
    cancels: list[int] = []

    async def script(s, r, wr):
        await s.handshake(r, wr)
        f = await s.read_until(r, w.HEADERS)
        wr.write(frame(f.stream, w.DATA, w.FLAG_MORE, struct.pack(">I", 1 << 30) + b"abcd"))
        await wr.drain()
        c = await s.read_until(r, w.CANCEL)
        cancels.append(c.stream)
        # The rest of the message still arrives; it is dropped and credited.
        wr.write(frame(f.stream, w.DATA, w.FLAG_MORE, b"more"))
        f2 = await s.read_until(r, w.HEADERS)
        wr.write(frame(f2.stream, w.DATA, 0, b"2") + frame(f2.stream, w.TRAILERS, w.FLAG_END))
        await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr) as c:
            with pytest.raises(warren.StatusError) as ei:
                await asyncio.wait_for(c.call("X.Y", 1), 5)
            assert ei.value.code == "resource_exhausted"
            assert await asyncio.wait_for(c.call("X.Y", 1), 5) == 2
    assert cancels == [1]


async def test_single_frame_message_over_limit(sock_path):
    """A reply in one frame, over the client's MaxMessageSize but not its
    MaxFrameSize, fails its call with resource_exhausted (CANCEL goes out);
    the connection keeps working."""
    cancels: list[int] = []

    async def script(s, r, wr):
        await s.handshake(r, wr)
        f = await s.read_until(r, w.HEADERS)
        wr.write(frame(f.stream, w.DATA, 0, b'"' + b"x" * 2000 + b'"'))
        await wr.drain()
        cancels.append((await s.read_until(r, w.CANCEL)).stream)
        f2 = await s.read_until(r, w.HEADERS)
        wr.write(frame(f2.stream, w.DATA, 0, b"2") + frame(f2.stream, w.TRAILERS, w.FLAG_END))
        await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr, max_message_size=1000) as c:
            with pytest.raises(warren.StatusError) as ei:
                await asyncio.wait_for(c.call("X.Y", 1), 5)
            assert ei.value.code == "resource_exhausted" and "MaxMessageSize" in ei.value.message
            assert await asyncio.wait_for(c.call("X.Y", 1), 5) == 2
    assert cancels == [1]


async def test_server_stream_opened_by_server_is_refused(sock_path):
    answers: list[w.Frame] = []

    async def script(s, r, wr):
        await s.handshake(r, wr)
        wr.write(frame(2, w.HEADERS, 0, w.encode_call_header("Client.Hello", 1)))
        await wr.drain()
        answers.append(await s.read_until(r, w.TRAILERS))
        f = await s.read_until(r, w.HEADERS)
        wr.write(frame(f.stream, w.DATA, 0, b'"ok"') + frame(f.stream, w.TRAILERS, w.FLAG_END))
        await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr) as c:
            await asyncio.sleep(0.05)
            assert await asyncio.wait_for(c.call("X.Y", 1), 5) == "ok"
    assert answers[0].stream == 2 and w.decode_trailer(answers[0].payload).code == 12


async def test_ping_answered_and_goaway(sock_path):
    pongs: list[w.Frame] = []
    conns = 0

    async def script(s, r, wr):
        nonlocal conns
        conns += 1
        await s.handshake(r, wr)
        if conns > 1:
            # The connection dialed after the GOAWAY.
            f = await s.read_until(r, w.HEADERS)
            wr.write(frame(f.stream, w.DATA, 0, b"2") + frame(f.stream, w.TRAILERS, w.FLAG_END))
            await wr.drain()
            await asyncio.sleep(5)
            return
        wr.write(frame(0, w.PING, 0, b"12345678"))
        await wr.drain()
        pongs.append(await s.read_until(r, w.PING))
        f1 = await s.read_until(r, w.HEADERS)
        f2 = await s.read_until(r, w.HEADERS)
        # Stream f1 will be answered, f2 was not processed.
        wr.write(frame(0, w.GOAWAY, 0, w.encode_goaway(f1.stream, 0, "maintenance")))
        await wr.drain()
        await asyncio.sleep(0.1)
        wr.write(frame(f1.stream, w.DATA, 0, b"1") + frame(f1.stream, w.TRAILERS, w.FLAG_END))
        await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr) as c:
            t1 = asyncio.ensure_future(c.call("X.A", 1))
            await asyncio.sleep(0.05)
            t2 = asyncio.ensure_future(c.call("X.B", 1))
            # X.B was refused above the GOAWAY's last stream id, never
            # processed: it is sent again on a new connection, as in Go.
            assert await asyncio.wait_for(t2, 5) == 2
            assert await asyncio.wait_for(t1, 5) == 1
            assert conns == 2
    assert pongs[0].flags & w.FLAG_ACK and pongs[0].payload == b"12345678"


async def test_server_killed_mid_call(start_server):
    """Every pending call fails promptly with unavailable."""
    srv = start_server("unix")
    async with warren.connect(srv.address) as c:
        calls = [asyncio.ensure_future(c.call("Test.Sleep", {"ms": 30000})) for _ in range(50)]
        streams = []

        async def read_stream():
            async for _ in c.stream("Test.Count", {"n": 1000000, "delay_ms": 5}):
                pass

        streams = [asyncio.ensure_future(read_stream()) for _ in range(5)]
        for _ in range(200):
            if (await c.call("Test.Pending"))["pending"] == 50:
                break
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        srv.kill()
        results = await asyncio.wait_for(asyncio.gather(*calls, *streams, return_exceptions=True), 5)
        assert time.monotonic() - t0 < 1
        assert all(isinstance(r, warren.StatusError) and r.code == "unavailable" for r in results), results
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Echo", 1)
        assert ei.value.code == "unavailable"


async def test_connect_refused(workdir):
    with pytest.raises(warren.StatusError) as ei:
        await warren.connect(f"unix://{workdir}/nobody-here.sock")
    assert ei.value.code == "unavailable"


@pytest.mark.parametrize("kind", ["unix", "abstract"])
async def test_server_uid(start_server, kind):
    srv = start_server(kind)
    async with warren.connect(srv.address, server_uid="same") as c:
        assert c.peer is not None and c.peer.uid == os.geteuid() and c.peer.pid == srv.proc.pid
        assert await c.call("Test.Echo", 1) == 1
    async with warren.connect(srv.address, server_uid=os.geteuid()) as c:
        assert await c.call("Test.Echo", 1) == 1
    with pytest.raises(warren.StatusError) as ei:
        await warren.connect(srv.address, server_uid=os.geteuid() + 4242)
    assert ei.value.code == "permission_denied" and "uid" in ei.value.message


async def test_server_uid_needs_a_unix_socket():
    with pytest.raises(ValueError):
        await warren.connect("tcp://127.0.0.1:1", server_uid=0)


async def test_max_streams_is_respected(sock_path):
    """A server announcing MaxStreams 2 never sees a third open stream: the
    other calls wait for a slot."""
    most = []

    async def script(s, r, wr):
        await s.handshake(r, wr, w.encode_preface(w.Settings(max_streams=2)))
        open_ids: list[int] = []
        served = 0
        while served < 10:
            f = await s.read_frame(r)
            if f.type == w.HEADERS:
                open_ids.append(f.stream)
                most.append(len(open_ids))
                if len(open_ids) == 2:
                    await asyncio.sleep(0.02)
                    for sid in open_ids:
                        wr.write(frame(sid, w.DATA, 0, str(sid).encode()) + frame(sid, w.TRAILERS, w.FLAG_END))
                        served += 1
                    open_ids.clear()
                    await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr) as c:
            got = await asyncio.wait_for(asyncio.gather(*(c.call("X.Y", i) for i in range(10))), 5)
    assert got == [2 * i + 1 for i in range(10)]
    assert max(most) == 2


async def test_graceful_shutdown_goaway(start_server):
    """The Go server's graceful shutdown: its GOAWAY lets the call in
    progress finish; new calls fail with unavailable."""
    import signal

    srv = start_server("unix")
    async with warren.connect(srv.address) as c:
        slow = asyncio.ensure_future(c.call("Test.Sleep", {"ms": 400}))
        for _ in range(100):
            if (await c.call("Test.Pending"))["pending"] == 1:
                break
            await asyncio.sleep(0.01)
        srv.proc.send_signal(signal.SIGTERM)
        for _ in range(200):
            if c._conn.goaway is not None or c.closed:
                break
            await asyncio.sleep(0.01)
        assert c._conn.goaway is not None
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Echo", 1)
        assert ei.value.code == "unavailable"
        assert await asyncio.wait_for(slow, 5) == {"slept": 400}


@pytest.mark.parametrize("kind,flooding", [("unix", "ping"), ("tls", "ping"), ("unix", "headers")])
async def test_ping_flood_from_a_server_that_never_reads(sock_path, tls_files, kind, flooding):
    """A server that floods PINGs and never reads what it is sent: the
    client's unwritten output stays bounded, because the client stops
    reading from the server once its write buffer is over its limit; the
    PINGs the server could not write stay on its side. The same for a
    server opening streams, each refused with a TRAILERS frame."""
    flood = 64 << 20  # bytes of PING frames the server tries to write
    written = [0]
    stopped = asyncio.Event()  # the flood was written, or stalled

    async def script(s, r, wr):
        await s.handshake(r, wr)
        ping = frame(0, w.PING, 0, b"12345678") * ((64 << 10) // 18)
        sid = 0
        hdr = w.encode_call_header("A.B", 1)
        while written[0] < flood:
            if flooding == "ping":
                chunk = ping
            else:
                chunk = b"".join(frame(sid + 2 * i, w.HEADERS, 0, hdr) for i in range(1, 4001))
                sid += 8000
            wr.write(chunk)
            try:
                await asyncio.wait_for(wr.drain(), 0.5)
            except asyncio.TimeoutError:
                break
            written[0] += len(chunk)
        stopped.set()
        await asyncio.sleep(30)  # never reads

    tls = tls_files if kind == "tls" else None
    async with FakeServer(sock_path, script, tls) as addr:
        c = await warren.connect(addr, ca=tls.ca if tls else None)
        try:
            await asyncio.wait_for(stopped.wait(), 60)
            conn = c._conn
            buffered = conn.transport.get_write_buffer_size()
            limit = conn.backlog_limit()
            assert limit == warren._conn.BACKLOG_MARGIN
            # The limit, plus at most one read's worth of answers past it
            # (a TRAILERS refusing a stream is 3 times its HEADERS).
            assert limit // 2 < buffered < limit + (1 << 20), f"{buffered} bytes buffered"
            assert conn.read_paused
            # Stalled: the kernel's buffers (and TLS's) hold what it wrote.
            assert written[0] < flood, f"the server wrote {written[0]} bytes"
        finally:
            t0 = time.monotonic()
            await c.close()
            # The socket is dropped though the server never reads.
            assert time.monotonic() - t0 < 5
        assert conn.transport.is_closing()


async def test_mode_setting_is_ignored(sock_path):
    """A session ignores the Mode setting as it ignores any setting it does
    not know (PROTOCOL.md, The Mode setting)."""

    async def script(s, r, wr):
        await s.handshake(r, wr, b"\xf0WRN\x01\x02" + struct.pack(">HI", 16, 1) + struct.pack(">HI", 99, 7))
        f = await s.read_until(r, w.HEADERS)
        wr.write(frame(f.stream, w.DATA, 0, b'"ok"') + frame(f.stream, w.TRAILERS, w.FLAG_END))
        await wr.drain()
        await asyncio.sleep(5)

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr, handshake_timeout=2) as c:
            assert c.server_settings.mode == 1
            assert await asyncio.wait_for(c.call("X.Y", 1), 5) == "ok"


async def test_ping_flood_over_websocket():
    """The same over ws://: the WebSocket transport counts what it has not
    sent and stops delivering messages while the client's reading is
    paused."""
    from websockets.asyncio.server import serve

    written = [0]
    stopped = asyncio.Event()
    finished = asyncio.Event()

    async def handler(ws):
        await ws.recv()  # the client's preface
        await ws.send(w.encode_preface())
        chunk = frame(0, w.PING, 0, b"12345678") * ((64 << 10) // 18)
        try:
            while written[0] < (64 << 20):
                await asyncio.wait_for(ws.send(chunk), 0.5)
                written[0] += len(chunk)
        except asyncio.TimeoutError:
            pass
        stopped.set()
        await finished.wait()  # reads nothing more (its queue holds 4 messages)

    async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None, max_queue=4, close_timeout=0.5) as srv:
        port = srv.sockets[0].getsockname()[1]
        c = await warren.connect(f"ws://127.0.0.1:{port}/")
        try:
            await asyncio.wait_for(stopped.wait(), 60)
            conn = c._conn
            buffered = conn.transport.get_write_buffer_size()
            assert buffered < conn.backlog_limit() + (1 << 20), f"{buffered} bytes buffered"
            assert conn.read_paused
            # Stalled: the kernel's buffers hold what the server wrote.
            assert written[0] < (64 << 20), f"the server wrote {written[0]} bytes"
        finally:
            t0 = time.monotonic()
            await c.close()
            assert time.monotonic() - t0 < 5
            finished.set()


@pytest.mark.parametrize("scheme", ["tls", "ws"])
async def test_silent_listener_hits_handshake_timeout(scheme):
    """A listener that accepts and says nothing (no TLS handshake, no
    WebSocket upgrade): connect fails with unavailable after
    handshake_timeout, not with a bare TimeoutError."""
    conns = []

    async def handle(r, wr):
        conns.append(wr)
        await asyncio.sleep(10)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        t0 = time.monotonic()
        with pytest.raises(warren.StatusError) as ei:
            await warren.connect(f"{scheme}://127.0.0.1:{port}", handshake_timeout=0.3)
        assert ei.value.code == "unavailable" and "within 0.3 s" in ei.value.message, ei.value
        assert time.monotonic() - t0 < 2
    finally:
        for wr in conns:
            wr.close()
        srv.close()
        await srv.wait_closed()

"""What the Python client does as the Go client does (issue 30, "Three
clients that behave as one"): tokens, deadlines that cover the whole call,
a unary call that ends without a reply, reconnection, the default address."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from conftest import Server
from test_hostile import FakeServer, frame, sock_path  # noqa: F401 (a fixture)

import warren
from warren import _wire as w

# --- tokens -----------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["tcp", "ws"])
async def test_token(warren_serve, scheme):
    path = "/warren" if scheme == "ws" else ""
    srv = warren_serve("--addr", f"{scheme}://127.0.0.1:0{path}", "--token", "s3cret")
    addr = srv.address
    async with warren.connect(addr, token="s3cret") as c:
        await c.call("Counter.Set", {"name": "t", "value": 5})
        assert await c.call("Counter.Get", {"name": "t"}) == {"name": "t", "value": "5"}
        async for msg in c.stream("Counter.Watch", {"name": "t"}):
            assert msg["value"] == "5"
            break
    # Without it, or with another, every call is refused.
    for opts in ({}, {"token": "wrong"}):
        with pytest.raises(warren.StatusError) as ei:
            async with warren.connect(addr, handshake_timeout=3, **opts) as c:
                await c.call("Counter.Get", {"name": "t"})
        assert ei.value.code in ("unauthenticated", "unavailable"), ei.value
        if scheme == "tcp":
            assert ei.value.code == "unauthenticated"
    if scheme == "ws":
        # A token given as the WebSocket header serves the calls too.
        async with warren.connect(addr, ws_headers={"Authorization": "Bearer s3cret"}) as c:
            assert await c.call("Counter.Get", {"name": "t"}) == {"name": "t", "value": "5"}


def test_token_sync(warren_serve):
    srv = warren_serve("--addr", "tcp://127.0.0.1:0", "--token", "s3cret")
    with warren.connect_sync(srv.address, token="s3cret") as c:
        assert c.call("Counter.Set", {"name": "s", "value": 2}) == {"name": "s", "value": "2"}


def test_token_checked():
    for bad in ("", "a\r\nb"):
        with pytest.raises(ValueError):
            warren.connect_sync("tcp://127.0.0.1:1", token=bad)


# --- deadlines cover the whole call -----------------------------------------


def _silent_server(preface: bytes):
    """A server script that announces preface and never answers a call."""

    async def script(s, r, wr):
        await s.handshake(r, wr, preface)
        while True:
            await s.read_frame(r)

    return script


async def test_timeout_covers_waiting_for_a_stream_slot(sock_path):  # noqa: F811
    one_stream = w.encode_preface(w.Settings(max_streams=1))
    async with FakeServer(sock_path, _silent_server(one_stream)) as addr:
        async with warren.connect(addr) as c:
            first = asyncio.ensure_future(c.call("X.Hold", 1))
            await asyncio.sleep(0.05)
            for call in (lambda: c.call("X.Y", 1, timeout=0.2), lambda: c.stream("X.S", 1, timeout=0.2).recv()):
                t0 = time.monotonic()
                with pytest.raises(warren.StatusError) as ei:
                    await asyncio.wait_for(call(), 5)
                assert ei.value.code == "deadline_exceeded", ei.value
                assert 0.15 < time.monotonic() - t0 < 2
            # The slot is still the first call's, and it passes on when that ends.
            assert c._conn.open == 1 and not first.done()
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            assert c._conn.open == 0


async def test_timeout_covers_waiting_for_credit(sock_path):  # noqa: F811
    small_window = w.encode_preface(w.Settings(initial_window=1024))
    async with FakeServer(sock_path, _silent_server(small_window)) as addr:
        async with warren.connect(addr) as c:
            t0 = time.monotonic()
            with pytest.raises(warren.StatusError) as ei:
                await asyncio.wait_for(c.call("X.Y", b"x" * 100_000, timeout=0.2), 5)
            assert ei.value.code == "deadline_exceeded", ei.value
            assert 0.15 < time.monotonic() - t0 < 2
            assert c._conn.open == 0


def test_timeout_covers_waiting_sync(sock_path):  # noqa: F811
    small_window = w.encode_preface(w.Settings(initial_window=1024))

    async def run() -> None:
        async with FakeServer(sock_path, _silent_server(small_window)) as addr:
            await asyncio.to_thread(blocking, addr)

    def blocking(addr: str) -> None:
        with warren.connect_sync(addr) as c:
            with pytest.raises(warren.StatusError) as ei:
                c.call("X.Y", b"x" * 100_000, timeout=0.2)
            assert ei.value.code == "deadline_exceeded"

    asyncio.run(run())


# --- a unary call that ends without a reply ---------------------------------


async def test_unary_without_a_reply(sock_path):  # noqa: F811
    async def script(s, r, wr):
        await s.handshake(r, wr)
        while True:
            f = await s.read_until(r, w.HEADERS)
            wr.write(frame(f.stream, w.TRAILERS, w.FLAG_END))
            await wr.drain()

    async with FakeServer(sock_path, script) as addr:
        async with warren.connect(addr) as c:
            with pytest.raises(warren.StatusError) as ei:
                await c.call("X.Y", 1)
            # As the Go client: rpc/client.go.
            assert (ei.value.code, ei.value.message) == ("internal", "X.Y: no reply message")
            with pytest.raises(warren.StatusError) as ei:
                async with c.client_stream("X.Z") as s:
                    await s.response()
            assert (ei.value.code, ei.value.message) == ("internal", "X.Z: no reply message")


# --- reconnection -----------------------------------------------------------


async def test_reconnects_after_server_restart(server_bin, workdir):
    addr = f"unix://{workdir}/restart-{os.urandom(3).hex()}.sock"
    srv = Server(server_bin, addr)
    try:
        async with warren.connect(addr) as c:
            assert await c.call("Test.Echo", 1) == 1
            pending = asyncio.ensure_future(c.call("Test.Sleep", {"ms": 30000}))
            stream = c.stream("Test.Count", {"n": 1000, "delay_ms": 20})
            assert await stream.recv() == {"i": 0}
            await asyncio.sleep(0.05)
            srv.kill()
            # Calls in flight fail with unavailable.
            for fut in (pending, stream.recv()):
                with pytest.raises(warren.StatusError) as ei:
                    await asyncio.wait_for(fut, 5)
                assert ei.value.code == "unavailable"
            # No server: the next call dials and fails; the one after it,
            # within the backoff, fails at once with the same error.
            with pytest.raises(warren.StatusError) as ei:
                await c.call("Test.Echo", 1)
            assert ei.value.code == "unavailable"
            t0 = time.monotonic()
            with pytest.raises(warren.StatusError) as ei2:
                await c.call("Test.Echo", 1)
            assert ei2.value.message == ei.value.message and time.monotonic() - t0 < 0.04
            srv = Server(server_bin, addr)
            await asyncio.sleep(0.2)  # past the first backoff (50 ms)
            assert await c.call("Test.Echo", 2) == 2
            assert not c.closed
            assert [m async for m in c.stream("Test.Count", {"n": 2})] == [{"i": 0}, {"i": 1}]
        # close() is final: no more dialing.
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Echo", 1)
        assert ei.value.code == "unavailable"
    finally:
        srv.stop()


def test_reconnects_sync(server_bin, workdir):
    addr = f"unix://{workdir}/restart-{os.urandom(3).hex()}.sock"
    srv = Server(server_bin, addr)
    try:
        with warren.connect_sync(addr) as c:
            assert c.call("Test.Echo", 1) == 1
            srv.stop()
            srv = Server(server_bin, addr)
            deadline = time.monotonic() + 5
            while True:
                try:
                    assert c.call("Test.Echo", 3) == 3
                    break
                except warren.StatusError as e:
                    assert e.code == "unavailable"
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
    finally:
        srv.stop()


# --- the default address ----------------------------------------------------


def test_default_address(monkeypatch, tmp_path):
    uid = os.geteuid()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert warren.default_address() == f"unix://{tmp_path}/warren/warren.sock"
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    monkeypatch.setenv("TMPDIR", str(tmp_path) + "/")
    assert warren.default_address() == f"unix://{tmp_path}/warren-{uid}/warren.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.delenv("TMPDIR")
    assert warren.default_address() == f"unix:///tmp/warren-{uid}/warren.sock"


async def test_connect_default(warren_serve, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    srv = warren_serve(env={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert srv.address == f"unix://{tmp_path}/warren/warren.sock"
    async with warren.connect("default") as c:
        assert c.peer is not None and c.peer.uid == os.geteuid()
        assert str(c.address) == srv.address
        await c.call("Counter.Set", {"name": "d", "value": 1})
    with warren.connect_sync(warren.DEFAULT_ADDRESS) as sc:
        assert sc.call("Counter.Get", {"name": "d"}) == {"name": "d", "value": "1"}
    # The server must run as this user: another uid required fails.
    with pytest.raises(warren.StatusError) as ei:
        await warren.connect("default", server_uid=os.geteuid() + 1)
    assert ei.value.code == "permission_denied"

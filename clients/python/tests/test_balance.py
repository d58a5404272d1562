"""Several servers behind one client (issue 33): an address list or a
dns:/// name, round robin, a server that leaves gets no new calls, and calls
never processed are sent again elsewhere."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

import warren
from conftest import Server


class Recording:
    """A test server recording Test.Record ids; ran() stops it (SIGTERM) and reads them."""

    def __init__(self, server_bin: Path, workdir: Path, name: str, addr: str | None = None) -> None:
        self.file = workdir / f"{name}-{os.getpid()}.json"
        addr = addr or f"unix://{workdir}/{name}-{os.getpid()}.sock"
        self.server = Server(server_bin, "", args=[str(server_bin), "-addr", addr, "-stdin", "-record", str(self.file), "-grace", "5s"])
        self.address = self.server.address

    async def ran(self) -> dict[str, int]:
        p = self.server.proc
        p.send_signal(signal.SIGTERM)
        code = await asyncio.get_running_loop().run_in_executor(None, p.wait, 10)
        self.server.stop()
        assert code == 0
        m: dict[str, int] = json.loads(self.file.read_text())
        self.file.unlink()
        return m


async def record(c: warren.Client, cid: str) -> None:
    assert await c.call("Test.Record", cid.encode(), codec="raw", timeout=10) == cid.encode()


async def test_address_list_round_robin(server_bin: Path, workdir: Path) -> None:
    srvs = [Recording(server_bin, workdir, f"rr-{n}") for n in "abc"]
    try:
        async with warren.connect(",".join(s.address for s in srvs)) as c:
            assert [str(a) for a in c.addresses] == [s.address for s in srvs]
            for i in range(30):
                await record(c, f"rr-{i}")
        assert [len(await s.ran()) for s in srvs] == [10, 10, 10]
    finally:
        for s in srvs:
            s.server.stop()


async def test_server_leaving_gets_no_new_calls(server_bin: Path, workdir: Path) -> None:
    """One of three servers drains (SIGTERM) under load: no call fails,
    none runs twice, and calls go on on the other two."""
    srvs = [Recording(server_bin, workdir, f"leave-{n}") for n in "abc"]
    try:
        ok: list[str] = []
        stop = False
        async with warren.connect(",".join(s.address for s in srvs)) as c:
            n = 0

            async def caller(w: int) -> None:
                nonlocal n
                while not stop:
                    cid = f"w{w}-{n}"
                    n += 1
                    await record(c, cid)  # raises on any failure
                    ok.append(cid)

            tasks = [asyncio.ensure_future(caller(w)) for w in range(8)]
            await asyncio.sleep(0.1)
            ran_b = await srvs[1].ran()
            before = len(ok)
            await asyncio.sleep(0.2)
            stop = True
            await asyncio.gather(*tasks)
            assert len(ok) > before
        ran = [await srvs[0].ran(), ran_b, await srvs[2].ran()]
        for cid in ok:
            assert sum(m.get(cid, 0) for m in ran) == 1, cid
        assert sum(len(m) for m in ran) == len(ok)
    finally:
        for s in srvs:
            s.server.stop()


async def test_dns_target(server_bin: Path, workdir: Path) -> None:
    srv = Recording(server_bin, workdir, "dns", "tcp://127.0.0.1:0")
    try:
        port = srv.address.rsplit(":", 1)[1]
        async with warren.connect(f"dns:///localhost:{port}") as c:
            assert f"tcp://127.0.0.1:{port}" in [str(a) for a in c.addresses]
            await record(c, "dns-1")
        assert await srv.ran() == {"dns-1": 1}
    finally:
        srv.server.stop()


async def test_bad_targets() -> None:
    with pytest.raises(ValueError, match="dns:///HOST:PORT"):
        await warren.connect("dns:///nohost")
    with pytest.raises(ValueError, match="entry 2 is empty"):
        await warren.connect("tcp://127.0.0.1:1,,tcp://127.0.0.1:2")
    with pytest.raises(ValueError, match="stands alone"):
        await warren.connect("tcp://127.0.0.1:1,dns:///a:1")


def test_parse_target() -> None:
    from warren._balance import parse_target

    addrs, dns = parse_target("unix:///tmp/a,b.sock")
    assert [str(a) for a in addrs] == ["unix:///tmp/a,b.sock"] and dns is None
    addrs, dns = parse_target("tcp://127.0.0.1:1, tcp://127.0.0.1:2,tcp://127.0.0.1:1")
    assert [str(a) for a in addrs] == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    assert parse_target("dns:///svc.local:7000") == ([], ("svc.local", 7000))

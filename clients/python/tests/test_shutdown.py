"""Shutdown under load (issue 29; the Go version is rpc's
TestShutdownUnderLoad): the test server gets SIGTERM while this client keeps
calls in flight. Every call ends either completed (its handler ran once) or
refused as never processed (StatusError.not_processed, its handler never
ran): never both, never neither, and no connection reset."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from pathlib import Path

import warren
from conftest import Server

# 30 rounds unless WARREN_DRAIN_ROUNDS says otherwise (with 30 in the TypeScript
# suite and Go's, CI makes at least 100 across the three clients).
ROUNDS = int(os.environ.get("WARREN_DRAIN_ROUNDS", "30"))
CALLERS = 8


async def _round(server_bin: Path, workdir: Path, n: int) -> tuple[int, int]:
    record = workdir / f"drain-{os.getpid()}-{n}.json"
    srv = Server(server_bin, "", args=[str(server_bin), "-addr", f"unix://{workdir}/drain-{os.getpid()}-{n}.sock", "-stdin", "-record", str(record), "-grace", "5s"])
    outcomes: list[tuple[str, BaseException | None]] = []
    try:
        async with warren.connect(srv.address, codec="raw") as c:
            started = asyncio.Event()
            first = 0

            async def caller(w: int) -> None:
                nonlocal first
                seq = 0
                while True:
                    cid = f"{n}-{w}-{seq}"
                    seq += 1
                    try:
                        got = await c.call("Test.Record", cid.encode(), timeout=10)
                        err: BaseException | None = None if got == cid.encode() else AssertionError(f"reply {got!r} to {cid}")
                    except warren.StatusError as e:
                        err = e
                    outcomes.append((cid, err))
                    if seq == 1:
                        first += 1
                        if first == CALLERS:
                            started.set()
                    if err is not None:
                        return  # the server is gone

            tasks = [asyncio.ensure_future(caller(w)) for w in range(CALLERS)]
            await asyncio.wait_for(started.wait(), 10)
            await asyncio.sleep(random.uniform(0, 0.003))
            srv.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
        assert srv.proc.wait(10) == 0
    finally:
        srv.stop()
    ran: dict[str, int] = json.loads(record.read_text())
    record.unlink()
    completed = refused = 0
    for cid, err in outcomes:
        times = ran.get(cid, 0)
        assert times <= 1, f"round {n}: call {cid} ran {times} times"
        if err is None:
            assert times == 1, f"round {n}: call {cid} completed but never ran"
            completed += 1
            continue
        assert times == 0, f"round {n}: call {cid} ran, but its caller was told {err!r}"
        assert isinstance(err, warren.StatusError) and err.code == "unavailable" and err.not_processed, (
            f"round {n}: call {cid} failed as it may have run: {err!r}"
        )
        assert "reset" not in err.message.lower(), f"round {n}: {err!r}"
        refused += 1
    return completed, refused


async def test_shutdown_under_load(server_bin: Path, workdir: Path) -> None:
    completed = refused = 0
    for n in range(ROUNDS):
        c, r = await _round(server_bin, workdir, n)
        completed += c
        refused += r
    print(f"{ROUNDS} rounds: {completed} calls completed, {refused} refused as never processed")
    assert completed > 0 and refused >= ROUNDS * CALLERS

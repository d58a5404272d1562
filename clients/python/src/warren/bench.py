"""Calls per second from Python: warren's client calling the Go test server
(Test.EchoRaw) against grpcio's asyncio client calling gRPC-Go's echo
(bench/cmd/grpcecho), both over a unix socket, N concurrent tasks on one
connection, in the same run.

    python -m warren.bench [--duration 3] [--concurrency 16] [--size 1024] [--repo PATH]

It builds clients/testserver and bench/cmd/grpcecho with the go command from
the repository (found from the current directory, or --repo), and needs
grpcio (pip install grpcio) for the comparison; --only warren runs without
it.

    python -m warren.bench --codecs [--size 1024]

compares the codecs instead, by name with JSON against the generated typed
clients (clients/python/gen) with protobuf binary: `warren serve`'s
Counter.Set with a name of --size bytes (at most 256, the limit of a
counter name), and the test server's warren.test.v1.Everything.Echo with a
message of mixed fields (1,019 bytes in protobuf binary) and with one
string of --size bytes. It needs the protobuf package.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

import warren


def find_repo(start: Path) -> Path | None:
    for d in [start, *start.parents]:
        gm = d / "go.mod"
        if gm.exists() and "module github.com/warrenipc/warren\n" in gm.read_text():
            return d
    return None


class Proc:
    def __init__(self, args: list[str]) -> None:
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"{args[0]} did not start: {line!r}")

    def stop(self) -> None:
        for f in (self.p.stdin, self.p.stdout):
            if f is not None:
                f.close()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


async def drive(call: Callable[[], Awaitable[Any]], concurrency: int, duration: float, warmup: float) -> tuple[int, float, list[int]]:
    """Runs call in concurrency tasks: warmup, then duration seconds
    measured. Returns (calls, seconds, latencies in ns)."""
    lat: list[int] = []
    state = {"measure": False, "stop": False}
    pc = time.perf_counter_ns

    async def worker() -> None:
        rec = lat.append
        while not state["stop"]:
            t0 = pc()
            await call()
            if state["measure"]:
                rec(pc() - t0)

    tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    await asyncio.sleep(warmup)
    state["measure"] = True
    t0 = time.perf_counter()
    await asyncio.sleep(duration)
    state["stop"] = True
    state["measure"] = False
    elapsed = time.perf_counter() - t0
    n = len(lat)
    await asyncio.gather(*tasks)
    return n, elapsed, lat


async def run_warren(address: str, payload: bytes, concurrency: int, duration: float, warmup: float) -> tuple[int, float, list[int]]:
    async with warren.connect(address) as c:
        assert await c.call("Test.EchoRaw", payload) == payload

        async def call() -> None:
            await c.call("Test.EchoRaw", payload)

        return await drive(call, concurrency, duration, warmup)


def mixed_message(gen: Path) -> Any:
    """A warren.test.v1.All of mixed fields, 1,019 bytes in protobuf binary."""
    sys.path.insert(0, str(gen))
    import everything_pb2  # type: ignore[import-not-found,unused-ignore]

    m = everything_pb2.All(
        int32s=123456, int64s=-1234567890123456789, uint64s=18446744073709551000, doubles=3.141592653589793,
        strings="a mixed message", kind=everything_pb2.KIND_TWO, bools=True,
        int64_list=[i * 987654321987654 for i in range(32)], double_list=[i / 7 for i in range(32)],
        string_list=[f"item-{i}-abcdefghij" for i in range(8)],
        inner_list=[everything_pb2.Inner(label=f"inner {i}", n=i << 40) for i in range(8)],
        string_to_int64={f"key{i}": i * 1000000000000 for i in range(8)},
    )
    m.timestamp.seconds, m.timestamp.nanos = 1700000000, 123456789
    return m


async def run_codec(address: str, case: str, gen: Path, size: int, concurrency: int, duration: float, warmup: float) -> tuple[int, float, list[int]]:
    """One of the codec cases: Counter.Set with a name of size bytes, or
    Everything.Echo with the mixed message; by name with JSON, or through
    the generated client with protobuf binary."""
    sys.path.insert(0, str(gen))
    async with warren.connect(address) as c:
        call: Callable[[], Awaitable[Any]]
        if case.startswith("set"):
            import counter_pb2  # type: ignore[import-not-found,unused-ignore]
            import counter_warren  # type: ignore[import-not-found,unused-ignore]

            name = "x" * min(size, 256)  # counter names are bounded at 256 bytes
            if case == "set-json":
                req = {"name": name, "value": 1}
                call = lambda: c.call("Counter.Set", req)  # noqa: E731
            else:
                call = functools.partial(counter_warren.CounterClient(c).set, counter_pb2.SetRequest(name=name, value=1))
        else:
            import everything_warren  # type: ignore[import-not-found,unused-ignore]
            from google.protobuf import json_format

            if case.startswith("str"):
                import everything_pb2  # type: ignore[import-not-found,unused-ignore]

                msg = everything_pb2.All(strings="x" * size)
            else:
                msg = mixed_message(gen)
            if case.endswith("json"):
                d = json_format.MessageToDict(msg)
                call = lambda: c.call("warren.test.v1.Everything.Echo", d)  # noqa: E731
            else:
                call = functools.partial(everything_warren.EverythingClient(c).echo, msg)
        await call()
        return await drive(call, concurrency, duration, warmup)


def bytes_value(payload: bytes) -> bytes:
    """payload as a google.protobuf.BytesValue (field 1, bytes)."""
    n = len(payload)
    v = bytearray()
    while n >= 0x80:
        v.append(n & 0x7F | 0x80)
        n >>= 7
    v.append(n)
    return b"\x0a" + bytes(v) + payload


async def run_grpc(path: str, payload: bytes, concurrency: int, duration: float, warmup: float) -> tuple[int, float, list[int]]:
    import grpc  # type: ignore[import-untyped,import-not-found,unused-ignore]

    req = bytes_value(payload)
    async with grpc.aio.insecure_channel(f"unix://{path}") as ch:
        echo = ch.unary_unary("/bench.Bench/Echo")  # bytes in, bytes out: no (de)serializer
        assert await echo(req) == req

        async def call() -> None:
            await echo(req)

        return await drive(call, concurrency, duration, warmup)


def pct(sorted_ns: list[int], p: float) -> float:
    if not sorted_ns:
        return float("nan")
    return sorted_ns[min(len(sorted_ns) - 1, int(p * len(sorted_ns)))] / 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m warren.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3.0, help="measured seconds per round and system")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds of warm-up before measuring")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, alternating the systems; the median round counts")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent tasks on one connection")
    ap.add_argument("--size", type=int, default=1024, help="request and reply size in bytes")
    ap.add_argument("--only", choices=["warren", "grpc"], help="run one system")
    ap.add_argument("--repo", type=Path, help="the warren repository (default: found from the current directory)")
    ap.add_argument("--profile", action="store_true", help="profile warren's client with cProfile and print the top functions")
    ap.add_argument("--codecs", action="store_true", help="compare JSON with the generated protobuf clients (Counter.Set, Everything.Echo)")
    a = ap.parse_args(argv)

    repo = a.repo or find_repo(Path.cwd()) or find_repo(Path(__file__).resolve())
    if repo is None:
        ap.error("cannot find the warren repository: run inside it or pass --repo")
    if shutil.which("go") is None:
        ap.error("the go command is needed to build the servers")
    systems = [a.only] if a.only else ["warren", "grpc"]
    payload = os.urandom(a.size)
    tmp = Path(tempfile.mkdtemp(prefix="warren-bench-"))
    procs: list[Proc] = []
    try:
        if a.codecs:
            return codecs(a, repo, tmp, procs)
        subprocess.run(["go", "build", "-o", str(tmp / "testserver"), "./clients/testserver"], cwd=repo, check=True)
        wsock = tmp / "warren.sock"
        procs.append(Proc([str(tmp / "testserver"), "-addr", f"unix://{wsock}", "-stdin"]))
        gsock = tmp / "grpc.sock"
        if "grpc" in systems:
            subprocess.run(["go", "build", "-o", str(tmp / "grpcecho"), "./cmd/grpcecho"], cwd=repo / "bench", check=True)
            procs.append(Proc([str(tmp / "grpcecho"), "-socket", str(gsock)]))

        if a.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            prof.enable()
            asyncio.run(run_warren(f"unix://{wsock}", payload, a.concurrency, a.duration, a.warmup))
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0

        results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in systems}
        for _ in range(a.rounds):
            for s in systems:
                if s == "warren":
                    n, secs, lat = asyncio.run(run_warren(f"unix://{wsock}", payload, a.concurrency, a.duration, a.warmup))
                else:
                    n, secs, lat = asyncio.run(run_grpc(str(gsock), payload, a.concurrency, a.duration, a.warmup))
                lat.sort()
                results[s].append((n / secs, pct(lat, 0.50), pct(lat, 0.99)))
        print(f"{a.size}-byte echo, {a.concurrency} concurrent tasks on one connection, unix socket, "
              f"{a.rounds} round(s) of {a.duration:g} s, median round; Python {sys.version.split()[0]}")
        print()
        print("| client -> server | calls/s | p50 µs | p99 µs |")
        print("|---|---:|---:|---:|")
        names = {"warren": "warren (Python) -> warren testserver (Go)", "grpc": "grpcio aio (Python) -> gRPC-Go"}
        med = {}
        for s in systems:
            rs = sorted(results[s])
            m = rs[len(rs) // 2]
            med[s] = m
            print(f"| {names[s]} | {m[0]:,.0f} | {m[1]:,.0f} | {m[2]:,.0f} |")
        if len(systems) == 2 and med["grpc"][0] > 0:
            print()
            print(f"warren / grpcio calls/s: {med['warren'][0] / med['grpc'][0]:.2f}x")
        return 0
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def codecs(a: argparse.Namespace, repo: Path, tmp: Path, procs: list[Proc]) -> int:
    subprocess.run(["go", "build", "-o", str(tmp / "warren"), "./cmd/warren"], cwd=repo, check=True)
    subprocess.run(["go", "build", "-o", str(tmp / "testserver"), "./clients/testserver"], cwd=repo, check=True)
    serve = f"unix://{tmp}/serve.sock"
    test = f"unix://{tmp}/test.sock"
    procs.append(Proc([str(tmp / "warren"), "serve", "--addr", serve]))
    procs.append(Proc([str(tmp / "testserver"), "-addr", test, "-stdin"]))
    gen = repo / "clients" / "python" / "gen"
    names = {
        "set-json": f"Counter.Set ({min(a.size, 256)}-byte name) by name, JSON",
        "set-proto": f"Counter.Set ({min(a.size, 256)}-byte name), generated client, protobuf",
        "echo-json": "Everything.Echo (1,019-byte mixed message) by name, JSON",
        "echo-proto": "Everything.Echo (1,019-byte mixed message), generated client, protobuf",
        "str-json": f"Everything.Echo (one {a.size}-byte string) by name, JSON",
        "str-proto": f"Everything.Echo (one {a.size}-byte string), generated client, protobuf",
    }
    results: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(a.rounds):
        for case in results:
            n, secs, _ = asyncio.run(run_codec(serve if case.startswith("set") else test, case, gen, a.size, a.concurrency, a.duration, a.warmup))
            results[case].append(n / secs)
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    print(f"{a.concurrency} concurrent tasks on one connection, unix socket, "
          f"{a.rounds} round(s) of {a.duration:g} s, median round; Python {sys.version.split()[0]}")
    print()
    print("| call | calls/s |")
    print("|---|---:|")
    for k, v in names.items():
        print(f"| {v} | {med[k]:,.0f} |")
    print()
    print(f"protobuf / JSON calls/s: Counter.Set {med['set-proto'] / med['set-json']:.2f}x, "
          f"Everything.Echo mixed {med['echo-proto'] / med['echo-json']:.2f}x, string {med['str-proto'] / med['str-json']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

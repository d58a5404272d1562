"""Uses generated clients (gen/) as a typed program would; test_typing checks
it with mypy --strict (it is not a test module: pytest does not collect it)."""

from __future__ import annotations

import counter_pb2 as cpb
import everything_pb2 as epb
from counter_warren import CounterClient, CounterSyncClient
from everything_warren import EverythingClient, EverythingSyncClient

import warren


async def main(address: str) -> None:
    async with warren.connect(address) as conn:
        counter = CounterClient(conn)
        e: cpb.Entry = await counter.get(cpb.GetRequest(name="a"), timeout=1.5, metadata={"k": "v"})
        n: int = e.value
        listed: cpb.ListReply = await counter.list(cpb.ListRequest())
        async for w in counter.watch(cpb.WatchRequest(name="a")):
            print(w.value + 1)
        print(n, listed.counters[0].name)
        await counter.get(cpb.SetRequest(name="a"))  # E: arg-type
        await counter.get({"name": "a"})  # E: arg-type
        wrong: cpb.ListReply = await counter.get(cpb.GetRequest(name="a"))  # E: assignment
        await counter.delete(cpb.GetRequest(name="a"))  # E: attr-defined
        await counter.get(cpb.GetRequest(name="a"), codec="json")  # E: call-arg
        print(wrong)

        ev = EverythingClient(conn)
        all_: epb.All = await ev.echo(epb.All(int64s=-1, kind=epb.KIND_MINUS))
        async with ev.collect() as cs:
            await cs.send(all_)
            await cs.send(epb.Inner())  # E: arg-type
            got: epb.AllList = await cs.response()
        async with ev.mirror() as bidi:
            await bidi.send(all_)
            back: epb.All = await bidi.recv()
            await bidi.close_send()
        print(got, back)


def blocking(address: str) -> None:
    with warren.connect_sync(address) as conn:
        counter = CounterSyncClient(conn)
        e: cpb.Entry = counter.inc(cpb.IncRequest(name="a", by=2))
        for w in counter.watch(cpb.WatchRequest(name="a")):
            print(w.name)
        ev = EverythingSyncClient(conn)
        with ev.collect() as cs:
            cs.send(epb.All())
            reply: epb.AllList = cs.response()
        bad: str = counter.get(cpb.GetRequest(name="a")).value  # E: assignment
        print(e, reply, bad)

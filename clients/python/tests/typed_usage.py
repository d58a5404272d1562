"""Uses the public API as a typed program would; test_typing checks it with
mypy --strict (it is not a test module: pytest does not collect it)."""

from __future__ import annotations

import asyncio

import warren


async def main(address: str) -> None:
    client: warren.Client = await warren.connect(address, server_uid=warren.SAME_USER, timeout_typo=1)  # E: call-arg
    await client.close()
    default: str = warren.default_address()
    async with warren.connect(warren.DEFAULT_ADDRESS, token="t", ws_headers={"X-A": "b"}) as d:
        print(default, await d.call("Counter.Get", {"name": "a"}))
    async with warren.connect(address, codec="json", max_message_size=8 << 20) as c:
        reply: warren.Reply[object] = await c.invoke("Test.Echo", {"a": 1}, metadata={"k": "v"}, timeout=1.5)
        print(reply.message, reply.header, reply.trailer)
        async for msg in c.stream("Test.Count", {"n": 2}):
            print(msg)
        call: warren.Call = c.bidi_stream("Test.Chat")
        async with call as s:
            await s.send(1)
            print(await s.recv())
            await s.close_send()
        rtt: float = await c.ping()
        print(rtt, c.peer, c.server_settings.max_message_size)
    try:
        await c.call("Test.Fail", timeout="soon")  # E: arg-type
    except warren.StatusError as e:
        code: str = e.code
        print(code, e.message, e.details, e.raw_details)


def blocking(address: str) -> None:
    with warren.connect_sync(address, token=None):
        pass
    with warren.connect_sync(address, max_mesage_size=1) as c:  # E: call-arg
        sc: warren.SyncCall = c.client_stream("Test.Sum")
        with sc:
            sc.send({"n": 1})
            print(sc.response())
        total = c.client_stream("Test.Sum", [{"n": 1}])
        with c.bidi_stream("Test.Chat", timeout=2) as s:
            s.send(1)
            print(s.recv(), [m for m in s], s.trailer)
        print(total, c.call("Test.Echo", 1, codec=warren.JSONCodec()), c.ping())


asyncio.run(main("unix:///run/app/app.sock"))

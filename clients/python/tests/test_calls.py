"""Every call kind against the Go test server, on every transport."""

from __future__ import annotations

import asyncio
import base64
import os
import time

import pytest

import warren

pytestmark = pytest.mark.asyncio


async def test_unary_json(target):
    async with warren.connect(target.address, **target.options) as c:
        assert await c.call("Test.Echo", {"a": [1, 2, {"b": None}], "s": "žluť"}) == {"a": [1, 2, {"b": None}], "s": "žluť"}
        assert await c.call("Test.Echo", "text") == "text"
        name = f"c-{target.kind}"
        # The counter speaks the protobuf JSON mapping: int64 values come back
        # as strings, a zero value is left out, a request may give int64 as a
        # number or a string, and unknown fields are discarded.
        assert await c.call("Counter.Set", {"name": name, "value": 41}) == {"name": name, "value": "41"}
        assert await c.call("Counter.Inc", {"name": name}) == {"name": name, "value": "42"}
        assert await c.call("Counter.Get", {"name": name}) == {"name": name, "value": "42"}
        assert await c.call("Counter.Inc", {"name": name, "by": "-42"}) == {"name": name}
        assert await c.call("Counter.Set", {"name": name, "value": 1, "bye": 3}) == {"name": name, "value": "1"}
        big = {"name": name, "value": str(2**63 - 1)}
        assert await c.call("Counter.Set", big) == big
        assert await c.call("Counter.Get", {"name": name}) == big


async def test_unary_raw_and_proto(target):
    from google.protobuf import wrappers_pb2

    async with warren.connect(target.address, **target.options) as c:
        assert await c.call("Test.EchoRaw", b"\x00\xffraw") == b"\x00\xffraw"
        assert await c.call("Test.EchoRaw", b"") == b""
        got = await c.call("Test.EchoProto", wrappers_pb2.BytesValue(value=b"pb"), response_type=wrappers_pb2.BytesValue)
        assert isinstance(got, wrappers_pb2.BytesValue) and got.value == b"pb"


async def test_errors(target):
    async with warren.connect(target.address, **target.options) as c:
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Fail", {"code": "permission_denied", "message": "no", "details": ['{"why":"x"}', "plain"]})
        e = ei.value
        assert (e.code, e.code_num, e.message) == ("permission_denied", 7, "no")
        assert e.details == [{"why": "x"}, b"plain"]
        assert e.raw_details == [b'{"why":"x"}', b"plain"]
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Counter.Get", {"name": "does-not-exist"})
        assert ei.value.code == "not_found"
        with pytest.raises(warren.StatusError) as ei:
            await c.call("No.Such", {})
        assert ei.value.code == "unimplemented"
        # The connection survives errors.
        assert await c.call("Test.Echo", 1) == 1


async def test_metadata(target):
    async with warren.connect(target.address, **target.options) as c:
        r = await c.invoke("Test.Metadata", {}, metadata={"k": "v", "multi": ["1", "2"]})
        assert r.message == {"metadata": {"k": ["v"], "multi": ["1", "2"]}}
        assert r.header == {"x-header": ["h"]}
        assert r.trailer == {"x-trailer": ["t"]}
        r = await c.invoke("Test.Metadata", {}, metadata=[("a", "1"), ("a", "2")])
        assert r.message == {"metadata": {"a": ["1", "2"]}}


async def test_server_stream(target):
    async with warren.connect(target.address, **target.options) as c:
        got = [m async for m in c.stream("Test.Count", {"n": 100})]
        assert got == [{"i": i} for i in range(100)]
        assert [m async for m in c.stream("Test.Count", {"n": 0})] == []


async def test_client_stream(target):
    async with warren.connect(target.address, **target.options) as c:
        async with c.client_stream("Test.Sum") as s:
            for i in range(1, 101):
                await s.send({"n": i})
            assert await s.response() == {"sum": 5050, "count": 100}
        async with c.client_stream("Test.Sum") as s:
            assert await s.response() == {"sum": 0, "count": 0}


async def test_bidi_stream(target):
    async with warren.connect(target.address, **target.options) as c:
        async with c.bidi_stream("Test.Chat") as s:
            for i in range(20):
                await s.send({"i": i, "pad": "x" * i})
                assert await s.recv() == {"i": i, "pad": "x" * i}
            for i in range(5):
                await s.send(i)
            await s.close_send()
            assert [m async for m in s] == list(range(5))


async def test_deadline(target):
    async with warren.connect(target.address, **target.options) as c:
        t0 = time.monotonic()
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Sleep", {"ms": 5000}, timeout=0.2)
        assert ei.value.code == "deadline_exceeded"
        assert time.monotonic() - t0 < 2
        assert await c.call("Test.Sleep", {"ms": 10}, timeout=5) == {"slept": 10}
        with pytest.raises(warren.StatusError) as ei:
            async for _ in c.stream("Test.Count", {"n": 1000, "delay_ms": 50}, timeout=0.3):
                pass
        assert ei.value.code == "deadline_exceeded"
        await wait_pending_zero(c)


async def wait_pending_zero(c):
    for _ in range(100):
        if (await c.call("Test.Pending"))["pending"] == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the server still runs the abandoned calls")


async def test_cancel(target):
    async with warren.connect(target.address, **target.options) as c:
        # Cancelling the task sends CANCEL: the server's handler stops.
        task = asyncio.ensure_future(c.call("Test.Sleep", {"ms": 10000}))
        for _ in range(100):
            if (await c.call("Test.Pending"))["pending"] == 1:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("Test.Sleep never started")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_pending_zero(c)

        # Cancel mid-stream: leaving the block cancels the call.
        got = []
        async with c.stream("Test.Count", {"n": 100000, "delay_ms": 1}) as s:
            async for m in s:
                got.append(m)
                if len(got) == 5:
                    break
        assert got == [{"i": i} for i in range(5)]

        async def reader():
            async for _ in c.stream("Test.Count", {"n": 100000, "delay_ms": 1}):
                pass

        t = asyncio.ensure_future(reader())
        await asyncio.sleep(0.1)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        # The connection is still up and serves new calls.
        assert await c.call("Test.Echo", "still up") == "still up"
        assert not c.closed
        assert await c.ping() > 0


async def test_big_messages(target):
    """A 64 MiB message each way, chunked and paced by flow control."""
    size = 64 << 20
    data = os.urandom(size)
    async with warren.connect(target.address, **target.options) as c:
        got = await c.call("Test.EchoRaw", data, timeout=60)
        assert len(got) == size and got == data
        # Test.Big answers JSON: the bytes as a base64 string.
        big = await c.call("Test.Big", {"size": 3 << 20}, timeout=60)
        pattern = bytes(range(251)) * ((3 << 20) // 251 + 1)
        assert base64.b64decode(big) == pattern[: 3 << 20]


async def test_message_over_server_limit_fails_locally(target):
    async with warren.connect(target.address, **target.options) as c:
        limit = c.server_settings.max_message_size
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.EchoRaw", bytes(limit + 1))
        assert ei.value.code == "resource_exhausted"
        assert await c.call("Test.Echo", 2) == 2


async def test_reply_over_client_limit(target):
    opts = dict(target.options, max_message_size=1 << 20)
    async with warren.connect(target.address, **opts) as c:
        with pytest.raises(warren.StatusError) as ei:
            await c.call("Test.Big", {"size": 2 << 20})
        assert ei.value.code == "resource_exhausted"
        assert await c.call("Test.Echo", 3) == 3


async def test_concurrent_calls(target):
    """1,000 concurrent calls on one connection, each with its own answer."""
    async with warren.connect(target.address, **target.options) as c:
        async def one(i):
            if i % 3 == 0:
                return await c.call("Test.EchoRaw", i.to_bytes(4, "big") * (i % 50 + 1))
            return await c.call("Test.Echo", {"i": i, "s": "x" * (i % 100)})

        got = await asyncio.gather(*(one(i) for i in range(1000)))
        for i, r in enumerate(got):
            if i % 3 == 0:
                assert r == i.to_bytes(4, "big") * (i % 50 + 1)
            else:
                assert r == {"i": i, "s": "x" * (i % 100)}


async def test_receive_flow_control(target):
    """A reader that stops reading holds at most its window: the Go server
    waits for credit, and catches up once the reader does."""
    opts = dict(target.options, initial_window=4096)
    async with warren.connect(target.address, **opts) as c:
        async with c.stream("Test.Count", {"n": 5000}) as s:
            first = await s.recv()
            await asyncio.sleep(0.3)
            st = s._st
            queued = sum(len(m) for m, _ in st.queue)
            assert 0 < queued <= 4096
            got = [first] + [m async for m in s]
        assert got == [{"i": i} for i in range(5000)]


async def test_server_ends_call_during_large_request(target):
    """The server refuses an unknown method while the client still sends a
    large request: the call reports the server's status."""
    async with warren.connect(target.address, **target.options) as c:
        with pytest.raises(warren.StatusError) as ei:
            await c.call("No.Such", bytes(16 << 20), timeout=30)
        assert ei.value.code == "unimplemented"
        async with c.client_stream("No.Such") as s:
            with pytest.raises(warren.StatusError) as ei:
                for _ in range(100):
                    await s.send({"pad": "x" * 100000})
                    await asyncio.sleep(0.001)
            assert ei.value.code == "unimplemented"
        assert await c.call("Test.Echo", 4) == 4


async def test_header_while_reading(target):
    async with warren.connect(target.address, **target.options) as c:
        async with c.bidi_stream("Test.Chat", metadata={"a": "b"}) as s:
            r = asyncio.ensure_future(s.recv())
            h = asyncio.ensure_future(s.header())
            await s.send({"x": 1})
            assert await r == {"x": 1}
            assert await h == {}
            await s.close_send()
            assert [m async for m in s] == []


async def test_break_out_of_stream_cancels_it(target):
    async with warren.connect(target.address, **target.options) as c:
        async for m in c.stream("Test.Count", {"n": 100000, "delay_ms": 1}):
            assert m == {"i": 0}
            break
        assert c._conn.open == 0 and not c._conn.streams
        assert await c.call("Test.Echo", 5) == 5


async def test_concurrent_sends_on_one_stream(target):
    """Large and small messages sent at once on one stream stay whole."""
    async with warren.connect(target.address, **target.options) as c:
        async with c.bidi_stream("Test.Chat", codec="json") as s:
            big = "y" * (3 << 20)
            await asyncio.gather(s.send({"big": big}), s.send({"small": 1}), s.send({"small": 2}))
            got = [await s.recv() for _ in range(3)]
            await s.close_send()
            assert [m async for m in s] == []
        assert sorted(map(str, got)) == sorted(map(str, [{"big": big}, {"small": 1}, {"small": 2}]))

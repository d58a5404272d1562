"""The blocking client: every call kind, from plain threads."""

from __future__ import annotations

import gc
import threading
import time

import pytest

import warren


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Every blocking client's thread is gone once it is closed."""
    before = set(threading.enumerate())
    yield
    for _ in range(100):
        left = [t for t in threading.enumerate() if t not in before and t.name == "warren-sync"]
        if not left:
            return
        time.sleep(0.01)
    raise AssertionError(f"threads left running: {left}")


@pytest.fixture
def sync_client(start_server):
    srv = start_server("unix")
    with warren.connect_sync(srv.address, server_uid="same") as c:
        yield c


def pending(c: warren.SyncClient, want: int) -> None:
    """Waits until the server runs want calls of Test.Sleep."""
    for _ in range(300):
        if c.call("Test.Pending")["pending"] == want:
            return
        time.sleep(0.01)
    raise AssertionError(f"the server never ran {want} Test.Sleep calls")


def test_bidi_stream(sync_client):
    c = sync_client
    with c.bidi_stream("Test.Chat", metadata={"k": "v"}) as s:
        for i in range(20):
            s.send({"i": i, "pad": "x" * i})
            assert s.recv() == {"i": i, "pad": "x" * i}
        for i in range(5):
            s.send(i)
        s.close_send()
        assert list(s) == list(range(5))
        with pytest.raises(StopIteration):
            s.recv()
        assert s.trailer == {}
    # The connection serves on.
    assert c.call("Test.Echo", 1) == 1


def test_bidi_stream_large_messages(sync_client):
    """Messages over the server's frame size travel chunked both ways,
    paced by flow control, while this thread blocks."""
    big = "y" * (3 << 20)
    with sync_client.bidi_stream("Test.Chat") as s:
        for _ in range(2):
            s.send(big)
            assert s.recv() == big


def test_bidi_stream_reader_thread(sync_client):
    """One thread sends while another reads the same call."""
    got: list[int] = []
    with sync_client.bidi_stream("Test.Chat") as s:
        t = threading.Thread(target=lambda: got.extend(s))
        t.start()
        for i in range(200):
            s.send(i)
        s.close_send()
        t.join(10)
    assert got == list(range(200))


def test_bidi_stream_left_early_is_cancelled(sync_client):
    c = sync_client
    with c.bidi_stream("Test.Chat") as s:
        s.send(1)
        assert s.recv() == 1
    with pytest.raises(warren.StatusError) as ei:
        s.recv()
    assert ei.value.code == "canceled"
    with pytest.raises(warren.StatusError):
        s.send(2)
    assert c.call("Test.Echo", 2) == 2


def test_client_stream(sync_client):
    c = sync_client
    with c.client_stream("Test.Sum") as s:
        for n in range(1, 11):
            s.send({"n": n})
        assert s.response() == {"sum": 55, "count": 10}
    assert c.client_stream("Test.Sum", ({"n": i} for i in range(4))) == {"sum": 6, "count": 4}
    assert c.client_stream("Test.Sum", []) == {"sum": 0, "count": 0}


def test_stream_header_and_trailer(sync_client):
    with sync_client.stream("Test.Count", {"n": 3}) as s:
        assert [m["i"] for m in s] == [0, 1, 2]
    # A unary method read as a stream: its one reply, with the metadata.
    s = sync_client.stream("Test.Metadata", {}, metadata={"k": "v"})
    assert s.header() == {"x-header": ["h"]}
    assert list(s) == [{"metadata": {"k": ["v"]}}]
    assert s.trailer == {"x-trailer": ["t"]}


def test_stream_dropped_is_cancelled(sync_client):
    """A call dropped without close() is cancelled on the client's thread:
    the server's handler stops."""
    c = sync_client
    s = c.stream("Test.Sleep", {"ms": 30000})
    s.__enter__()  # opened, not waited for
    pending(c, 1)
    del s
    gc.collect()
    pending(c, 0)


def test_errors_and_deadline(sync_client):
    c = sync_client
    with pytest.raises(warren.StatusError) as ei:
        with c.bidi_stream("Test.Chat", timeout=0.1) as s:
            s.recv()
    assert ei.value.code == "deadline_exceeded"
    with pytest.raises(warren.StatusError) as ei:
        c.client_stream("No.Such", [1])
    assert ei.value.code == "unimplemented"


def test_closed_client(start_server):
    srv = start_server("unix")
    c = warren.connect_sync(srv.address)
    s = c.bidi_stream("Test.Chat")
    s.send(1)
    assert not c.closed and c.server_settings.max_streams > 0
    c.close()
    assert c.closed
    c.close()  # twice is fine
    with pytest.raises(warren.StatusError) as ei:
        c.call("Test.Echo", 1)
    assert ei.value.code == "unavailable"
    with pytest.raises(warren.StatusError) as ei:
        s.recv()
    assert ei.value.code == "unavailable"

"""Addresses, codecs, the blocking client."""

from __future__ import annotations

import pytest

import warren


@pytest.mark.parametrize("addr,want", [
    ("unix:///run/app.sock", ("unix", "/run/app.sock", "", 0, "")),
    ("unix:rel/app.sock", ("unix", "rel/app.sock", "", 0, "")),
    ("unix:@name", ("unix", "@name", "", 0, "")),
    ("tcp://127.0.0.1:8080", ("tcp", "127.0.0.1:8080", "127.0.0.1", 8080, "/")),
    ("tls://example.com:443", ("tls", "example.com:443", "example.com", 443, "/")),
    ("ws://[::1]:80/x/y", ("ws", "[::1]:80", "::1", 80, "/x/y")),
    ("wss://h:1", ("wss", "h:1", "h", 1, "/")),
])
def test_parse_address(addr, want):
    a = warren.parse_address(addr)
    assert (a.scheme, a.address, a.host, a.port, a.path) == want


@pytest.mark.parametrize("addr", [
    "app.sock", "unix:/run/app.sock", "unix://host/run/app.sock", "unix:", "unix:@",
    "tcp://127.0.0.1", "tcp://:80x", "tcp://h:1/path", "http://h:1", "ws://h:1/?q=1", "tcp://u@h:1",
])
def test_parse_address_rejects(addr):
    with pytest.raises(ValueError):
        warren.parse_address(addr)


def test_status_error():
    e = warren.StatusError("not_found", "m", ["d"])
    assert (e.code, e.code_num, e.message, e.details, str(e)) == ("not_found", 5, "m", ["d"], "not_found: m")
    assert warren.StatusError(99).code == "unknown"
    with pytest.raises(ValueError):
        warren.StatusError("no_such_code")
    assert len(warren.CODE_NAMES) == 17


def test_codecs():
    assert warren.JSONCodec().encode({"a": "ž"}) == '{"a":"ž"}'.encode()
    with pytest.raises(TypeError):
        warren.RawCodec().encode({"a": 1})


def test_connect_sync(start_server):
    srv = start_server("unix")
    with warren.connect_sync(srv.address, server_uid="same") as c:
        assert c.call("Test.Echo", {"x": 1}) == {"x": 1}
        assert list(c.stream("Test.Count", {"n": 3})) == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert c.client_stream("Test.Sum", ({"n": i} for i in range(4))) == {"sum": 6, "count": 4}
        assert c.invoke("Test.Metadata", {}, metadata={"k": "v"}).header == {"x-header": ["h"]}
        with pytest.raises(warren.StatusError) as ei:
            c.call("Test.Sleep", {"ms": 2000}, timeout=0.05)
        assert ei.value.code == "deadline_exceeded"
        g = c.stream("Test.Count", {"n": 1000, "delay_ms": 1})
        assert next(g) == {"i": 0}
        g.close()  # cancels the call
        assert c.ping() > 0
    with pytest.raises(warren.StatusError):
        warren.connect_sync(srv.address + ".missing")


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["tls", "wss"])
async def test_tls_verifies_the_server(kind, server_bin, workdir, tls_files):
    from conftest import Server, server_address

    srv = Server(server_bin, server_address(kind, workdir), tls_files)
    try:
        with pytest.raises(warren.StatusError) as ei:
            await warren.connect(srv.address)  # the system's CAs do not know the test CA
        assert ei.value.code == "unavailable" and "certificate" in ei.value.message.lower()
        port = srv.address.rsplit(":", 1)[1]
        with pytest.raises(warren.StatusError) as ei:
            await warren.connect(f"{kind}://127.0.0.1:{port}", ca=tls_files.ca, server_hostname="not-the-name")
        assert ei.value.code == "unavailable"
        async with warren.connect(f"{kind}://127.0.0.1:{port}", ca=tls_files.ca, server_hostname="localhost") as c:
            assert await c.call("Test.Echo", 1) == 1
    finally:
        srv.stop()


def test_connect_options_match_connect():
    """connect_sync's typed options are exactly connect's keywords."""
    import inspect

    from warren._client import ConnectOptions

    params = inspect.signature(warren.connect).parameters
    assert set(ConnectOptions.__annotations__) == {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize("addr", [
    "unix:///run/app.sock", "unix:rel/app.sock", "unix:@name", "tcp://127.0.0.1:8080", "tls://example.com:443",
    "ws://[::1]:80/x/y", "wss://h:1",
])
def test_address_str_round_trips(addr):
    assert str(warren.parse_address(addr)) == addr


@pytest.mark.parametrize("opts,what", [
    ({"max_message_size": 0}, "max_message_size=0"),
    ({"max_frame_size": 100}, "max_frame_size=100"),
    ({"initial_window": 1 << 31}, "initial_window=2147483648"),
    ({"codec": "xml"}, "unknown codec 'xml'"),
])
def test_connect_rejects_bad_options(opts, what):
    """Checked before anything is dialled, with the option's name."""
    with pytest.raises(ValueError, match=what):
        warren.connect_sync("unix:///nonexistent/warren.sock", **opts)


def test_connect_error_names_the_address():
    with pytest.raises(warren.StatusError) as ei:
        warren.connect_sync("unix:///nonexistent/warren.sock")
    assert ei.value.code == "unavailable" and "unix:///nonexistent/warren.sock" in ei.value.message

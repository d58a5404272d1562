"""grpcio, unchanged, against warren's gRPC bridge (issue 29): the refusals
and failures it once showed as noise now read as gRPC statuses with
warren's message."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import grpc
import pytest

from conftest import REPO, Server

sys.path.insert(0, str(REPO / "clients" / "python" / "gen"))
import counter_pb2  # noqa: E402

TOKEN = "t" * 43


def _get(channel: grpc.Channel) -> grpc.UnaryUnaryMultiCallable:
    return channel.unary_unary(
        "/warren.counter.v1.Counter/Get",
        request_serializer=counter_pb2.GetRequest.SerializeToString,
        response_deserializer=counter_pb2.Entry.FromString,
    )


def test_refused_peer_reads_permission_denied(server_bin: Path, workdir: Path) -> None:
    srv = Server(server_bin, "", args=[str(server_bin), "-addr", f"unix://{workdir}/deny.sock", "-stdin", "-deny"])
    try:
        # The server tells HTTP from warren by what a refused peer sends
        # within 100 ms (RELIABILITY.md); a client slower than that on a
        # loaded machine is answered as a warren peer: a new channel again.
        for attempt in range(3):
            with grpc.insecure_channel(f"unix://{workdir}/deny.sock") as ch:
                with pytest.raises(grpc.RpcError) as ei:
                    _get(ch)(counter_pb2.GetRequest(name="a"), timeout=10)
            if ei.value.code() != grpc.StatusCode.UNAVAILABLE or attempt == 2:
                break
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED, ei.value
        assert "runs with -deny" in (ei.value.details() or ""), ei.value
    finally:
        srv.stop()


def test_missing_token_reads_unauthenticated(warren_serve) -> None:
    srv = warren_serve("--addr", "tcp://127.0.0.1:0", "--token", TOKEN)
    host = srv.address.removeprefix("tcp://")
    with grpc.insecure_channel(host) as ch:
        for md in ([], [("authorization", "Bearer stale")]):
            with pytest.raises(grpc.RpcError) as ei:
                _get(ch)(counter_pb2.GetRequest(name="a"), metadata=md, timeout=10)
            assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED, ei.value
            assert "requires a token" in (ei.value.details() or ""), ei.value
        with pytest.raises(grpc.RpcError) as ei:
            _get(ch)(counter_pb2.GetRequest(name="none"), metadata=[("authorization", f"Bearer {TOKEN}")], timeout=10)
        assert ei.value.code() == grpc.StatusCode.NOT_FOUND, ei.value


def test_long_name_bounded_message(target_unix: str) -> None:
    with grpc.insecure_channel(target_unix) as ch:
        with pytest.raises(grpc.RpcError) as ei:
            _get(ch)(counter_pb2.GetRequest(name="x" * 65536), timeout=10)
    assert ei.value.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), ei.value
    assert len(ei.value.details() or "") <= 1100, len(ei.value.details() or "")


def test_health_watch_serving_then_not_serving(server_bin: Path, workdir: Path) -> None:
    srv = Server(server_bin, "", args=[str(server_bin), "-addr", f"unix://{workdir}/health.sock", "-stdin", "-grace", "3s"])
    try:
        with grpc.insecure_channel(f"unix://{workdir}/health.sock") as ch:
            watch = ch.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=bytes, response_deserializer=bytes)
            it = watch(b"", timeout=10)  # HealthCheckRequest{service: ""}
            assert next(it) == b"\x08\x01"  # SERVING
            threading.Timer(0.1, srv.proc.send_signal, (signal.SIGTERM,)).start()
            assert next(it) == b"\x08\x02"  # NOT_SERVING, as the drain starts
    finally:
        srv.stop()


@pytest.fixture
def target_unix(server_bin: Path, workdir: Path):
    srv = Server(server_bin, "", args=[str(server_bin), "-addr", f"unix://{workdir}/grpcio.sock", "-stdin"])
    try:
        yield f"unix://{workdir}/grpcio.sock"
    finally:
        srv.stop()
